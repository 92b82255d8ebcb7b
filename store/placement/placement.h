// Placement: where a store's new versions go. One object, owned by the
// ObjectStore, with its own lock: the stripe fractions in use, objects
// pinned to fractions of their own (paper mode), the rate estimates that
// adaptive placement follows, and the paths taken out after a failure
// (degraded mode). The byte split itself is stripe.h.
//
// Thread-safe.
// Layer store/placement: may include base/ and store/io (alignment) only.
#ifndef MLPO_STORE_PLACEMENT_PLACEMENT_H_
#define MLPO_STORE_PLACEMENT_PLACEMENT_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "base/mutex.h"

namespace mlpo {

// What a path moved since it was opened: bytes both ways and the wall time
// with at least one transfer in flight.
struct PathSample {
  uint64_t bytes = 0;
  double busy_s = 0;
};

class Placement {
 public:
  explicit Placement(size_t num_paths);
  Placement(const Placement&) = delete;
  Placement& operator=(const Placement&) = delete;

  size_t num_paths() const { return n_; }

  // The normalised stripe fractions in use.
  std::vector<double> fractions() const;
  // Sets them from weights (NormaliseFractions: all zero = equal shares).
  void SetWeights(const std::vector<double>& weights);

  // Pins `object`'s new versions to its own fractions; empty unpins it. An
  // error names the object when the count is not the number of paths.
  absl::Status SetObjectFractions(const std::string& object,
                                  std::vector<double> fractions);

  // The fractions `object`'s next version is split by (its own when pinned),
  // and which paths take nothing (the degraded ones).
  void ForObject(const std::string& object, std::vector<double>* fractions,
                 std::vector<bool>* excluded) const;

  // Each path's observed rate (bytes / busy time) over the interval since
  // the last call, weighted half and half with the earlier estimate (so a
  // path whose speed changes shows within a few calls). `now` holds the
  // paths' totals since open, in path order. 0 for a path that has moved
  // nothing yet.
  std::vector<double> UpdateEstimates(const std::vector<PathSample>& now);

  // Adaptive placement: fractions proportional to `rates`, water-filled
  // over each path's `room` for `demand` bytes (WaterFill), in use at once.
  // Any rate not above 0 (not measured yet) keeps the fractions as they are.
  // Returns the fractions in use.
  std::vector<double> Adapt(const std::vector<double>& rates,
                            const std::vector<uint64_t>& room,
                            uint64_t demand);

  // Degraded mode: takes `path` out of placement. kRefused when it is out of
  // range or the only healthy path left (nowhere else to go).
  enum class Degraded { kRefused, kNow, kAlready };
  Degraded Degrade(size_t path);
  bool degraded(size_t path) const;
  std::vector<bool> degraded_paths() const;

 private:
  const size_t n_;
  mutable Mutex mu_;
  std::vector<double> fractions_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::vector<double>> object_fractions_
      ABSL_GUARDED_BY(mu_);
  std::vector<bool> degraded_ ABSL_GUARDED_BY(mu_);
  // Rate estimates, under their own lock: updated once a step while
  // commits read the fractions.
  Mutex estimate_mu_;
  std::vector<PathSample> last_ ABSL_GUARDED_BY(estimate_mu_);
  std::vector<double> estimates_ ABSL_GUARDED_BY(estimate_mu_);
};

}  // namespace mlpo

#endif  // MLPO_STORE_PLACEMENT_PLACEMENT_H_
