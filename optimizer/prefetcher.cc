#include "optimizer/prefetcher.h"

#include <utility>

#include "base/trace.h"

namespace mlpo {

Prefetcher::Prefetcher(ObjectStore* store,
                       const std::vector<Subgroup>* subgroups,
                       std::vector<int> expected, size_t depth,
                       bool for_update, bool offloaded_grads, Ahead* ahead)
    : store_(store),
      subgroups_(subgroups),
      expected_(std::move(expected)),
      depth_(depth),
      for_update_(for_update),
      offloaded_grads_(offloaded_grads),
      ahead_(ahead),
      taken_(subgroups->size(), false) {
  TopUp();
}

Prefetcher::~Prefetcher() { Drain(); }

void Prefetcher::Issue(int i) {
  TraceSpan span("checkout call", "store", "pipeline");
  const Subgroup& s = (*subgroups_)[i];
  Fetch& f = fetches_[i];
  if (offloaded_grads_)
    f.grad = store_->Checkout(GradObjectName(s));
  auto a = ahead_->find(i);
  if (a != ahead_->end()) {
    // Read ahead: used when it read what is still the newest version (a
    // reset or an initial state written since makes it stale).
    absl::StatusOr<Lease> l = a->second.get();
    ahead_->erase(a);
    if (l.ok() && (*l)->version() == store_->NewestVersion(s.object)) {
      std::promise<absl::StatusOr<Lease>> done;
      done.set_value(std::move(l));
      f.state = done.get_future();
      ++read_ahead_used_;
      return;
    }
  }
  f.state = store_->Checkout(s.object, for_update_);
}

void Prefetcher::TopUp() {
  while (fetches_.size() < depth_ && cursor_ < expected_.size()) {
    int i = expected_[cursor_++];
    if (!taken_[i] && !fetches_.count(i)) Issue(i);
  }
}

Prefetcher::Reads Prefetcher::Take(int i) {
  taken_[i] = true;
  if (!fetches_.count(i)) Issue(i);
  Fetch fetch = std::move(fetches_[i]);
  fetches_.erase(i);
  Reads r;
  r.state = fetch.state.get();
  if (offloaded_grads_) r.grad = fetch.grad.get();
  return r;
}

void Prefetcher::Drain() {
  for (auto& [i, f] : fetches_) {
    f.state.wait();
    if (f.grad.valid()) f.grad.wait();
  }
  fetches_.clear();
}

}  // namespace mlpo
