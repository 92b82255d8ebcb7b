// How an object's bytes are split over the store's paths (docs/design.md
// "The performance model"): shares proportional to each path's fraction, in whole
// 4 KiB pages, and spill-over: a path that is full is left out and its share
// goes to the paths that still have room, in proportion to their fractions.
//
// Pure functions; thread-compatible.
// Layer store/placement: may include base/ and store/io (alignment) only.
#ifndef MLPO_STORE_PLACEMENT_STRIPE_H_
#define MLPO_STORE_PLACEMENT_STRIPE_H_

#include <cstdint>
#include <vector>

namespace mlpo {

// Normalised fractions (sum 1) from weights: negative or non-finite weights
// count as 0, and all-zero weights give equal shares.
std::vector<double> NormaliseFractions(const std::vector<double>& weights);

// Splits `total` bytes over the paths by `fractions` (normalised), leaving
// out every path with excluded[i] (may be empty: none). Every share but the
// last non-excluded one is a multiple of 4 KiB; the last takes the rest. All
// zero when every path is excluded.
std::vector<uint64_t> SplitBytes(uint64_t total,
                                 const std::vector<double>& fractions,
                                 const std::vector<bool>& excluded = {});

// Stripe fractions for one step (docs/design.md "The performance model"): f_k
// proportional to each path's rate U_k, water-filled over free capacity: a
// path whose share of `demand` bytes would not fit in room[k] gets exactly
// what fits and the rest goes to the others in proportion to their rates.
// room[k] == UINT64_MAX: no limit. When the rates are all zero the
// shares are equal; when nothing fits, shares follow the room.
std::vector<double> WaterFill(const std::vector<double>& rates,
                              const std::vector<uint64_t>& room,
                              uint64_t demand);

}  // namespace mlpo

#endif  // MLPO_STORE_PLACEMENT_STRIPE_H_
