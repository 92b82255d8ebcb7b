#include "base/size_units.h"

#include <cmath>
#include <cstdlib>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace mlpo {

absl::StatusOr<uint64_t> ParseSize(absl::string_view text) {
  std::string s(text);
  char* end = nullptr;
  double v = std::strtod(s.c_str(), &end);
  if (s.empty() || end == s.c_str() || !(v >= 0))
    return absl::InvalidArgumentError(absl::StrCat("bad size '", text, "'"));
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
  else
    return absl::InvalidArgumentError(
        absl::StrCat("bad size unit in '", text,
                     "' (use K, M, G, T for powers of 1024 or KB, MB, GB, TB)"));
  // Non-finite, sub-byte and absurd sizes are errors, never a silent 0 or a
  // wrapped number: 0 means "uncapped" or "unlimited" in many options.
  double bytes = v * mult;
  if (!std::isfinite(bytes))
    return absl::InvalidArgumentError(
        absl::StrCat("bad size '", text, "': not a finite number"));
  if (bytes > static_cast<double>(kMaxSize))
    return absl::InvalidArgumentError(absl::StrCat(
        "bad size '", text, "': larger than the most mlpo accepts (1 EiB)"));
  if (v > 0 && bytes < 1)
    return absl::InvalidArgumentError(
        absl::StrCat("bad size '", text, "': less than one byte"));
  return static_cast<uint64_t>(bytes);
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

absl::StatusOr<uint64_t> ParseCount(absl::string_view text) {
  std::string s(absl::StripAsciiWhitespace(text));
  char* end = nullptr;
  double v = std::strtod(s.c_str(), &end);
  if (s.empty() || end == s.c_str() || !std::isfinite(v) || v <= 0)
    return absl::InvalidArgumentError(absl::StrCat(
        "bad count '", text, "': expected a positive number such as "
        "500000000, 70e9, 500M or 7B"));
  std::string unit = absl::AsciiStrToUpper(std::string(end));
  double mult;
  if (unit.empty()) mult = 1;
  else if (unit == "K") mult = 1e3;
  else if (unit == "M") mult = 1e6;
  else if (unit == "B" || unit == "G") mult = 1e9;
  else if (unit == "T") mult = 1e12;
  else
    return absl::InvalidArgumentError(absl::StrCat(
        "bad count unit in '", text, "' (K, M, B or G, T: powers of 1000)"));
  double n = v * mult;
  if (n > static_cast<double>(uint64_t{1} << 50))
    return absl::InvalidArgumentError(
        absl::StrCat("bad count '", text, "': more than 2^50"));
  if (n != std::floor(n))
    return absl::InvalidArgumentError(
        absl::StrCat("bad count '", text, "': not a whole number"));
  return static_cast<uint64_t>(n);
}

}  // namespace mlpo
