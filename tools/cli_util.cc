#include "tools/cli_util.h"

#include "absl/strings/str_format.h"

namespace mlpo {

std::string FormatBytes(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (b >= 1024 && u < 4) {
    b /= 1024;
    ++u;
  }
  return absl::StrFormat("%.2f %s", b, units[u]);
}

std::string FormatRate(double bps) {
  return absl::StrFormat("%.1f MB/s", bps / 1e6);
}

}  // namespace mlpo
