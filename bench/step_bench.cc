// `mlpo-bench step`: the update phase of a synthetic model in each mode, in
// one run, against the DeepSpeed-style baseline and against the I/O lower
// bound of docs/design.md, both measured in the same run:
//   lower_bound_s = max(bytes moved / sum over the mode's paths of U_k,
//                       params / R_adam)
// where U_k is each path's mixed read+write bandwidth (probed here, with the
// path's cap, before and after each mode's steps: the mode's bound uses the
// faster)
// and R_adam the fused kernel's params/s (measured here). This file has the
// command, its flags and the run; bench/step_mode.cc one mode's steps;
// bench/step_report.cc the comparisons, the table and the plot.
#include <sys/stat.h>

#include <algorithm>
#include <iostream>
#include <memory>
#include <thread>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "base/trace.h"
#include "bench/bench_common.h"
#include "bench/kernel_rate.h"
#include "nlohmann/json.hpp"
#include "optimizer/optimizer.h"
#include "tools/probe/bandwidth_probe.h"
#include "tools/cli_util.h"

#include "bench/step_mode.h"
#include "bench/step_report.h"

namespace mlpo {
namespace {

using json = nlohmann::json;

[[noreturn]] void Die(const std::string& what, const absl::Status& s) {
  BenchFail("step", what, s);
}

// The flags of `mlpo-bench step`.
struct StepArgs {
  BenchFlags f;
  uint64_t params = 500'000'000;
  uint64_t subgroup = 8'000'000;
  std::string paths;
  int steps = 3;
  int warmup = 1;
  std::string modes = "baseline,mlpo";
  std::string cache = "25%";
  std::string cap_change;
  int paper_ratio = 3;
  bool ablation = false;
  std::string trace, plot;
  bool stream = false;
  int prefetch = 2, commits = 2, threads = 0, queue_depth = 16;
  double probe_s = 8;
  std::string durability = "step";
  std::string formats = "fp32";
  std::string optimizers = "adam";
  std::string memory_limit;  // empty: MemAvailable
};

// Registers the flags in *a.
void AddStepOptions(CLI::App* cmd, StepArgs* a) {
  AddBenchFlags(cmd, &a->f);
  cmd->add_flag("--keep", a->f.keep, "Leave the stores under their paths");
  cmd->add_option("--params", a->params,
                  "Parameters of the synthetic model: 500000000, 500M, "
                  "1.5B (64M with --quick)")
      ->capture_default_str()
      ->transform(CountArg());
  cmd->add_option("--subgroup", a->subgroup,
                  "Elements per subgroup (4M with --quick)")
      ->capture_default_str()
      ->transform(CountArg());
  cmd->add_option("--paths", a->paths,
                  "Comma-separated ROOT[@CAP] (CAP in bytes/s, e.g. "
                  "var/nvme,var/pfs@300MB); default <dir>/nvme. The baseline "
                  "uses the first path only");
  cmd->add_option("--steps", a->steps, "Timed steps per mode (after one "
                                       "untimed step that creates the state "
                                       "and the warm-up steps)")
      ->capture_default_str()
      ->check(CLI::Range(1, 100000));
  cmd->add_option("--warmup", a->warmup,
                  "Untimed steps per mode after the one that creates the "
                  "state: the first writes into space never written before, "
                  "slower on a thin-provisioned disk than the steady state, "
                  "and the first after the probe that precedes them is "
                  "slower still (with 0, a timed step pays for both)")
      ->capture_default_str()
      ->check(CLI::Range(0, 1000));
  cmd->add_option("--modes", a->modes,
                  "Modes to run: baseline, paper (MLP-Offload as "
                  "published), mlpo, mlpo+cache (mlpo with the DRAM tier of "
                  "--cache)")
      ->capture_default_str();
  cmd->add_option("--cache", a->cache,
                  "DRAM tier budget of modes mlpo+cache and paper and of the ablation's cached rows: a size (\"2G\") or a "
                  "percentage of the state (\"25%\")")
      ->capture_default_str()
      ->check([](const std::string& v) {
        uint64_t b = 0;
        double p = 0;
        absl::Status st = ParseCacheBudget(v, &b, &p);
        return st.ok() ? std::string() : std::string(st.message());
      });
  cmd->add_option("--state-format", a->formats,
                  "State formats of the optimizer's stores, comma-separated "
                  "(fp32, bf16-moments, int8-moments); with more than one, "
                  "every mode runs in each (rows MODE/FORMAT), a mode's "
                  "formats taking turns step by step, and each compact row "
                  "gets its ratio to fp32")
      ->capture_default_str();
  cmd->add_option("--optimizer", a->optimizers,
                  "Update rules, comma-separated (adam, lion, adagrad, sgd: "
                  "SGD with momentum, adamax); with more than one, each mlpo "
                  "mode runs every rule (rows MODE/RULE, adam's keeping the name "
                  "MODE), the rules taking turns step by step, and each row "
                  "gets its ratio to adam's params/s (ratio_to_adam)")
      ->capture_default_str();
  cmd->add_option("--queue-depth", a->queue_depth,
                  "I/O requests in flight per path, every mode (the probe's "
                  "depth by default)")
      ->capture_default_str()
      ->check(CLI::Range(1, 4096));
  cmd->add_option("--memory-limit", a->memory_limit,
                  "With several --state-format: the memory this run may "
                  "hold (default: the machine's available memory). A mode's "
                  "formats stay resident together; once the first has "
                  "created its state, a run whose other formats would need "
                  "more stops with an error instead of being killed for "
                  "memory later");
  cmd->add_option("--prefetch", a->prefetch, "mlpo prefetch depth")
      ->capture_default_str();
  cmd->add_option("--commits", a->commits, "mlpo commits in flight")
      ->capture_default_str();
  cmd->add_option("--threads", a->threads, "Kernel threads (0 = all cores)")
      ->capture_default_str();
  cmd->add_option("--durability", a->durability,
                  "Store durability for both modes: step or tag")
      ->capture_default_str()
      ->check(CLI::IsMember({"step", "tag"}));
  cmd->add_option("--paper-ratio", a->paper_ratio,
                  "Mode paper: subgroup i goes to the second path when "
                  "i % R == 0 (the best integer for the measured bandwidths "
                  "is reported as paper_best_ratio)")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000));
  cmd->add_flag("--ablation", a->ablation,
                "Also run the ablation rows after the baseline, one idea "
                "added per row: +path2 (second path), +fp16grad (gradients "
                "kept in 16-bit), +order+cache (alternating order and the "
                "DRAM tier), +adaptive (placement every step), +prefetch "
                "(deeper prefetch and commits)");
  cmd->add_flag("--stream", a->stream,
                "Hand new parameters to a streaming sink (one subgroup's "
                "buffer, read once, as a copy to the GPU) instead of keeping "
                "them: the scale run's setting, where the state is larger "
                "than RAM; peak RSS is reported per mode either way");
  cmd->add_option("--trace", a->trace,
                  "Write a Chrome trace-event JSON of the timed run (opens in "
                  "Perfetto or chrome://tracing): every extent read and write "
                  "per path, DRAM-tier hits, kernel runs, read and write "
                  "waits");
  cmd->add_option("--plot", a->plot,
                  "Draw the modes (the ablation rows in order) as stacked "
                  "read-wait / compute / write-wait bars into this PNG "
                  "(python3-matplotlib)");
  cmd->add_option("--cap-change", a->cap_change,
                  "ROOT@CAP:STEP: the cap of path ROOT (given a cap in "
                  "--paths) becomes CAP bytes/s from step STEP on, as a shared "
                  "PFS slows down when other jobs start; the step lines show "
                  "the fractions following it");
  cmd->add_option("--probe-seconds", a->probe_s,
                  "Seconds of each path's mixed-bandwidth probe (taken "
                  "before the first mode and before and after each mode's "
                  "steps; each mode's bound uses the faster of the two "
                  "around it). Long enough "
                  "to measure the disk under sustained load, as a step sees "
                  "it, not a write cache in front of it (1 with --quick)")
      ->capture_default_str()
      ->check(CLI::Range(0.05, 3600.0));
}

