// `mlpo-bench step`: one mode's run (see step_mode.h).
#include "bench/step_mode.h"

#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <thread>
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "base/removed_on_signal.h"
#include "base/trace.h"
#include "bench/bench_common.h"
#include "bench/kernel_rate.h"
#include "nlohmann/json.hpp"
#include "optimizer/optimizer.h"
#include "tools/probe/bandwidth_probe.h"
#include "tools/cli_util.h"

namespace mlpo {
namespace {

[[noreturn]] void Die(const std::string& what, const absl::Status& s) {
  BenchFail("step", what, s);
}


// A parameter sink that keeps nothing: one subgroup's buffer, read once per
// publish (as a host-to-device copy would), like the GPU end of a real run.
class StreamingSink final : public ParamSink {
 public:
  explicit StreamingSink(uint64_t max_numel) : buf_(max_numel * 2) {}
  DType dtype() const override { return DType::kBF16; }
  void* Buffer(const Subgroup&) override { return buf_.data(); }
  absl::Status Publish(const Subgroup& s) override {
    const uint64_t* w = reinterpret_cast<const uint64_t*>(buf_.data());
    for (uint64_t i = 0; i < s.numel * 2 / 8; ++i) sum_ += w[i];
    return absl::OkStatus();
  }

 private:
  AlignedBuffer buf_;
  uint64_t sum_ = 0;
};

// A "KEY: N kB" line of a /proc file, in bytes; 0 when absent.
uint64_t ProcKilobytes(const char* file, const std::string& key) {
  std::ifstream in(file);
  std::string line;
  while (std::getline(in, line))
    if (line.rfind(key, 0) == 0)
      return std::stoull(line.substr(key.size())) * 1024;
  return 0;
}

// Peak resident memory of this process so far (VmHWM), bytes.
uint64_t PeakRss() { return ProcKilobytes("/proc/self/status", "VmHWM:"); }

// The machine's available memory (MemAvailable), bytes; 0 when unknown.
uint64_t AvailableMemory() {
  return ProcKilobytes("/proc/meminfo", "MemAvailable:");
}

// What a mode turns on. The ablation rows add one idea at a time on top of
// the baseline, in the order of the design card.
struct ModeConfig {
  bool all_paths = true;
  bool grad_offload = false;  // fp32 gradients written in backward
  bool alternate = true;
  bool cache = false;         // the DRAM tier of --cache
  bool declare_order = true;  // next-use eviction (else LRU)
  bool adaptive = true;       // placement recomputed every step
  int prefetch = 1, commits = 1;
  int paper_ratio = 0;        // whole subgroups: i % r == 0 on path 2
};



ModeConfig ConfigFor(const std::string& mode, int prefetch, int commits,
                     int paper_ratio) {
  ModeConfig c;
  if (mode == "baseline" || mode[0] == '+') {
    c.all_paths = false;
    c.grad_offload = true;
    c.alternate = false;
    c.adaptive = false;
    int row = -1;
    for (int i = 0; i < 5; ++i)
      if (mode == kAblation[i]) row = i;
    if (row >= 0) c.all_paths = true;
    if (row >= 1) c.grad_offload = false;
    if (row >= 2) c.alternate = c.cache = true;
    if (row >= 3) c.adaptive = true;
    if (row >= 4) {
      c.prefetch = prefetch;
      c.commits = commits;
    }
    return c;
  }
  if (mode == "paper") {
    c.cache = true;
    c.declare_order = false;
    c.adaptive = false;
    c.paper_ratio = paper_ratio;
    return c;
  }
  c.prefetch = prefetch;
  c.commits = commits;
  c.cache = mode == "mlpo+cache";
  return c;
}

}  // namespace

uint64_t ResidentBytes() {
  return ProcKilobytes("/proc/self/status", "VmRSS:");
}

void CheckFormatsFit(uint64_t limit, const std::string& first_row,
                     size_t rows, uint64_t rss_before,
                     std::vector<std::unique_ptr<ModeRunner>>* runners) {
  const uint64_t rss = ResidentBytes();
  const uint64_t one = rss > rss_before ? rss - rss_before : 0;
  const uint64_t need = one * (rows - 1);
  const uint64_t avail = limit > 0 ? (limit > rss ? limit - rss : 0)
                                   : AvailableMemory();
  if ((limit == 0 && avail == 0) || need <= avail) return;  // fits, or unknown
  for (auto& r : *runners) r->Finish();
  Die("--state-format", absl::ResourceExhaustedError(absl::StrCat(
      "a mode's formats stay resident together while they take turns; ",
      first_row, " holds ", FormatBytes(double(one)), ", so the other ",
      rows - 1, " need about ", FormatBytes(double(need)), " more, and ",
      limit > 0 ? absl::StrCat(FormatBytes(double(avail)),
                               " are left of --memory-limit ",
                               FormatBytes(double(limit)), " (the run holds ",
                               FormatBytes(double(rss)), ")")
                : absl::StrCat(FormatBytes(double(avail)),
                               " are available (MemAvailable)"),
      "; run fewer formats at once, add --stream, or lower --params")));
}

const char* const kAblation[5] = {"+path2", "+fp16grad", "+order+cache",
                                 "+adaptive", "+prefetch"};

double DiskProbe::Scale() const {
  double sum = 0;
  for (double u : each) sum += u;
  return each.size() > 1 && sum > 0 ? std::min(1.0, together / sum) : 1.0;
}

double DiskProbe::BoundBps(size_t n) const {
  n = std::min(n, each.size());
  if (n == 0) return 0;
  if (n == 1) return each[0];
  double sum = 0;
  for (size_t i = 0; i < n; ++i) sum += each[i];
  return sum * Scale();
}

DiskProber::DiskProber(const std::vector<PathSpec>& paths, double seconds) {
  for (const PathSpec& p : paths) {
    PathProbeOptions po;  // ProbePath's file size, block and depth
    po.duration = absl::Seconds(seconds);
    po.read_cap = po.write_cap = p.cap;
    jobs_.push_back(
        PathProbeJob(p.root + "/.mlpo-step-probe.dat", po, ProbeLoad::kMixed));
    removed_if_stopped_.push_back(
        std::make_unique<RemovedOnSignal>(jobs_.back().file));
    if (auto st = PrepareProbeFile(jobs_.back().file, po.file_bytes); !st.ok())
      Die(p.root, st);
  }
}

DiskProber::~DiskProber() {
  std::error_code ec;
  for (const ProbeJob& j : jobs_) std::filesystem::remove(j.file, ec);
}

DiskProbe DiskProber::Probe(const std::string& when) {
  DiskProbe d;
  for (const ProbeJob& job : jobs_) {
    std::string root = std::filesystem::path(job.file).parent_path();
    Progress(absl::StrCat("probing mixed bandwidth of ", root, " (", when,
                          ")"));
    auto r = RunProbesTogether({job});
    if (!r.ok()) Die(root, r.status());
    d.each.push_back(r->sum_of_rates());
  }
  d.together = d.each.empty() ? 0 : d.each[0];
  if (jobs_.size() > 1) {
    Progress(absl::StrCat("probing all paths together (", when, ")"));
    auto r = RunProbesTogether(jobs_);
    if (!r.ok()) Die("probe", r.status());
    d.together = r->sum_of_rates();
  }
  return d;
}

void DiskProber::Condition() {
  Progress("conditioning the disk: every path under the probe's load, not "
           "recorded");
  if (auto r = RunProbesTogether(jobs_); !r.ok()) Die("probe", r.status());
}

struct ModeRunner::Impl {
  ModeRun run;
  ModeConfig mc;
  bool baseline = false;
  OptimizerOptions o;
  size_t np = 0;
  std::unique_ptr<StreamingSink> sink;
  std::unique_ptr<Optimizer> opt;
  int untimed = 0;  // untimed steps: the creating one and the warm-up ones
  int s = 0;        // steps taken
  ModeResult r;
  // The stores go if the run is stopped (^C, a scheduler's SIGTERM).
  std::vector<std::unique_ptr<RemovedOnSignal>> stores_removed_if_stopped;
};

ModeRunner::ModeRunner(const ModeRun& run) : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.run = run;
  const auto& [mode, row, paths, dir, params, subgroup, steps, warmup,
               prefetch, commits, threads, queue_depth, stream, keep,
               durability, u_scale, cache, change, paper_ratio, format, rule] =
      m.run;
  m.mc = ConfigFor(mode, prefetch, commits, paper_ratio);
  const ModeConfig& mc = m.mc;
  m.baseline = mc.grad_offload;
  OptimizerOptions& o = m.o;
  o.state_format = format;
  o.rule = rule;
  std::string store_name = absl::StrCat(
      "step-", mode, "-",
      rule == RuleKind::kAdam ? "" : absl::StrCat(RuleKindName(rule), "-"),
      StateFormatName(format));
  for (char& ch : store_name)
    if (!absl::ascii_isalnum(static_cast<unsigned char>(ch)) && ch != '-')
      ch = '-';
  o.store.name = store_name;
  o.store.extent_bytes = 4 << 20;
  o.store.durability = durability;
  // The update phase is measured whole: each step's commits land in it.
  o.write_behind = false;
  o.read_ahead = 0;
  if (mc.cache &&
      !ParseCacheBudget(cache, &o.store.cache_bytes, &o.store.cache_percent)
           .ok())
    Die("--cache", absl::InvalidArgumentError(cache));
  const size_t np = m.np = mc.all_paths ? paths.size() : 1;
  for (size_t i = 0; i < np; ++i) {
    StorePathConfig pc;
    pc.path.root = paths[i].root;
    pc.path.kind = i == 0 ? PathKind::kNvme : PathKind::kPfs;
    // MLP-Offload: one PFS writer per node.
    pc.path.slots = mode == "paper" && i > 0 ? 1 : 0;
    pc.path.read_cap = pc.path.write_cap = paths[i].cap;
    pc.path.queue_depth = queue_depth;
    pc.path.segment_bytes = uint64_t{1} << 30;
    pc.fraction = paths[i].mixed_bps;  // f_k proportional to U_k
    o.store.paths.push_back(pc);
    std::filesystem::remove_all(paths[i].root + "/" + o.store.name);
    if (!keep)
      m.stores_removed_if_stopped.push_back(std::make_unique<RemovedOnSignal>(
          paths[i].root + "/" + o.store.name, /*directory=*/true));
  }
  SetSyntheticModel(&o, params, subgroup, threads);
  if (rule == RuleKind::kSgd)  // SGD as fine-tuning runs it: a momentum
    for (ParamGroup& g : o.groups) g.hyper.momentum = 0.9;
  o.pipeline.grad_offload = mc.grad_offload;
  o.pipeline.alternate_order = mc.alternate;
  o.pipeline.prefetch_depth = mc.prefetch;
  o.pipeline.max_commits_in_flight = mc.commits;
  o.pipeline.adaptive_placement = mc.adaptive;
  // The fractions start at U_k; +adaptive lets them follow the rates.
  o.store.adaptive = mc.adaptive ? 1 : 0;
  o.pipeline.declare_order = mc.declare_order;
  // The paths' bandwidth as the bound sees it (scaled down when paths
  // share a device); fractions stay proportional to U_k.
  double scale = np > 1 ? u_scale : 1.0;
  for (size_t i = 0; i < np; ++i)
    o.pipeline.path_mixed_bps.push_back(paths[i].mixed_bps * scale);
  o.init_params = [](int, uint64_t off, float* dst, uint64_t n) {
    for (uint64_t i = 0; i < n; ++i)
      dst[i] = 0.001f * static_cast<float>((off + i) % 1000) - 0.5f;
  };
  // --stream: new parameters go through one subgroup-sized buffer and are
  // handed on (summed, as a copy to the device would read them) instead of
  // kept: 2 bytes per parameter less resident memory.
  m.sink = std::make_unique<StreamingSink>(std::min(subgroup, params));
  if (stream) o.param_sink = m.sink.get();
  auto opt = Optimizer::Open(o);
  if (!opt.ok()) Die(mode, opt.status());
  m.opt = std::move(*opt);
  if (mc.paper_ratio > 0 && np > 1) {
    // Whole subgroups: every r-th on the second path, the rest on the first.
    for (const Subgroup& sg : m.opt->subgroups()) {
      std::vector<double> f(np, 0.0);
      f[sg.index % mc.paper_ratio == 0 ? 1 : 0] = 1.0;
      auto st = m.opt->store()->placement()->SetObjectFractions(sg.object, f);
      if (!st.ok()) Die(mode, st);
    }
  }
  m.r.mode = mode;
  // Step 0 (untimed) creates the state on the store; `warmup` more untimed
  // steps (the first after creation writes into space never written
  // before, 5-20% slower on this disk than the steady state a training run
  // sees, and the probe measures); then `steps` timed.
  m.untimed = 1 + warmup;
}

