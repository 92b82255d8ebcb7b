#include "tools/cli_util.h"

#include <unistd.h>

#include <cstdio>

#include "absl/strings/str_format.h"

namespace mlpo {

void Progress(const std::string& line) {
  static const bool tty = isatty(STDERR_FILENO);
  if (tty)
    std::fprintf(stderr, "\r\033[K%s", line.c_str());
  else if (!line.empty())
    std::fprintf(stderr, "%s\n", line.c_str());
  std::fflush(stderr);
}

std::string FormatRate(double bps) {
  return absl::StrFormat("%.1f MB/s", bps / 1e6);
}

}  // namespace mlpo
