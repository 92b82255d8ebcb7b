#include "optimizer/update_pipeline.h"

#include <algorithm>
#include <cstring>
#include <deque>
#include <future>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/status_macros.h"
#include "base/trace.h"
#include "optimizer/kernel/casts.h"
#include "optimizer/kernel/tile.h"
#include "optimizer/prefetcher.h"

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
    auto lease = store_->Blank(GradObjectName(s));
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

namespace {

// A subgroup's gradient in the gradient stage.
class StagedGrad : public GradSource {
 public:
  StagedGrad(const GradStage& grads, int subgroup)
      : grads_(grads), subgroup_(subgroup) {}
  const void* Span(uint64_t at, uint64_t* avail) const override {
    return grads_.Span(subgroup_, at, avail);
  }
  DType dtype() const override { return grads_.dtype(); }

 private:
  const GradStage& grads_;
  int subgroup_;
};

// A subgroup's work items: its runs cut into tiles of at most `tile`
// elements. No run given: one run per piece (int8's blocks never span two)
// with the subgroup group's constants.
struct WorkItem {
  const StepRun* run;
  uint64_t at, n;
};
std::vector<WorkItem> WorkItems(const Subgroup& s,
                                const std::vector<StepRun>& given,
                                size_t tile, std::vector<StepRun>* whole) {
  const std::vector<StepRun>* runs = &given;
  if (runs->empty()) {
    for (size_t k = 0; k < s.pieces.size(); ++k) {
      uint64_t a = s.pieces[k];
      uint64_t b = k + 1 < s.pieces.size() ? s.pieces[k + 1] : s.numel;
      if (a < b) whole->push_back({a, b - a, s.group, nullptr, DType::kF32});
    }
    runs = whole;
  }
  std::vector<WorkItem> items;
  for (const StepRun& r : *runs)
    for (uint64_t at = 0; at < r.n; at += tile)
      items.push_back({&r, at, std::min<uint64_t>(tile, r.n - at)});
  return items;
}

}  // namespace

void UpdatePipeline::DeclareOrder(const std::vector<int>& expected,
                                  const std::vector<int>& next) {
  // This step's order, then the next step's: the DRAM tier keeps what is
  // used soonest (with the alternating order, the subgroups updated last
  // now are the first of the next step).
  std::vector<std::string> coming;
  for (int i : expected) {
    const Subgroup& s = (*subgroups_)[i];
    if (options_.grad_offload) coming.push_back(GradObjectName(s));
    coming.push_back(s.object);
  }
  for (int i : next) coming.push_back((*subgroups_)[i].object);
  store_->DeclareAccessOrder(coming);
}

absl::StatusOr<int> UpdatePipeline::NextFromGate(ReadyGate* gate,
                                                 const Prefetcher& reads,
                                                 StepReport* rep) {
  absl::Time w = absl::Now();
  absl::StatusOr<int> ready = gate->Next();
  absl::Time got = absl::Now();
  rep->grad_wait_s += absl::ToDoubleSeconds(got - w);
  Trace::Get()->Complete("gradient wait", "wait", "pipeline", w, got);
  if (!ready.ok()) return ready.status();
  const int i = *ready;
  if (i < 0 || i >= static_cast<int>(subgroups_->size()) || reads.taken(i))
    return absl::InternalError(absl::StrCat("gate gave subgroup ", i));
  return i;
}

absl::Status UpdatePipeline::UpdateSubgroup(const Subgroup& s,
                                            const StepPlan& plan,
                                            const GradStage& grads,
                                            const float* offloaded,
                                            ParamSink* sink, Lease* lease,
                                            bool* p_changed,
                                            StepReport* rep) {
  float* p = (*lease)->Section<float>("p");
  MLPO_ASSIGN_OR_RETURN(StateRef st,
                        StateIn(plan.format, plan.rule, lease->get(), s.grid));
  // The model's values are adopted unless a discarded step wrote them.
  const bool adopt_here =
      plan.adopt ||
      (plan.written && static_cast<size_t>(s.index) < plan.written->size() &&
       !(*plan.written)[s.index]);
  void* out = sink ? sink->Buffer(s) : nullptr;
  const DType odt = sink ? sink->dtype() : DType::kF32;
  // (a rewind that changed p keeps it out of the DRAM tier)
  if (plan.overrides && !(*plan.overrides)[s.index].empty()) {
    ApplyOverrides((*plan.overrides)[s.index], p);
    *p_changed = true;
  }
  if (plan.adopted && static_cast<size_t>(s.index) < plan.adopted->size() &&
      !(*plan.adopted)[s.index].empty()) {
    ApplyOverrides((*plan.adopted)[s.index], p);
    *p_changed = true;
  }
  std::vector<StepRun> whole;
  const std::vector<WorkItem> items =
      WorkItems(s, plan.runs[s.index], options_.tile_elems, &whole);
  const StagedGrad staged(grads, s.index);
  const ContiguousGrad contiguous(offloaded, DType::kF32, s.numel);
  const GradSource& grad =
      offloaded ? static_cast<const GradSource&>(contiguous) : staged;
  absl::Time cs = absl::Now();
  runner_.ParallelFor(items.size(), [&](size_t ii) {
    const WorkItem& it = items[ii];
    const StepRun& r = *it.run;
    const uint64_t off = r.offset + it.at;
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
    Tile tile;
    tile.p = p;
    tile.state = &st;
    tile.off = off;
    tile.n = it.n;
    tile.out = mem ? static_cast<void*>(mem)
                   : out ? static_cast<char*>(out) + off * DTypeSize(odt)
                         : nullptr;
    tile.out_dtype = mem ? r.memory_dtype : odt;
    if (r.consts < 0 || !plan.commit) {  // no gradient: unchanged
      if (tile.out && (!mem || !adopt_here))
        CastParams(p + off, tile.out, tile.out_dtype, it.n);
    } else {
      UpdateTile(tile, grad, plan.consts[r.consts]);
    }
    // The tile's new parameters are in the sink's buffer, in cache.
    if (out != nullptr && mem == nullptr) sink->TileDone(s, off, it.n);
  });
  absl::Time ce = absl::Now();
  rep->compute_s += absl::ToDoubleSeconds(ce - cs);
  Trace::Get()->Complete(
      absl::StrCat(RuleKindName(plan.rule.kind), " ", s.object), "kernel",
      "pipeline", cs, ce, s.numel);
  return absl::OkStatus();
}