// One run of the benchmark: the arguments checked, the disk and kernel
// bounds measured, then every row (a mode in a format, for a rule) run and
// recorded, and the report.
class StepBenchRun {
 public:
  explicit StepBenchRun(StepArgs* a) : a_(a) {}
  void Run() {
    CheckArgs();
    MeasureBounds();
    PlanRows();
    if (!a_->trace.empty()) Trace::Get()->Start();
    RunModes();
    CompareRules();
    Report();
  }

 private:
  // Every argument is checked before the probes write anything.
  void CheckArgs();
  // U_k and R_adam: the probes before the first mode, each format's and
  // rule's kernel rate.
  void MeasureBounds();
  // The rows: every mode in every format (and rule).
  void PlanRows();
  // Each mode's rows, run together a step at a time (RunMode), recorded.
  void RunModes();
  void RunMode(size_t g, size_t g_end);
  void RecordRow(const std::string& row, ModeResult r, size_t before);
  // Each rule against adam in the same mode and format.
  void CompareRules();
  void Report();

  StepArgs* const a_;
  uint64_t memory_limit_ = 0;
  std::vector<PathSpec> paths_;
  std::vector<std::string> modes_;
  CapChange change_;
  std::vector<StateFormat> formats_;
  std::vector<RuleKind> rules_;
  json out_;
  std::unique_ptr<DiskProber> prober_;
  std::vector<DiskProbe> probes_;
  double u_scale_ = 1;
  std::map<std::pair<StateFormat, RuleKind>, double> r_adam_of_;
  std::vector<std::string> rows_;
  std::map<std::string, std::pair<std::string, StateFormat>> row_of_;
  std::map<std::string, std::string> mode_of_;
  std::map<std::string, RuleKind> rule_of_;
};