ModeRunner::~ModeRunner() = default;

void ModeRunner::CreateStep() {
  if (impl_->s == 0) OneStep(/*timed=*/false);
}

void ModeRunner::WarmupSteps() {
  CreateStep();
  while (impl_->s < impl_->untimed) OneStep(/*timed=*/false);
}

void ModeRunner::TimedStep() {
  WarmupSteps();  // (none left once taken)
  OneStep(/*timed=*/true);
}

void ModeRunner::OneStep(bool timed) {
  Impl& m = *impl_;
  const ModeRun& run = m.run;
  const std::string& mode = run.mode;
  const uint64_t params = run.params;
  const int s = m.s++;
  if (!run.change.root.empty() && s == run.change.step)
    for (size_t i = 0; i < m.np; ++i)
      if (run.paths[i].root == run.change.root) {
        auto st = m.opt->store()->path(i)->SetCaps(run.change.cap,
                                                   run.change.cap);
        if (!st.ok()) Die("--cap-change", st);
        Progress(absl::StrFormat("%s: cap of %s now %s", mode,
                                 run.change.root,
                                 FormatRate(double(run.change.cap))));
      }
  absl::Time t0 = absl::Now();
  // Deterministic fp16 gradients, generated a chunk at a time (as they
  // would arrive from the device) so the bench holds no second copy.
  {
    const uint64_t chunk = uint64_t{16} << 20;
    std::vector<uint16_t> buf(std::min(chunk, params));
    for (uint64_t off = 0; off < params; off += chunk) {
      uint64_t n = std::min(chunk, params - off);
      uint32_t x = 12345u ^ static_cast<uint32_t>(off / chunk * 2654435761u);
      for (uint64_t i = 0; i < n; ++i) {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        buf[i] = FloatToF16(
            static_cast<float>(static_cast<int>(x % 2001) - 1000) * 1e-3f);
      }
      auto st = m.opt->StageGrad(0, off, buf.data(), DType::kF16, n);
      if (!st.ok()) Die(mode, st);
    }
  }
  if (m.baseline)
    if (auto e = m.opt->OffloadGrads(); !e.ok()) Die(mode, e);
  double bw = absl::ToDoubleSeconds(absl::Now() - t0);
  auto rep = m.opt->Step(1024.0);
  if (!rep.ok()) Die(mode, rep.status());
  std::string fr;
  for (double x : rep->fractions) fr += absl::StrFormat(" %.2f", x);
  Progress(absl::StrFormat(
      "%s step %d/%d: %.2f s (read wait %.2f, compute %.2f, write wait "
      "%.2f), %s moved; fractions now%s%s",
      run.row, s, m.untimed + run.steps - 1, rep->total_s, rep->read_wait_s,
      rep->compute_s, rep->write_wait_s,
      FormatBytes(static_cast<double>(rep->bytes_read + rep->bytes_written)),
      fr, s == 0 ? " (creates the state, untimed)"
          : !timed ? " (warm-up, untimed)" : ""));
  ModeResult& r = m.r;
  r.fractions_per_step.push_back(rep->fractions);
  if (!timed) return;
  const int steps = run.steps;
  r.step_s += rep->total_s / steps;
  r.backward_s += bw / steps;
  r.read_wait_s += rep->read_wait_s / steps;
  r.compute_s += rep->compute_s / steps;
  r.write_wait_s += rep->write_wait_s / steps;
  r.bytes_read += static_cast<double>(rep->bytes_read) / steps;
  r.bytes_written += static_cast<double>(rep->bytes_written) / steps;
  r.cache_hit_bytes += static_cast<double>(rep->cache_hit_bytes) / steps;
  r.timed_step_s.push_back(rep->total_s);
  r.timed_moved.push_back(
      static_cast<double>(rep->bytes_read + rep->bytes_written));
  if (r.paths.empty()) r.paths = rep->paths;
}

ModeResult ModeRunner::Finish() {
  Impl& m = *impl_;
  m.r.paths_used = m.np;
  m.r.peak_rss = PeakRss();
  m.opt.reset();
  if (!m.run.keep)
    for (size_t i = 0; i < m.np; ++i)
      std::filesystem::remove_all(m.run.paths[i].root + "/" + m.o.store.name);
  return std::move(m.r);
}

}  // namespace mlpo