std::vector<PathCounters> UpdatePipeline::Account(
    const std::vector<PathCounters>& before, const CacheStats& cache_before,
    StepReport* rep) {
  std::vector<PathCounters> after = store_->PathTraffic();
  for (size_t p = 0; p < after.size(); ++p) {
    const PathCounters& c = after[p];
    // (with the bytes the last step's commits wrote after it returned)
    const PathBytes carried = p < carried_.size() ? carried_[p] : PathBytes();
    PathBytes b{store_->options().paths[p].path.root,
                c.bytes_read - before[p].bytes_read + carried.read,
                c.bytes_written - before[p].bytes_written + carried.written};
    rep->bytes_read += b.read;
    rep->bytes_written += b.written;
    rep->paths.push_back(b);
  }
  carried_.clear();
  CacheStats cache_after = store_->cache_stats();
  rep->cache_hits = cache_after.hits - cache_before.hits;
  rep->cache_hit_bytes = cache_after.hit_bytes - cache_before.hit_bytes;
  double moved = static_cast<double>(rep->bytes_read + rep->bytes_written);
  if (rep->total_s > 0) rep->achieved_bps = moved / rep->total_s;
  if (options_.path_mixed_bps.size() == store_->num_paths()) {
    double sum_u = 0;
    for (double u : options_.path_mixed_bps) sum_u += u;
    if (sum_u > 0) rep->lower_bound_s = moved / sum_u;
    if (options_.kernel_params_per_s > 0)
      rep->lower_bound_s = std::max(
          rep->lower_bound_s, rep->params / options_.kernel_params_per_s);
    if (rep->total_s > 0)
      rep->bound_efficiency = rep->lower_bound_s / rep->total_s;
  }
  return after;
}

// The step's loop over subgroups and its exits (about 110 lines): each
// idea is a call (header); what is left is the order of the calls and
// where an error stops the loop.
absl::StatusOr<StepReport> UpdatePipeline::Step(uint64_t t,
                                                const StepPlan& plan,
                                                const GradStage& grads,
                                                ParamSink* sink) {
  MLPO_RETURN_IF_ERROR(Settle(/*keep_read_ahead=*/true));
  StepReport rep;
  rep.step = t;
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
  if (options_.declare_order) DeclareOrder(expected, next_order);
  const CacheStats cache_before = store_->cache_stats();
  const std::vector<PathCounters> before = store_->PathTraffic();
  Carry(before);
  const absl::Time start = absl::Now();
  Prefetcher reads(store_, subgroups_, expected,
                   std::max(1, options_.prefetch_depth),
                   /*for_update=*/plan.commit, options_.grad_offload, &ahead_);
  auto window = std::make_unique<CommitWindow>(options_.max_commits_in_flight);
  CommitWindow& commits = *window;
  absl::Status error;
  int k = 0;
  last_taken_.clear();
  for (; k < count && error.ok() && commits.first_error().ok(); ++k) {
    int i = expected[k];
    if (plan.gate != nullptr) {
      absl::StatusOr<int> ready = NextFromGate(plan.gate, reads, &rep);
      if (!ready.ok()) {
        error = ready.status();
        break;
      }
      i = *ready;
    }
    const Subgroup& s = (*subgroups_)[i];
    rep.order.push_back(i);
    last_taken_.push_back(i);
    absl::Time w = absl::Now();
    Prefetcher::Reads r = reads.Take(i);
    absl::Time got = absl::Now();
    rep.read_wait_s += absl::ToDoubleSeconds(got - w);
    Trace::Get()->Complete("read wait", "wait", "pipeline", w, got);
    reads.TopUp();
    if (!r.state.ok() || (options_.grad_offload && !r.grad.ok())) {
      error = !r.state.ok() ? r.state.status() : r.grad.status();
      break;
    }
    Lease lease = std::move(*r.state);
    bool p_changed = false;
    error = UpdateSubgroup(
        s, plan, grads,
        options_.grad_offload ? (*r.grad)->Section<float>("g") : nullptr, sink,
        &lease, &p_changed, &rep);
    if (!error.ok()) break;
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
  rep.read_ahead_used = reads.read_ahead_used();
  reads.Drain();  // never leave reads behind: they borrow buffers
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
  const std::vector<PathCounters> after = Account(before, cache_before, &rep);
  if (error.ok() && plan.commit)
    ReadAhead(t, rep.order, plan.order.empty() ? OrderOf(t + 1) : rep.order,
              behind_ != nullptr ? options_.max_commits_in_flight : 0);
  if (behind_ != nullptr || !ahead_.empty()) behind_from_ = after;
  rep.fractions = options_.adaptive_placement ? store_->AdaptPlacement()
                                             : store_->placement()->fractions();
  if (!error.ok())
    return Annotate(error, absl::StrCat("step ", t, " stopped after ", k,
                                        " of ", count, " subgroups"));
  return rep;
}

}  // namespace mlpo
