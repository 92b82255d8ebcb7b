#include "tools/cli_util.h"

#include <cctype>
#include <cstdlib>

#include "absl/strings/ascii.h"
#include "absl/strings/str_format.h"

namespace mlpo {

absl::StatusOr<uint64_t> ParseSize(const std::string& s) {
  char* end = nullptr;
  double v = std::strtod(s.c_str(), &end);
  if (end == s.c_str() || v < 0)
    return absl::InvalidArgumentError("bad size '" + s + "'");
  std::string unit = absl::AsciiStrToUpper(std::string(end));
  double mult;
  if (unit.empty() || unit == "B") mult = 1;
  else if (unit == "K" || unit == "KIB") mult = 1024.0;
  else if (unit == "M" || unit == "MIB") mult = 1024.0 * 1024;
  else if (unit == "G" || unit == "GIB") mult = 1024.0 * 1024 * 1024;
  else if (unit == "T" || unit == "TIB") mult = 1024.0 * 1024 * 1024 * 1024;
  else if (unit == "KB") mult = 1e3;
  else if (unit == "MB") mult = 1e6;
  else if (unit == "GB") mult = 1e9;
  else if (unit == "TB") mult = 1e12;
  else return absl::InvalidArgumentError("bad size unit in '" + s + "'");
  return static_cast<uint64_t>(v * mult);
}

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