void StepBenchRun::CheckArgs() {
  if (!a_->trace.empty()) EnsureWritableFile("--trace", a_->trace);
  memory_limit_ =
      a_->memory_limit.empty() ? 0 : SizeArg("--memory-limit",
                                            a_->memory_limit);
  if (!a_->memory_limit.empty() && memory_limit_ == 0) {
    std::cerr << "mlpo-bench: --memory-limit: must be more than 0\n";
    throw CLI::RuntimeError(2);
  }
  if (a_->f.quick) {
    if (a_->params == 500'000'000) a_->params = 64'000'000;
    if (a_->subgroup == 8'000'000) a_->subgroup = 4'000'000;
    a_->steps = std::min(a_->steps, 2);
    a_->probe_s = std::min(a_->probe_s, 1.0);
  }
  std::string spec = a_->paths.empty() ? a_->f.dir + "/nvme" : a_->paths;
  EnsureBenchDir(a_->f);
  for (auto part : absl::StrSplit(spec, ',')) {
    std::vector<std::string> rc = absl::StrSplit(part, '@');
    PathSpec p;
    p.root = rc[0];
    if (rc.size() > 1) p.cap = SizeArg("--paths", rc[1]);
    if (a_->paths.empty())
      EnsureDir(p.root);
    else
      EnsureNamedDir("--paths", p.root);
    // One directory twice (or through a link) would be two "paths" in one
    // segment file: refuse it before measuring anything.
    struct stat st;
    if (::stat(p.root.c_str(), &st) == 0)
      p.dev_ino = {st.st_dev, st.st_ino};
    for (auto& q : paths_)
      if (q.dev_ino == p.dev_ino) {
        std::cerr << "mlpo-bench: --paths: " << q.root << " and " << p.root
                  << " are the same directory; each path must be a "
                     "distinct directory\n";
        throw CLI::RuntimeError(2);
      }
    paths_.push_back(p);
  }
  modes_ = absl::StrSplit(a_->modes, ',');
  for (auto& m : modes_)
    if (m != "baseline" && m != "paper" && m != "mlpo" &&
        m != "mlpo+cache") {
      std::cerr << "mlpo-bench: --modes: unknown mode '" << m
                << "' (baseline, paper, mlpo, mlpo+cache)\n";
      throw CLI::RuntimeError(2);
    }
  if (a_->ablation) {
    std::vector<std::string> with;
    for (auto& m : modes_) {
      with.push_back(m);
      if (m == "baseline")
        for (const char* row : kAblation) with.push_back(row);
    }
    if (std::find(modes_.begin(), modes_.end(), "baseline") == modes_.end()) {
      with.insert(with.begin(), "baseline");
      for (int i = 4; i >= 0; --i) with.insert(with.begin() + 1, kAblation[i]);
    }
    modes_ = with;
  }
  bool needs_two = false;
  for (auto& m : modes_) needs_two |= m == "paper" || m[0] == '+';
  if (needs_two && paths_.size() < 2) {
    std::cerr << "mlpo-bench: modes paper and the ablation need two paths "
                 "(--paths A,B)\n";
    throw CLI::RuntimeError(2);
  }
  // Every argument is checked before the probes write anything.
  if (!a_->cap_change.empty()) {
    std::vector<std::string> rs = absl::StrSplit(a_->cap_change, '@');
    std::vector<std::string> cs =
        rs.size() == 2 ? absl::StrSplit(rs[1], ':')
                       : std::vector<std::string>();
    bool known = false;
    for (auto& p : paths_) known |= rs[0] == p.root && p.cap > 0;
    if (cs.size() != 2 || !absl::SimpleAtoi(cs[1], &change_.step) ||
        change_.step < 1 || !known) {
      std::cerr << "mlpo-bench: --cap-change " << a_->cap_change
                << ": expected ROOT@CAP:STEP with ROOT one of --paths "
                   "given a cap (e.g. var/pfs@300MB) and STEP >= 1\n";
      throw CLI::RuntimeError(2);
    }
    change_.root = rs[0];
    change_.cap = SizeArg("--cap-change", cs[0]);
  }
  for (auto part : absl::StrSplit(a_->formats, ',')) {
    auto fmt = ParseStateFormat(part);
    if (!fmt.ok()) {
      std::cerr << "mlpo-bench: --state-format: " << fmt.status().message()
                << "\n";
      throw CLI::RuntimeError(2);
    }
    formats_.push_back(*fmt);
  }
  for (auto part : absl::StrSplit(a_->optimizers, ',')) {
    absl::StatusOr<RuleKind> k = ParseRuleKind(part);
    if (!k.ok()) {
      std::cerr << "mlpo-bench: --optimizer: " << k.status().message()
                << "\n";
      throw CLI::RuntimeError(2);
    }
    rules_.push_back(*k);
  }
}

