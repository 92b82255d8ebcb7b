// Small helpers shared by the mlpo CLI and mlpo-bench: human-readable
// formatting (sizes are parsed by store/size_units.h).
#ifndef MLPO_TOOLS_CLI_UTIL_H_
#define MLPO_TOOLS_CLI_UTIL_H_

#include <cstdint>
#include <string>


#include "absl/status/statusor.h"

namespace mlpo {

std::string FormatBytes(double bytes);
// A progress line on stderr: rewritten in place in a terminal, one line each
// in a log. An empty line ends the progress display.
void Progress(const std::string& line);          // "1.50 GiB"
std::string FormatRate(double bytes_per_s);     // "1523.4 MB/s"

}  // namespace mlpo

#endif  // MLPO_TOOLS_CLI_UTIL_H_
