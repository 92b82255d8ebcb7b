// Parsing of byte sizes and rates written by people: "4096", "256K", "1M",
// "1.5G", "600MB". K/M/G/T (and KiB/MiB/GiB/TiB) are powers of 1024;
// KB/MB/GB/TB powers of 1000. One parser for TOML configs, the CLI and the
// benchmarks.
#ifndef MLPO_BASE_SIZE_UNITS_H_
#define MLPO_BASE_SIZE_UNITS_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace mlpo {

inline constexpr uint64_t kMaxSize = uint64_t{1} << 60;  // 1 EiB

// InvalidArgument naming the text when it is not a size: not a number,
// negative, not finite, a non-zero size under one byte, or over kMaxSize.
absl::StatusOr<uint64_t> ParseSize(absl::string_view text);

// A count of things (parameters) as people write it: "500000000", "70e9",
// "500M", "1.5B", "7B". K/M/B/G/T are powers of 1000 (B and G both 1e9:
// "7B" is seven billion parameters, as model names say). InvalidArgument
// naming the text when it is not a whole positive count of at most 2^50.
absl::StatusOr<uint64_t> ParseCount(absl::string_view text);

// A size for people, in powers of 1024 with two decimals: "512.00 B",
// "1.50 GiB". What every message, report and table of mlpo prints.
std::string FormatBytes(double bytes);

}  // namespace mlpo

#endif  // MLPO_BASE_SIZE_UNITS_H_