void StepBenchRun::MeasureBounds() {
  // U_k: each path's mixed bandwidth, with its cap, measured now; then all
  // paths driven together. Paths that share a device (two directories on
  // one disk, as in the embedded default) cannot add up, so the bound
  // uses min(sum of U_k, U together). These first figures set the stripe
  // fractions of every mode; each mode's bound uses the probes taken just
  // before and just after it (DiskProber).
  prober_ = std::make_unique<DiskProber>(paths_, a_->probe_s);
  // A rested disk would judge the first mode against a rate no sustained
  // load sees.
  prober_->Condition();
  probes_.push_back(prober_->Probe("before the first mode"));
  for (size_t k = 0; k < paths_.size(); ++k) {
    PathSpec& p = paths_[k];
    p.mixed_bps = probes_[0].each[k];
    out_["paths"].push_back(
        {{"root", p.root}, {"cap_bps", p.cap}, {"mixed_bps", p.mixed_bps}});
  }
  double sum_u = 0;
  for (auto& p : paths_) sum_u += p.mixed_bps;
  out_["mixed_sum_bps"] = sum_u;
  out_["mixed_together_bps"] = probes_[0].together;
  u_scale_ = probes_[0].Scale();
  Progress("measuring the kernel (R_adam)");
  int threads = a_->threads > 0 ? a_->threads
                               : static_cast<int>(std::thread::hardware_concurrency());
  double r_adam = MeasureKernelRates(size_t{16} << 20, threads, 3).adam;
  out_["r_adam_params_per_s"] = r_adam;
  // Each format's (and rule's) kernel rate bounds its own runs.
  for (StateFormat fmt : formats_)
    for (RuleKind rule : rules_) {
      if (fmt == StateFormat::kF32 && rule == RuleKind::kAdam) {
        r_adam_of_[{fmt, rule}] = r_adam;
        continue;
      }
      Progress(absl::StrFormat("measuring the kernel (%s, %s)",
                               RuleKindName(rule), StateFormatName(fmt)));
      double r = MeasureKernelRates(size_t{16} << 20, threads, 3, fmt, rule)
                     .adam;
      r_adam_of_[{fmt, rule}] = r;
      if (rule == RuleKind::kAdam)
        out_["r_adam_params_per_s_of"][StateFormatName(fmt)] = r;
      else
        out_["r_rule_params_per_s_of"][RuleKindName(rule)]
           [StateFormatName(fmt)] = r;
    }
}

