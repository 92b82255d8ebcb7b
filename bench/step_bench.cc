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

}  // namespace

void AddStepBench(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "step", "Update-phase benchmark: baseline (DeepSpeed-style NVMe "
              "offload) vs mlpo on a synthetic model, with the I/O lower "
              "bound measured in the same run");
  struct Args {
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
  auto a = std::make_shared<Args>();
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
                  "SGD with momentum); with more than one, each mlpo mode "
                  "runs every rule (rows MODE/RULE, adam's keeping the name "
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
  cmd->callback([a] {
    BenchFlags& f = a->f;
    if (!a->trace.empty()) EnsureWritableFile("--trace", a->trace);
    const uint64_t memory_limit =
        a->memory_limit.empty() ? 0 : SizeArg("--memory-limit",
                                              a->memory_limit);
    if (!a->memory_limit.empty() && memory_limit == 0) {
      std::cerr << "mlpo-bench: --memory-limit: must be more than 0\n";
      throw CLI::RuntimeError(2);
    }
    if (f.quick) {
      if (a->params == 500'000'000) a->params = 64'000'000;
      if (a->subgroup == 8'000'000) a->subgroup = 4'000'000;
      a->steps = std::min(a->steps, 2);
      a->probe_s = std::min(a->probe_s, 1.0);
    }
    std::vector<PathSpec> paths;
    std::string spec = a->paths.empty() ? f.dir + "/nvme" : a->paths;
    EnsureBenchDir(f);
    for (auto part : absl::StrSplit(spec, ',')) {
      std::vector<std::string> rc = absl::StrSplit(part, '@');
      PathSpec p;
      p.root = rc[0];
      if (rc.size() > 1) p.cap = SizeArg("--paths", rc[1]);
      if (a->paths.empty())
        EnsureDir(p.root);
      else
        EnsureNamedDir("--paths", p.root);
      // One directory twice (or through a link) would be two "paths" in one
      // segment file: refuse it before measuring anything.
      struct stat st;
      if (::stat(p.root.c_str(), &st) == 0)
        p.dev_ino = {st.st_dev, st.st_ino};
      for (auto& q : paths)
        if (q.dev_ino == p.dev_ino) {
          std::cerr << "mlpo-bench: --paths: " << q.root << " and " << p.root
                    << " are the same directory; each path must be a "
                       "distinct directory\n";
          throw CLI::RuntimeError(2);
        }
      paths.push_back(p);
    }
    std::vector<std::string> modes = absl::StrSplit(a->modes, ',');
    for (auto& m : modes)
      if (m != "baseline" && m != "paper" && m != "mlpo" &&
          m != "mlpo+cache") {
        std::cerr << "mlpo-bench: --modes: unknown mode '" << m
                  << "' (baseline, paper, mlpo, mlpo+cache)\n";
        throw CLI::RuntimeError(2);
      }
    if (a->ablation) {
      std::vector<std::string> with;
      for (auto& m : modes) {
        with.push_back(m);
        if (m == "baseline")
          for (const char* row : kAblation) with.push_back(row);
      }
      if (std::find(modes.begin(), modes.end(), "baseline") == modes.end()) {
        with.insert(with.begin(), "baseline");
        for (int i = 4; i >= 0; --i) with.insert(with.begin() + 1, kAblation[i]);
      }
      modes = with;
    }
    bool needs_two = false;
    for (auto& m : modes) needs_two |= m == "paper" || m[0] == '+';
    if (needs_two && paths.size() < 2) {
      std::cerr << "mlpo-bench: modes paper and the ablation need two paths "
                   "(--paths A,B)\n";
      throw CLI::RuntimeError(2);
    }
    // Every argument is checked before the probes write anything.
    CapChange change;
    if (!a->cap_change.empty()) {
      std::vector<std::string> rs = absl::StrSplit(a->cap_change, '@');
      std::vector<std::string> cs =
          rs.size() == 2 ? absl::StrSplit(rs[1], ':')
                         : std::vector<std::string>();
      bool known = false;
      for (auto& p : paths) known |= rs[0] == p.root && p.cap > 0;
      if (cs.size() != 2 || !absl::SimpleAtoi(cs[1], &change.step) ||
          change.step < 1 || !known) {
        std::cerr << "mlpo-bench: --cap-change " << a->cap_change
                  << ": expected ROOT@CAP:STEP with ROOT one of --paths "
                     "given a cap (e.g. var/pfs@300MB) and STEP >= 1\n";
        throw CLI::RuntimeError(2);
      }
      change.root = rs[0];
      change.cap = SizeArg("--cap-change", cs[0]);
    }
    std::vector<StateFormat> formats;
    for (auto part : absl::StrSplit(a->formats, ',')) {
      auto fmt = ParseStateFormat(part);
      if (!fmt.ok()) {
        std::cerr << "mlpo-bench: --state-format: " << fmt.status().message()
                  << "\n";
        throw CLI::RuntimeError(2);
      }
      formats.push_back(*fmt);
    }
    std::vector<RuleKind> rules;
    for (auto part : absl::StrSplit(a->optimizers, ',')) {
      std::optional<RuleKind> k;
      for (RuleKind r : {RuleKind::kAdam, RuleKind::kLion, RuleKind::kAdagrad,
                         RuleKind::kSgd})
        if (part == RuleKindName(r)) k = r;
      if (!k) {
        std::cerr << "mlpo-bench: --optimizer: unknown update rule '" << part
                  << "' (adam, lion, adagrad, sgd)\n";
        throw CLI::RuntimeError(2);
      }
      rules.push_back(*k);
    }
    json out;
    // U_k: each path's mixed bandwidth, with its cap, measured now; then all
    // paths driven together. Paths that share a device (two directories on
    // one disk, as in the embedded default) cannot add up, so the bound
    // uses min(sum of U_k, U together). These first figures set the stripe
    // fractions of every mode; each mode's bound uses the probes taken just
    // before and just after it (DiskProber).
    DiskProber prober(paths, a->probe_s);
    std::vector<DiskProbe> probes;
    // A rested disk would judge the first mode against a rate no sustained
    // load sees.
    prober.Condition();
    probes.push_back(prober.Probe("before the first mode"));
    for (size_t k = 0; k < paths.size(); ++k) {
      PathSpec& p = paths[k];
      p.mixed_bps = probes[0].each[k];
      out["paths"].push_back(
          {{"root", p.root}, {"cap_bps", p.cap}, {"mixed_bps", p.mixed_bps}});
    }
    double sum_u = 0;
    for (auto& p : paths) sum_u += p.mixed_bps;
    out["mixed_sum_bps"] = sum_u;
    out["mixed_together_bps"] = probes[0].together;
    double u_scale = probes[0].Scale();
    Progress("measuring the kernel (R_adam)");
    int threads = a->threads > 0 ? a->threads
                                 : static_cast<int>(std::thread::hardware_concurrency());
    double r_adam = MeasureKernelRates(size_t{16} << 20, threads, 3).adam;
    out["r_adam_params_per_s"] = r_adam;
    // Each format's (and rule's) kernel rate bounds its own runs.
    std::map<std::pair<StateFormat, RuleKind>, double> r_adam_of;
    for (StateFormat fmt : formats)
      for (RuleKind rule : rules) {
        if (fmt == StateFormat::kF32 && rule == RuleKind::kAdam) {
          r_adam_of[{fmt, rule}] = r_adam;
          continue;
        }
        Progress(absl::StrFormat("measuring the kernel (%s, %s)",
                                 RuleKindName(rule), StateFormatName(fmt)));
        double r = MeasureKernelRates(size_t{16} << 20, threads, 3, fmt, rule)
                       .adam;
        r_adam_of[{fmt, rule}] = r;
        if (rule == RuleKind::kAdam)
          out["r_adam_params_per_s_of"][StateFormatName(fmt)] = r;
        else
          out["r_rule_params_per_s_of"][RuleKindName(rule)]
             [StateFormatName(fmt)] = r;
      }
    // Every mode in every format: rows "mode" (one format) or
    // "mode/format". The baseline is DeepSpeed's offload, whose state is
    // fp32: one row "baseline", in fp32 whatever the formats.
    // With several rules, a row "mode/rule" for each rule but adam (whose
    // rows keep their names); row_of holds the row's name without its
    // format, and its format.
    std::vector<std::string> rows;
    std::map<std::string, std::pair<std::string, StateFormat>> row_of;
    std::map<std::string, std::string> mode_of;
    std::map<std::string, RuleKind> rule_of;
    for (auto& m : modes)
      for (RuleKind rule : rules)
        for (StateFormat fmt : formats) {
          if (m == "baseline") {  // DeepSpeed's: Adam in fp32
            if (fmt != formats[0] || rule != rules[0]) continue;
            fmt = StateFormat::kF32;
            rule = RuleKind::kAdam;
          }
          std::string name = rule == RuleKind::kAdam
                                 ? m
                                 : absl::StrCat(m, "/", RuleKindName(rule));
          std::string row = formats.size() == 1 || m == "baseline"
                                ? name
                                : absl::StrCat(name, "/", StateFormatName(fmt));
          rows.push_back(row);
          row_of[row] = {name, fmt};
          mode_of[row] = m;
          rule_of[row] = rule;
        }
    modes = rows;  // (one format and adam: the rows are the modes)
    if (!a->trace.empty()) Trace::Get()->Start();
    // A mode's rows (its formats) run together, a step at a time: each
    // opens its store and takes the step that creates its state; the disk
    // is probed; each takes its warm-up steps (the first step after a probe
    // can be a slow one: the probe's writes may still be flushing below
    // us); then round after round every row takes one timed step, and the
    // disk is probed again. A compact format's ratio to fp32 then compares
    // steps that saw the same seconds of a disk whose speed drifts from
    // minute to minute. Each round starts with the next format, so that no
    // format always follows the same one.
    for (size_t g = 0; g < rows.size();) {
      const std::string& mode = mode_of[rows[g]];
      size_t g_end = g;
      while (g_end < rows.size() && mode_of[rows[g_end]] == mode) ++g_end;
      std::vector<std::unique_ptr<ModeRunner>> runners;
      const uint64_t rss_before = ResidentBytes();
      for (size_t i = g; i < g_end; ++i) {
        if (i == g + 1)
          CheckFormatsFit(memory_limit, rows[g], g_end - g, rss_before,
                          &runners);
        runners.push_back(std::make_unique<ModeRunner>(ModeRun{
            .mode = mode,
            .row = rows[i],
            .paths = paths,
            .dir = f.dir,
            .params = a->params,
            .subgroup = a->subgroup,
            .steps = a->steps,
            .warmup = a->warmup,
            .prefetch = a->prefetch,
            .commits = a->commits,
            .threads = a->threads,
            .queue_depth = a->queue_depth,
            .stream = a->stream,
            .keep = f.keep,
            .durability = a->durability == "tag" ? Durability::kTag
                                                 : Durability::kStep,
            .u_scale = u_scale,
            .cache = a->cache,
            .change = change,
            .paper_ratio = a->paper_ratio,
            .format = row_of[rows[i]].second,
            .rule = rule_of[rows[i]]}));
        runners.back()->CreateStep();
      }
      const size_t before = probes.size();
      probes.push_back(prober.Probe("before the steps of " + mode));
      for (auto& r : runners) r->WarmupSteps();
      const size_t n_rows = g_end - g;
      for (int k = 0; k < a->steps; ++k)
        for (size_t j = 0; j < n_rows; ++j) {
          const size_t i = (k + j) % n_rows;
          runners[i]->TimedStep();
          out["timed_step_order"].push_back(rows[g + i]);
        }
      probes.push_back(prober.Probe("after the steps of " + mode));
      for (size_t i = g; i < g_end; ++i) {
        const std::string& row = rows[i];
        const StateFormat fmt = row_of[row].second;
        ModeResult r = runners[i - g]->Finish();
        const size_t np = r.paths_used;
        // The disk as it was around the mode's steps: the faster of the two
        // probes (a dip in one probe must not flatter a mode; the faster
        // figure gives the tighter bound).
        const double bound_bps = std::max(probes[before].BoundBps(np),
                                          probes[before + 1].BoundBps(np));
        const double moved = r.bytes_read + r.bytes_written;
        const double lower_bound_s = std::max(
            moved / bound_bps, a->params / r_adam_of[{fmt, rule_of[row]}]);
        json pj = json::array();
        for (auto& p : r.paths)
          pj.push_back({{"root", p.root}, {"bytes_read", p.read},
                        {"bytes_written", p.written}});
        out["modes"][row] = {
            {"state_format", StateFormatName(fmt)},
            {"optimizer", RuleKindName(rule_of[row])},
            {"step_s", r.step_s},
            {"timed_step_s", r.timed_step_s},
            {"backward_s", r.backward_s},
            {"read_wait_s", r.read_wait_s},
            {"compute_s", r.compute_s},
            {"write_wait_s", r.write_wait_s},
            {"bytes_read", r.bytes_read},
            {"bytes_written", r.bytes_written},
            {"timed_step_bytes", r.timed_moved},
            {"bytes_per_param", moved / a->params},
            {"effective_gbps", moved / r.step_s / 1e9},
            {"params_per_s", a->params / r.step_s},
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
      g = g_end;
    }
    // Each rule against adam in the same mode and format.
    for (const std::string& row : rows) {
      if (rule_of[row] == RuleKind::kAdam) continue;
      for (const std::string& other : rows)
        if (rule_of[other] == RuleKind::kAdam &&
            mode_of[other] == mode_of[row] &&
            row_of[other].second == row_of[row].second) {
          auto& mo = out["modes"];
          mo[row]["ratio_to_adam"] = mo[row]["params_per_s"].get<double>() /
                                     mo[other]["params_per_s"].get<double>();
          mo[row]["adam_row"] = other;
        }
    }
    const ComparedRows compared = AddComparisons(
        StepRows{rows, row_of, formats.size() > 1}, a->paper_ratio, &out);
    for (const DiskProbe& d : probes)
      out["probes"].push_back({{"mixed_bps", d.each},
                               {"together_bps", d.together}});
    out["cache"] = a->cache;
    out["mode_order"] = modes;
    out["stream"] = a->stream;
    out["params"] = a->params;
    out["subgroup"] = a->subgroup;
    out["steps"] = a->steps;
    out["warmup"] = a->warmup;
    out["durability"] = a->durability;
    if (!a->trace.empty()) {
      size_t n = Trace::Get()->events();
      if (auto st = Trace::Get()->StopAndWrite(a->trace); !st.ok())
        Die("--trace", st);
      out["trace"] = a->trace;
      out["trace_events"] = n;
      Progress(absl::StrFormat("wrote %d trace events to %s", n, a->trace));
    }
    if (!a->plot.empty()) DrawStepPlot(a->plot, &out);
    Progress("");
    if (f.json) {
      std::cout << out.dump(2) << "\n";
      return;
    }
    PrintStepReport(out, compared);
  });
}

}  // namespace mlpo
