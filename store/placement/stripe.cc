#include "store/placement/stripe.h"

#include <algorithm>
#include <cmath>

#include "store/io/io_engine.h"  // kIoAlignment

namespace mlpo {

std::vector<double> NormaliseFractions(const std::vector<double>& weights) {
  std::vector<double> out(weights.size(), 0);
  double sum = 0;
  for (double w : weights)
    if (std::isfinite(w) && w > 0) sum += w;
  for (size_t i = 0; i < weights.size(); ++i)
    out[i] = sum > 0 ? (std::isfinite(weights[i]) && weights[i] > 0
                            ? weights[i] / sum
                            : 0)
                     : 1.0 / weights.size();
  return out;
}

std::vector<uint64_t> SplitBytes(uint64_t total,
                                 const std::vector<double>& fractions,
                                 const std::vector<bool>& excluded) {
  const size_t n = fractions.size();
  std::vector<uint64_t> out(n, 0);
  auto in = [&](size_t i) { return excluded.empty() || !excluded[i]; };
  double sum = 0;
  size_t last = n, live = 0;
  for (size_t i = 0; i < n; ++i)
    if (in(i)) {
      sum += fractions[i];
      last = i;
      ++live;
    }
  if (live == 0) return out;
  uint64_t pages = total / kIoAlignment, given = 0;
  for (size_t i = 0; i < last; ++i) {
    if (!in(i)) continue;
    double f = sum > 0 ? fractions[i] / sum : 1.0 / live;
    out[i] = static_cast<uint64_t>(pages * f + 0.5) * kIoAlignment;
    out[i] = std::min(out[i], total - given);
    given += out[i];
  }
  out[last] = total - given;
  return out;
}

}  // namespace mlpo