void StepBenchRun::PlanRows() {
  // Every mode in every format: rows "mode" (one format) or
  // "mode/format". The baseline is DeepSpeed's offload, whose state is
  // fp32: one row "baseline", in fp32 whatever the formats.
  // With several rules, a row "mode/rule" for each rule but adam (whose
  // rows keep their names); row_of holds the row's name without its
  // format, and its format.
  for (auto& m : modes_)
    for (RuleKind rule : rules_)
      for (StateFormat fmt : formats_) {
        if (m == "baseline") {  // DeepSpeed's: Adam in fp32
          if (fmt != formats_[0] || rule != rules_[0]) continue;
          fmt = StateFormat::kF32;
          rule = RuleKind::kAdam;
        }
        std::string name = rule == RuleKind::kAdam
                               ? m
                               : absl::StrCat(m, "/", RuleKindName(rule));
        std::string row = formats_.size() == 1 || m == "baseline"
                              ? name
                              : absl::StrCat(name, "/", StateFormatName(fmt));
        rows_.push_back(row);
        row_of_[row] = {name, fmt};
        mode_of_[row] = m;
        rule_of_[row] = rule;
      }
  modes_ = rows_;  // (one format and adam: the rows are the modes)
}

void StepBenchRun::RunModes() {
  // A mode's rows (its formats) run together, a step at a time: each
  // opens its store and takes the step that creates its state; the disk
  // is probed; each takes its warm-up steps (the first step after a probe
  // can be a slow one: the probe's writes may still be flushing below
  // us); then round after round every row takes one timed step, and the
  // disk is probed again. A compact format's ratio to fp32 then compares
  // steps that saw the same seconds of a disk whose speed drifts from
  // minute to minute. Each round starts with the next format, so that no
  // format always follows the same one.
  for (size_t g = 0; g < rows_.size();) {
    const std::string& mode = mode_of_[rows_[g]];
    size_t g_end = g;
    while (g_end < rows_.size() && mode_of_[rows_[g_end]] == mode) ++g_end;
    RunMode(g, g_end);
    g = g_end;
  }
}

void StepBenchRun::RunMode(size_t g, size_t g_end) {
  const std::string& mode = mode_of_[rows_[g]];
  std::vector<std::unique_ptr<ModeRunner>> runners;
  const uint64_t rss_before = ResidentBytes();
  for (size_t i = g; i < g_end; ++i) {
    if (i == g + 1)
      CheckFormatsFit(memory_limit_, rows_[g], g_end - g, rss_before,
                      &runners);
    runners.push_back(std::make_unique<ModeRunner>(ModeRun{
        .mode = mode,
        .row = rows_[i],
        .paths = paths_,
        .dir = a_->f.dir,
        .params = a_->params,
        .subgroup = a_->subgroup,
        .steps = a_->steps,
        .warmup = a_->warmup,
        .prefetch = a_->prefetch,
        .commits = a_->commits,
        .threads = a_->threads,
        .queue_depth = a_->queue_depth,
        .stream = a_->stream,
        .keep = a_->f.keep,
        .durability = a_->durability == "tag" ? Durability::kTag
                                             : Durability::kStep,
        .u_scale = u_scale_,
        .cache = a_->cache,
        .change = change_,
        .paper_ratio = a_->paper_ratio,
        .format = row_of_[rows_[i]].second,
        .rule = rule_of_[rows_[i]]}));
    runners.back()->CreateStep();
  }
  const size_t before = probes_.size();
  probes_.push_back(prober_->Probe("before the steps of " + mode));
  for (auto& r : runners) r->WarmupSteps();
  const size_t n_rows = g_end - g;
  for (int k = 0; k < a_->steps; ++k)
    for (size_t j = 0; j < n_rows; ++j) {
      const size_t i = (k + j) % n_rows;
      runners[i]->TimedStep();
      out_["timed_step_order"].push_back(rows_[g + i]);
    }
  probes_.push_back(prober_->Probe("after the steps of " + mode));
  for (size_t i = g; i < g_end; ++i)
    RecordRow(rows_[i], runners[i - g]->Finish(), before);
}

