// The reads of one step (docs/design.md "The update step"): the checkouts
// of the subgroups' state objects (and, when the baseline offloads them,
// their gradient objects) in the order the step expects to take them, at
// most `depth` in flight ahead of the one being updated, each served from
// the previous step's read-ahead when that read what is still the newest
// version. The step may take the subgroups in another order (the update
// during backward takes them as their gradients become final): a
// subgroup taken before it was issued is read then.
//
// Thread-safety: one step's thread uses it; the checkouts complete on the
// store's threads.
#ifndef MLPO_OPTIMIZER_PREFETCHER_H_
#define MLPO_OPTIMIZER_PREFETCHER_H_

#include <cstddef>
#include <future>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "optimizer/partition.h"
#include "store/object_store.h"

namespace mlpo {

class Prefetcher {
 public:
  using Ahead = std::map<int, std::future<absl::StatusOr<Lease>>>;
  struct Reads {
    absl::StatusOr<Lease> state = absl::UnknownError("not read");
    absl::StatusOr<Lease> grad = absl::UnknownError("not read");
  };

  // `ahead`: the read-ahead checkouts by subgroup (those used are taken
  // out of it). `grad_object`: the gradient object's name of a subgroup,
  // or empty (gradients in memory). `for_update`: the checkouts will be
  // committed (else a rewind: nothing is written).
  Prefetcher(ObjectStore* store, const std::vector<Subgroup>* subgroups,
             std::vector<int> expected, size_t depth, bool for_update,
             bool offloaded_grads, Ahead* ahead);
  // Waits for every read still in flight: they borrow buffers.
  ~Prefetcher();
  Prefetcher(const Prefetcher&) = delete;
  Prefetcher& operator=(const Prefetcher&) = delete;

  // Subgroup i's reads (blocks until they are done).
  Reads Take(int i);
  // Issues the next expected reads up to the depth (after a Take: the
  // wait it measured is the read's alone).
  void TopUp();
  // Waits for every read still in flight, and forgets them.
  void Drain();
  int read_ahead_used() const { return read_ahead_used_; }
  // Whether subgroup i was taken (Take) this step.
  bool taken(int i) const { return taken_[i]; }

 private:
  struct Fetch {
    std::future<absl::StatusOr<Lease>> state, grad;
  };
  void Issue(int i);

  ObjectStore* const store_;
  const std::vector<Subgroup>* const subgroups_;
  const std::vector<int> expected_;
  const size_t depth_;
  const bool for_update_, offloaded_grads_;
  Ahead* const ahead_;
  std::map<int, Fetch> fetches_;  // by subgroup, at most depth_
  std::vector<bool> taken_;
  size_t cursor_ = 0;  // the next of expected_ to issue
  int read_ahead_used_ = 0;
};

}  // namespace mlpo

#endif  // MLPO_OPTIMIZER_PREFETCHER_H_
