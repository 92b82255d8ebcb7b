// ObjectStore: where new versions go. The stripe fractions (from options,
// `mlpo profile`, or the observed rates every step: AdaptPlacement), objects
// pinned to their own fractions (paper mode), the split of each commit into
// per-path ranges with spill-over when a path is full, and degraded mode
// when a path fails. The split itself is store/placement/stripe.h.
#include <algorithm>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "store/object_store.h"
#include "store/placement/stripe.h"

namespace mlpo {

std::vector<double> ObjectStore::UpdateBandwidthEstimates() {
  std::vector<PathSample> now;
  for (auto& p : paths_) {
    PathCounters c = p->Counters();
    now.push_back({c.bytes_read + c.bytes_written, c.busy_s});
  }
  return placement_->UpdateEstimates(now);
}

std::vector<double> ObjectStore::AdaptPlacement() {
  std::vector<double> rates = UpdateBandwidthEstimates();
  // Explicit fractions stay as written unless `adaptive = true`.
  bool explicit_fractions = false;
  for (auto& pc : options_.paths) explicit_fractions |= pc.fraction > 0;
  if (options_.adaptive == 0 || (options_.adaptive < 0 && explicit_fractions))
    return placement_->fractions();
  uint64_t demand = 0;
  {
    MutexLock l(&mu_);
    for (auto& [name, os] : objects_) demand += os.layout.total_bytes();
  }
  std::vector<uint64_t> room;
  for (size_t k = 0; k < paths_.size(); ++k)
    room.push_back(paths_[k]->options().capacity == 0 ? UINT64_MAX
                                              : paths_[k]->Usage().free);
  return placement_->Adapt(rates, room, demand);
}

absl::Status ObjectStore::AllocateStripes(
    const std::string& where, const std::string& object, uint64_t total,
    std::vector<std::vector<Range>>* ranges) {
  const size_t n = paths_.size();
  ranges->assign(n, {});
  std::vector<bool> full;
  std::vector<double> fractions;
  // A failed path takes nothing new (degraded mode): it counts as full.
  placement_->ForObject(object, &fractions, &full);
  std::vector<uint64_t> want = SplitBytes(total, fractions, full);
  auto fail = [&](const absl::Status& st) {
    for (size_t p = 0; p < n; ++p)
      for (const Range& r : (*ranges)[p]) (void)paths_[p]->Free(r);
    ranges->assign(n, {});
    return Annotate(st, where);
  };
  for (bool again = true; again;) {
    again = false;
    for (size_t p = 0; p < n; ++p) {
      if (want[p] == 0) continue;
      auto r = paths_[p]->Allocate(want[p]);
      if (r.ok()) {
        (*ranges)[p].insert((*ranges)[p].end(), r->begin(), r->end());
        want[p] = 0;
        continue;
      }
      if (!absl::IsResourceExhausted(r.status())) return fail(r.status());
      // Spill-over: what still fits stays here, the rest goes to the paths
      // with room, by their fractions.
      uint64_t fit = std::min(want[p], paths_[p]->Usage().free) /
                     kIoAlignment * kIoAlignment;
      if (fit > 0) {
        auto part = paths_[p]->Allocate(fit);
        if (part.ok()) {
          (*ranges)[p].insert((*ranges)[p].end(), part->begin(), part->end());
          want[p] -= fit;
        }
      }
      full[p] = true;
      uint64_t spill = want[p];
      want[p] = 0;
      if (std::all_of(full.begin(), full.end(), [](bool f) { return f; })) {
        std::string roots;
        for (auto& path : paths_)
          absl::StrAppend(&roots, roots.empty() ? "" : ", ", path->root());
        return fail(absl::ResourceExhaustedError(absl::StrCat(
            "every path is full (", roots, "): ", r.status().message())));
      }
      std::vector<uint64_t> extra = SplitBytes(spill, fractions, full);
      for (size_t q = 0; q < n; ++q) want[q] += extra[q];
      again = true;
    }
  }
  return absl::OkStatus();
}

bool ObjectStore::Degrade(int path, const absl::Status& why) {
  if (path < 0 || static_cast<size_t>(path) >= paths_.size()) return false;
  // Only I/O failures of the path itself; a full path is spill-over's.
  if (absl::IsResourceExhausted(why) || absl::IsFailedPrecondition(why) ||
      absl::IsInvalidArgument(why))
    return false;
  Placement::Degraded d = placement_->Degrade(path);
  if (d == Placement::Degraded::kRefused) return false;  // nowhere else to go
  if (d == Placement::Degraded::kNow) {
    std::fprintf(stderr,
                 "mlpo: WARNING: %s: path %s failed (%s); new versions go to "
                 "the remaining paths from now on (degraded). Objects whose "
                 "only copy is there are named by `mlpo verify`; restore a "
                 "tag whose copy survives\n",
                 Where().c_str(), paths_[path]->root().c_str(),
                 std::string(why.message()).c_str());
  }
  return true;
}

}  // namespace mlpo
