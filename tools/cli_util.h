// Small helpers shared by the mlpo CLI and mlpo-bench: progress lines and
// human-readable rates (sizes are parsed and formatted by
// base/size_units.h, which the store uses too).
#ifndef MLPO_TOOLS_CLI_UTIL_H_
#define MLPO_TOOLS_CLI_UTIL_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "base/size_units.h"  // FormatBytes

namespace mlpo {

// A progress line on stderr: rewritten in place in a terminal, one line each
// in a log. An empty line ends the progress display.
void Progress(const std::string& line);
std::string FormatRate(double bytes_per_s);     // "1523.4 MB/s"

}  // namespace mlpo

#endif  // MLPO_TOOLS_CLI_UTIL_H_
