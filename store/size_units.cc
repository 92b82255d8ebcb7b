#include "store/size_units.h"

#include <cstdlib>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

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
  return static_cast<uint64_t>(v * mult);
}

}  // namespace mlpo
