// Small helpers shared by the mlpo CLI and mlpo-bench: size parsing and
// human-readable formatting.
#ifndef MLPO_TOOLS_CLI_UTIL_H_
#define MLPO_TOOLS_CLI_UTIL_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace mlpo {

// "4096", "256K", "1M", "2G", "1.5G", "600MB" (powers of 1024 for K/M/G/T;
// "MB"/"GB" powers of 1000).
absl::StatusOr<uint64_t> ParseSize(const std::string& s);
std::string FormatBytes(double bytes);          // "1.50 GiB"
std::string FormatRate(double bytes_per_s);     // "1523.4 MB/s"

}  // namespace mlpo

#endif  // MLPO_TOOLS_CLI_UTIL_H_
