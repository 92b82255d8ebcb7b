// CLI11 validators shared by the mlpo CLI and mlpo-bench for options that
// take a number. CLI::Range lets nan through (every comparison with it is
// false), and an option left at a "not given" default (0) must not also
// be what a typo gives: these refuse nan, inf and out-of-range values
// with the bound in words.
#ifndef MLPO_TOOLS_CLI_CHECKS_H_
#define MLPO_TOOLS_CLI_CHECKS_H_

#include <cmath>
#include <string>

#include "CLI/CLI.hpp"
#include "absl/strings/str_format.h"

namespace mlpo {

inline CLI::Validator FiniteIn(double lo, double hi) {
  return CLI::Validator(
      [lo, hi](std::string& s) -> std::string {
        double v = 0;
        size_t used = 0;
        try {
          v = std::stod(s, &used);
        } catch (...) {
          used = 0;
        }
        if (used == 0 || used != s.size() || !std::isfinite(v) || v < lo ||
            v > hi)
          return absl::StrFormat("'%s' must be a number from %g to %g", s,
                                 lo, hi);
        return std::string();
      },
      absl::StrFormat("NUMBER in [%g, %g]", lo, hi));
}

// A name that must be given: an empty one ("--tag ''", a variable that
// expanded to nothing) was taken as not given, and the command acted on
// the heads (or on no path) instead.
inline CLI::Validator NotEmpty() {
  return CLI::Validator(
      [](std::string& s) -> std::string {
        return s.empty() ? "must not be empty" : std::string();
      },
      "NAME");
}

}  // namespace mlpo

#endif  // MLPO_TOOLS_CLI_CHECKS_H_