void StepBenchRun::RecordRow(const std::string& row, ModeResult r,
                             size_t before) {
  const StateFormat fmt = row_of_[row].second;
  const size_t np = r.paths_used;
  // The disk as it was around the mode's steps: the faster of the two
  // probes (a dip in one probe must not flatter a mode; the faster
  // figure gives the tighter bound).
  const double bound_bps = std::max(probes_[before].BoundBps(np),
                                    probes_[before + 1].BoundBps(np));
  const double moved = r.bytes_read + r.bytes_written;
  const double lower_bound_s = std::max(
      moved / bound_bps, a_->params / r_adam_of_[{fmt, rule_of_[row]}]);
  json pj = json::array();
  for (auto& p : r.paths)
    pj.push_back({{"root", p.root}, {"bytes_read", p.read},
                  {"bytes_written", p.written}});
  out_["modes"][row] = {
      {"state_format", StateFormatName(fmt)},
      {"optimizer", RuleKindName(rule_of_[row])},
      {"step_s", r.step_s},
      {"timed_step_s", r.timed_step_s},
      {"backward_s", r.backward_s},
      {"read_wait_s", r.read_wait_s},
      {"compute_s", r.compute_s},
      {"write_wait_s", r.write_wait_s},
      {"bytes_read", r.bytes_read},
      {"bytes_written", r.bytes_written},
      {"timed_step_bytes", r.timed_moved},
      {"bytes_per_param", moved / a_->params},
      {"effective_gbps", moved / r.step_s / 1e9},
      {"params_per_s", a_->params / r.step_s},
      {"bound_bps", bound_bps},
      {"probes_used", {before, before + 1}},
      {"paths_used", np},
      {"lower_bound_s", lower_bound_s},
      {"bound_efficiency", lower_bound_s / r.step_s},
      {"cache_hit_bytes", r.cache_hit_bytes},
      {"peak_rss_bytes", r.peak_rss},
      {"fractions_per_step", r.fractions_per_step},
      {"paths", pj}};
}

void StepBenchRun::CompareRules() {
  // Each rule against adam in the same mode and format.
  for (const std::string& row : rows_) {
    if (rule_of_[row] == RuleKind::kAdam) continue;
    for (const std::string& other : rows_)
      if (rule_of_[other] == RuleKind::kAdam &&
          mode_of_[other] == mode_of_[row] &&
          row_of_[other].second == row_of_[row].second) {
        auto& mo = out_["modes"];
        mo[row]["ratio_to_adam"] = mo[row]["params_per_s"].get<double>() /
                                   mo[other]["params_per_s"].get<double>();
        mo[row]["adam_row"] = other;
      }
  }
}

void StepBenchRun::Report() {
  const ComparedRows compared = AddComparisons(
      StepRows{rows_, row_of_, formats_.size() > 1}, a_->paper_ratio, &out_);
  for (const DiskProbe& d : probes_)
    out_["probes"].push_back({{"mixed_bps", d.each},
                             {"together_bps", d.together}});
  out_["cache"] = a_->cache;
  out_["mode_order"] = modes_;
  out_["stream"] = a_->stream;
  out_["params"] = a_->params;
  out_["subgroup"] = a_->subgroup;
  out_["steps"] = a_->steps;
  out_["warmup"] = a_->warmup;
  out_["durability"] = a_->durability;
  if (!a_->trace.empty()) {
    size_t n = Trace::Get()->events();
    if (auto st = Trace::Get()->StopAndWrite(a_->trace); !st.ok())
      Die("--trace", st);
    out_["trace"] = a_->trace;
    out_["trace_events"] = n;
    Progress(absl::StrFormat("wrote %d trace events to %s", n, a_->trace));
  }
  if (!a_->plot.empty()) DrawStepPlot(a_->plot, &out_);
  Progress("");
  if (a_->f.json) {
    std::cout << out_.dump(2) << "\n";
    return;
  }
  PrintStepReport(out_, compared);
}

}  // namespace

void AddStepBench(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "step", "Update-phase benchmark: baseline (DeepSpeed-style NVMe "
              "offload) vs mlpo on a synthetic model, with the I/O lower "
              "bound measured in the same run");
  auto a = std::make_shared<StepArgs>();
  AddStepOptions(cmd, a.get());
  cmd->callback([a] { StepBenchRun(a.get()).Run(); });
}

}  // namespace mlpo
