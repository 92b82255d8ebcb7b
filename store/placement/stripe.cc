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

std::vector<double> WaterFill(const std::vector<double>& rates,
                              const std::vector<uint64_t>& room,
                              uint64_t demand) {
  const size_t n = rates.size();
  std::vector<double> w = NormaliseFractions(rates);
  if (demand == 0 || room.size() != n) return w;
  std::vector<double> f(n, 0.0);
  std::vector<bool> capped(n, false);
  double left = 1.0;  // share of demand still to place
  for (size_t round = 0; round < n && left > 1e-12; ++round) {
    double wsum = 0;
    for (size_t k = 0; k < n; ++k)
      if (!capped[k]) wsum += w[k];
    if (wsum <= 0) break;
    bool newly_capped = false;
    for (size_t k = 0; k < n; ++k) {
      if (capped[k]) continue;
      double share = left * w[k] / wsum;
      double fits = room[k] == UINT64_MAX
                        ? 1.0
                        : static_cast<double>(room[k]) /
                              static_cast<double>(demand);
      if (f[k] + share > fits) {
        capped[k] = true;
        newly_capped = true;
      }
    }
    if (!newly_capped) {
      for (size_t k = 0; k < n; ++k)
        if (!capped[k]) f[k] += left * w[k] / wsum;
      left = 0;
      break;
    }
    // Give each newly full path what fits, then spread the rest again.
    for (size_t k = 0; k < n; ++k) {
      if (!capped[k] || f[k] > 0) continue;
      double fits = static_cast<double>(room[k]) / static_cast<double>(demand);
      f[k] = fits;
      left -= fits;
      w[k] = 0;
    }
  }
  double total = 0;
  for (double x : f) total += x;
  if (total <= 0) {
    // Nothing has room for its share: shares follow the room itself.
    std::vector<double> r(n);
    for (size_t k = 0; k < n; ++k)
      r[k] = room[k] == UINT64_MAX ? 1e30 : static_cast<double>(room[k]);
    return NormaliseFractions(r);
  }
  return NormaliseFractions(f);
}

}  // namespace mlpo
