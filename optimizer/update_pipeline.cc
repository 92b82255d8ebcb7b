#include "optimizer/update_pipeline.h"

#include <algorithm>
#include <cstring>
#include <deque>
#include <future>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/status_macros.h"
#include "base/trace.h"

namespace mlpo {

// Commits in flight: at most `limit`; keeps the first error and the time
// spent waiting for them.
class UpdatePipeline::CommitWindow {
 public:
  explicit CommitWindow(int limit) : limit_(std::max(1, limit)) {}
  void Push(std::future<absl::Status> f) {
    pending_.push_back(std::move(f));
    while (static_cast<int>(pending_.size()) > limit_) WaitOldest();
  }
  absl::Status Drain() {
    while (!pending_.empty()) WaitOldest();
    return first_error_;
  }
  const absl::Status& first_error() const { return first_error_; }
  double wait_s() const { return wait_s_; }

 private:
  void WaitOldest() {
    absl::Time w = absl::Now();
    absl::Status st = pending_.front().get();
    absl::Time done = absl::Now();
    wait_s_ += absl::ToDoubleSeconds(done - w);
    Trace::Get()->Complete("write wait", "wait", "pipeline", w, done);
    pending_.pop_front();
    if (first_error_.ok() && !st.ok()) first_error_ = st;
  }
  const int limit_;
  std::deque<std::future<absl::Status>> pending_;
  absl::Status first_error_;
  double wait_s_ = 0;
};

using CommitWindow = UpdatePipeline::CommitWindow;

void ApplyOverrides(const std::map<uint64_t, std::vector<float>>& overrides,
                    float* p) {
  for (auto& [off, vals] : overrides)
    std::memcpy(p + off, vals.data(), vals.size() * sizeof(float));
}

UpdatePipeline::UpdatePipeline(ObjectStore* store,
                               const std::vector<Subgroup>* subgroups,
                               const PipelineOptions& options)
    : store_(store),
      subgroups_(subgroups),
      options_(options),
      runner_(options.threads) {}

UpdatePipeline::~UpdatePipeline() { (void)Settle(); }

absl::Status UpdatePipeline::Settle(bool keep_read_ahead) {
  if (!keep_read_ahead) DropReadAhead();
  absl::Status st;
  if (behind_ != nullptr) {
    absl::Time w = absl::Now();
    st = behind_->Drain();
    Trace::Get()->Complete("write-behind drain", "wait", "pipeline", w,
                           absl::Now());
    behind_.reset();
  }
  // What the commits and read-ahead moved after the step returned goes
  // into the next step's report: counted here when another call comes
  // first (all of it has landed now), else at that step's start (the
  // read-ahead may still be landing).
  if (!keep_read_ahead) Carry(store_->PathTraffic());
  return Annotate(st, absl::StrCat("step ", behind_step_,
                                   "'s commits (written behind)"));
}

void UpdatePipeline::Carry(const std::vector<PathCounters>& now) {
  if (behind_from_.empty()) return;
  carried_.assign(now.size(), PathBytes());
  for (size_t p = 0; p < now.size() && p < behind_from_.size(); ++p) {
    carried_[p].read = now[p].bytes_read - behind_from_[p].bytes_read;
    carried_[p].written = now[p].bytes_written - behind_from_[p].bytes_written;
  }
  behind_from_.clear();
}

std::vector<int> UpdatePipeline::OrderOf(uint64_t t) const {
  const int n = static_cast<int>(subgroups_->size());
  std::vector<int> order;
  for (int k = 0; k < n; ++k)
    order.push_back(options_.alternate_order && (t % 2 == 0) ? n - 1 - k : k);
  return order;
}

void UpdatePipeline::ReadAhead(uint64_t t, const std::vector<int>& order,
                               const std::vector<int>& next, int in_flight) {
  DropReadAhead();
  if (options_.read_ahead <= 0 || options_.grad_offload) return;
  // The objects whose commits may still be in flight must not be read
  // before they land; the ones the DRAM tier holds need no read.
  std::vector<bool> skip(subgroups_->size(), false);
  for (int k = std::max(0, static_cast<int>(order.size()) - in_flight);
       k < static_cast<int>(order.size()); ++k)
    skip[order[k]] = true;
  ahead_step_ = t + 1;
  for (int i : next) {
    if (static_cast<int>(ahead_.size()) >= options_.read_ahead) break;
    const Subgroup& s = (*subgroups_)[i];
    if (skip[i] || store_->Resident(s.object)) continue;
    TraceSpan span("read-ahead call", "store", "pipeline");
    // (not lent: the next step's transaction keeps what it replaces)
    ahead_.emplace(i, store_->Checkout(s.object, /*for_update=*/false));
  }
}

void UpdatePipeline::DropReadAhead() {
  for (auto& [i, f] : ahead_) {
    absl::StatusOr<Lease> l = f.get();
    // Unused: back to the DRAM tier when it is still the clean head.
    if (l.ok()) store_->Return(std::move(*l));
  }
  ahead_.clear();
}

absl::Status UpdatePipeline::OffloadGrads(uint64_t t, const GradStage& grads) {
  MLPO_RETURN_IF_ERROR(Settle());
  CommitWindow commits(options_.max_commits_in_flight);
  for (const Subgroup& s : *subgroups_) {
    auto lease = store_->Blank(GradObject(s));
    if (!lease.ok()) {
      (void)commits.Drain();  // never leave writes behind
      return lease.status();
    }
    float* g = (*lease)->Section<float>("g");
    for (uint64_t at = 0; at < s.numel;) {
      uint64_t n = 0;
      const void* src = grads.Span(s.index, at, &n);
      for (uint64_t i = 0; i < n; ++i)
        g[at + i] = LoadAsFloat(src, grads.dtype(), i);
      at += n;
    }
    commits.Push(store_->Commit(*lease, t));
  }
  return commits.Drain();
}

absl::StatusOr<StepReport> UpdatePipeline::Step(uint64_t t,
                                                const StepPlan& plan,
                                                const GradStage& grads,
                                                ParamSink* sink) {
  MLPO_RETURN_IF_ERROR(Settle(/*keep_read_ahead=*/true));
  StepReport rep;
  rep.step = t;
  const int n = static_cast<int>(subgroups_->size());
  // The order expected (a gate may hand the subgroups out in another);
  // rep.order becomes the order taken.
  const std::vector<int> expected =
      !plan.only.empty() ? plan.only
                         : plan.order.empty() ? OrderOf(t) : plan.order;
  const int count = static_cast<int>(expected.size());
  const std::vector<int> next_order =
      plan.order.empty() ? OrderOf(t + 1) : plan.order;
  // The previous step's read-ahead (another step's is given back).
  if (ahead_step_ != t) DropReadAhead();
  if (options_.declare_order) {
    // This step's order, then the next step's: the DRAM tier keeps what is
    // used soonest (with the alternating order, the subgroups updated last
    // now are the first of the next step).
    std::vector<std::string> coming;
    for (int i : expected) {
      const Subgroup& s = (*subgroups_)[i];
      if (options_.grad_offload) coming.push_back(GradObject(s));
      coming.push_back(s.object);
    }
    for (int i : next_order) coming.push_back((*subgroups_)[i].object);
    store_->DeclareAccessOrder(coming);
  }
  CacheStats cache_before = store_->cache_stats();
  std::vector<PathCounters> before = store_->PathTraffic();
  Carry(before);
  absl::Time start = absl::Now();
  const size_t depth = std::max(1, options_.prefetch_depth);
  struct Fetch {
    std::future<absl::StatusOr<Lease>> state, grad;
  };
  std::map<int, Fetch> fetches;  // by subgroup, at most `depth`
  std::vector<bool> taken(n, false);
  size_t cursor = 0;  // the next of `expected` to issue
  auto issue = [&](int i) {
    TraceSpan span("checkout call", "store", "pipeline");
    const Subgroup& s = (*subgroups_)[i];
    Fetch& f = fetches[i];
    if (options_.grad_offload) f.grad = store_->Checkout(GradObject(s));
    auto a = ahead_.find(i);
    if (a != ahead_.end()) {
      // Read ahead: used when it read what is still the newest version
      // (a reset or an initial state written since makes it stale).
      absl::StatusOr<Lease> l = a->second.get();
      ahead_.erase(a);
      if (l.ok() && (*l)->version() == store_->NewestVersion(s.object)) {
        std::promise<absl::StatusOr<Lease>> done;
        done.set_value(std::move(l));
        f.state = done.get_future();
        ++rep.read_ahead_used;
        return;
      }
    }
    f.state = store_->Checkout(s.object, /*for_update=*/plan.commit);
  };
  auto top_up = [&] {
    while (fetches.size() < depth && cursor < expected.size()) {
      int i = expected[cursor++];
      if (!taken[i] && !fetches.count(i)) issue(i);
    }
  };
  top_up();
  auto window = std::make_unique<CommitWindow>(options_.max_commits_in_flight);
  CommitWindow& commits = *window;
  absl::Status error;
  std::vector<int> order;  // as taken
  int k = 0;
  last_taken_.clear();
  for (; k < count && error.ok() && commits.first_error().ok(); ++k) {
    int i = expected[k];
    if (plan.gate != nullptr) {
      absl::Time w = absl::Now();
      absl::StatusOr<int> ready = plan.gate->Next();
      absl::Time got = absl::Now();
      rep.grad_wait_s += absl::ToDoubleSeconds(got - w);
      Trace::Get()->Complete("gradient wait", "wait", "pipeline", w, got);
      if (!ready.ok()) {
        error = ready.status();
        break;
      }
      i = *ready;
      if (i < 0 || i >= n || taken[i]) {
        error = absl::InternalError(absl::StrCat("gate gave subgroup ", i));
        break;
      }
    }
    const Subgroup& s = (*subgroups_)[i];
    taken[i] = true;
    order.push_back(i);
    last_taken_.push_back(i);
    if (!fetches.count(i)) issue(i);
    Fetch fetch = std::move(fetches[i]);
    fetches.erase(i);
    absl::Time w = absl::Now();
    absl::StatusOr<Lease> state = fetch.state.get();
    absl::StatusOr<Lease> glease = absl::UnknownError("unused");
    if (options_.grad_offload) glease = fetch.grad.get();
    absl::Time got = absl::Now();
    rep.read_wait_s += absl::ToDoubleSeconds(got - w);
    Trace::Get()->Complete("read wait", "wait", "pipeline", w, got);
    top_up();
    if (!state.ok()) {
      error = state.status();
      break;
    }
    if (options_.grad_offload && !glease.ok()) {
      error = glease.status();
      break;
    }
    Lease lease = std::move(*state);
    const float* goff =
        options_.grad_offload ? (*glease)->Section<float>("g") : nullptr;
    DType gdt = options_.grad_offload ? DType::kF32 : grads.dtype();
    float* p = lease->Section<float>("p");
    absl::StatusOr<StateRef> st =
        StateIn(plan.format, plan.rule, lease.get(), s.grid);
    if (!st.ok()) {
      error = st.status();
      break;
    }
    // The model's values are adopted unless a discarded step wrote them.
    const bool adopt_here =
        plan.adopt ||
        (plan.written && static_cast<size_t>(s.index) < plan.written->size() &&
         !(*plan.written)[s.index]);
    const bool int8 = plan.format == StateFormat::kInt8Moments;
    const size_t msize = MomentBytes(plan.format);
    void* out = sink ? sink->Buffer(s) : nullptr;
    DType odt = sink ? sink->dtype() : DType::kF32;
    bool p_changed = false;  // (a rewind that changed p keeps it out of
                             // the DRAM tier)
    if (plan.overrides && !(*plan.overrides)[s.index].empty()) {
      ApplyOverrides((*plan.overrides)[s.index], p);
      p_changed = true;
    }
    if (plan.adopted && static_cast<size_t>(s.index) < plan.adopted->size() &&
        !(*plan.adopted)[s.index].empty()) {
      ApplyOverrides((*plan.adopted)[s.index], p);
      p_changed = true;
    }
    // Work items: (run, first element, count), runs cut into tiles.
    std::vector<StepRun> whole;
    const std::vector<StepRun>* runs = &plan.runs[s.index];
    if (runs->empty()) {
      // One run per piece: int8's blocks never span two.
      for (size_t k = 0; k < s.pieces.size(); ++k) {
        uint64_t a = s.pieces[k];
        uint64_t b = k + 1 < s.pieces.size() ? s.pieces[k + 1] : s.numel;
        if (a < b) whole.push_back({a, b - a, s.group, nullptr, DType::kF32});
      }
      runs = &whole;
    }
    const size_t tile = options_.tile_elems;
    struct Item {
      const StepRun* run;
      uint64_t at, n;
    };
    std::vector<Item> items;
    for (const StepRun& r : *runs)
      for (uint64_t at = 0; at < r.n; at += tile)
        items.push_back({&r, at, std::min<uint64_t>(tile, r.n - at)});
    absl::Time cs = absl::Now();
    auto update = [&](size_t ii) {
      const Item& it = items[ii];
      const StepRun& r = *it.run;
      size_t off = r.offset + it.at;
      char* mem = r.memory ? static_cast<char*>(r.memory) +
                                 it.at * DTypeSize(r.memory_dtype)
                           : nullptr;
      if (mem && adopt_here &&
          AdoptModelValues(p + off, mem, r.memory_dtype, it.n) && plan.log) {
        MutexLock l(&plan.log->mu);
        auto& logged = plan.log->by_subgroup;
        if (logged.size() < subgroups_->size()) logged.resize(subgroups_->size());
        logged[s.index][off].assign(p + off, p + off + it.n);
      }
      void* o = mem ? static_cast<void*>(mem)
                    : out ? static_cast<char*>(out) + off * DTypeSize(odt)
                          : nullptr;
      DType od = mem ? r.memory_dtype : odt;
      if (r.consts < 0 || !plan.commit) {  // no gradient: unchanged
        if (o && (!mem || !adopt_here)) CastParams(p + off, o, od, it.n);
        return;
      }
      auto slice = [&](uint64_t at, uint64_t n, const void* gp, DType gd) {
        RuleSlice sl;
        sl.p = p + at;
        sl.grad = gp;
        sl.grad_dtype = gd;
        sl.out = o ? static_cast<char*>(o) + (at - off) * DTypeSize(od)
                   : nullptr;
        sl.out_dtype = od;
        sl.n = n;
        sl.format = plan.format;
        sl.slots = st->slots;
        for (int k = 0; k < st->slots; ++k) {
          sl.slot[k] = static_cast<char*>(st->slot[k]) + at * msize;
          sl.nonneg[k] = st->nonneg[k];
          if (int8) sl.scale[k] = st->scale[k] + s.grid.Block(at);
        }
        return sl;
      };
      // One kernel call per contiguous stretch of gradient (a borrowed
      // slice or the stage's copy); int8 needs whole blocks in one call,
      // so a tile whose gradient is in pieces is gathered first.
      if (goff) {
        RuleUpdate(slice(off, it.n, goff + off, gdt), plan.consts[r.consts]);
        return;
      }
      uint64_t avail = 0;
      const void* gp = grads.Span(s.index, off, &avail);
      if (avail >= it.n || !int8) {
        for (uint64_t done = 0; done < it.n;) {
          uint64_t n = std::min(it.n - done, avail);
          RuleUpdate(slice(off + done, n, gp, gdt), plan.consts[r.consts]);
          done += n;
          if (done < it.n) gp = grads.Span(s.index, off + done, &avail);
        }
        return;
      }
      std::vector<float> gather(it.n);
      for (uint64_t done = 0; done < it.n;) {
        uint64_t n = std::min(it.n - done, avail);
        for (uint64_t i = 0; i < n; ++i)
          gather[done + i] = LoadAsFloat(gp, gdt, i);
        done += n;
        if (done < it.n) gp = grads.Span(s.index, off + done, &avail);
      }
      RuleUpdate(slice(off, it.n, gather.data(), DType::kF32),
                 plan.consts[r.consts]);
    };
    runner_.ParallelFor(items.size(), [&](size_t ii) {
      update(ii);
      // The tile's new parameters are in the sink's buffer, in cache.
      const Item& it = items[ii];
      if (out != nullptr && it.run->memory == nullptr)
        sink->TileDone(s, it.run->offset + it.at, it.n);
    });
    absl::Time ce = absl::Now();
    rep.compute_s += absl::ToDoubleSeconds(ce - cs);
    Trace::Get()->Complete(
        absl::StrCat(RuleKindName(plan.rule.kind), " ", s.object), "kernel",
        "pipeline", cs, ce, s.numel);
    if (!plan.commit) {
      // A rewind: the checkout goes back (to the DRAM tier when unchanged).
      if (!p_changed) store_->Return(std::move(lease));
    } else {
      // Handed over: a lease only the store holds can stay in the DRAM
      // tier.
      TraceSpan span("commit call", "store", "pipeline");
      commits.Push(store_->Commit(std::move(lease), t));
    }
    if (sink) {
      absl::Status ps = sink->Publish(s);
      if (!ps.ok()) error = ps;
    }
    rep.params += s.numel;
  }
  // Never leave reads or writes behind: they borrow buffers.
  for (auto& [i, f] : fetches) {
    f.state.wait();
    if (f.grad.valid()) f.grad.wait();
  }
  rep.order = order;
  DropReadAhead();  // what a step cut short did not take
  // Write-behind: the last commits drain until Settle(); an error or a
  // step cut short drains them now.
  if (options_.write_behind && plan.commit && error.ok() &&
      commits.first_error().ok()) {
    behind_ = std::move(window);
    behind_step_ = t;
  } else {
    absl::Status commit_error = commits.Drain();
    if (error.ok()) error = commit_error;
  }
  if (sink) {
    // The device end: every parameter copy started this step is done.
    absl::Status flushed = sink->Flush();
    if (error.ok()) error = flushed;
  }
  rep.write_wait_s = commits.wait_s();
  rep.total_s = absl::ToDoubleSeconds(absl::Now() - start);
  std::vector<PathCounters> after = store_->PathTraffic();
  for (size_t p = 0; p < after.size(); ++p) {
    const PathCounters& c = after[p];
    // (with the bytes the last step's commits wrote after it returned)
    const PathBytes carried = p < carried_.size() ? carried_[p] : PathBytes();
    PathBytes b{store_->options().paths[p].path.root,
                c.bytes_read - before[p].bytes_read + carried.read,
                c.bytes_written - before[p].bytes_written + carried.written};
    rep.bytes_read += b.read;
    rep.bytes_written += b.written;
    rep.paths.push_back(b);
  }
  carried_.clear();
  if (error.ok() && plan.commit)
    ReadAhead(t, rep.order, plan.order.empty() ? OrderOf(t + 1) : rep.order,
              behind_ != nullptr ? options_.max_commits_in_flight : 0);
  if (behind_ != nullptr || !ahead_.empty()) behind_from_ = after;
  rep.fractions = options_.adaptive_placement ? store_->AdaptPlacement()
                                             : store_->placement()->fractions();
  CacheStats cache_after = store_->cache_stats();
  rep.cache_hits = cache_after.hits - cache_before.hits;
  rep.cache_hit_bytes = cache_after.hit_bytes - cache_before.hit_bytes;
  double moved = static_cast<double>(rep.bytes_read + rep.bytes_written);
  if (rep.total_s > 0) rep.achieved_bps = moved / rep.total_s;
  if (options_.path_mixed_bps.size() == store_->num_paths()) {
    double sum_u = 0;
    for (double u : options_.path_mixed_bps) sum_u += u;
    if (sum_u > 0) rep.lower_bound_s = moved / sum_u;
    if (options_.kernel_params_per_s > 0)
      rep.lower_bound_s = std::max(
          rep.lower_bound_s, rep.params / options_.kernel_params_per_s);
    if (rep.total_s > 0) rep.bound_efficiency = rep.lower_bound_s / rep.total_s;
  }
  if (!error.ok())
    return Annotate(error, absl::StrCat("step ", t, " stopped after ", k,
                                        " of ", count, " subgroups"));
  return rep;
}

}  // namespace mlpo
