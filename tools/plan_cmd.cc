// `mlpo plan`: the capacity planner. Answers before hardware is booked: will
// a model of P parameters train on R ranks per node with these paths, how
// much DRAM the cache gets, and how long the update step takes in each mode
// (tools/plan/plan_model.h).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <thread>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "base/size_units.h"
#include "nlohmann/json.hpp"
#include "optimizer/kernel/adam.h"
#include "optimizer/kernel/rule_kernels.h"
#include "optimizer/kernel/state_codec.h"
#include "store/object_store.h"
#include "store/store_options.h"
#include "store/store_target.h"
#include "tools/cli_checks.h"
#include "tools/cli_util.h"
#include "tools/commands.h"
#include "tools/plan/plan_model.h"

namespace mlpo {
namespace {

using json = nlohmann::json;

[[noreturn]] void Fail(const std::string& what) {
  std::cerr << "mlpo plan: " << what << "\n";
  throw CLI::RuntimeError(2);
}

// R_adam of one rank on this machine (R of the rule): its fused update
// (fp16 gradients, bf16 parameters out, fp32 state) over 8M elements on
// `threads` threads, best of three.
double MeasureRule(const RuleSpec& spec, int threads) {
  const size_t n = size_t{8} << 20;
  const std::vector<StateSlot> slots = spec.Slots();
  std::vector<float> p(n, 0.1f);
  std::vector<std::vector<float>> sl(slots.size(), std::vector<float>(n, 0.f));
  std::vector<uint16_t> g(n, 0x2e66), out(n);
  RuleHyper h;
  h.amsgrad = spec.amsgrad;
  h.momentum = spec.momentum ? 0.9 : 0.0;
  RuleConsts c = MakeRuleConsts(spec.kind, h, 2, 1.0);
  double best = 0;
  for (int rep = 0; rep < 3; ++rep) {
    absl::Time t0 = absl::Now();
    std::vector<std::thread> ts;
    for (int t = 0; t < threads; ++t)
      ts.emplace_back([&, t] {
        size_t lo = n * t / threads, hi = n * (t + 1) / threads;
        RuleSlice s;
        s.p = p.data() + lo;
        s.grad = g.data() + lo;
        s.grad_dtype = DType::kF16;
        s.out = out.data() + lo;
        s.out_dtype = DType::kBF16;
        s.n = hi - lo;
        s.slots = static_cast<int>(slots.size());
        for (int k = 0; k < s.slots; ++k) s.slot[k] = sl[k].data() + lo;
        RuleUpdate(s, c);
      });
    for (auto& t : ts) t.join();
    best = std::max(best, n / absl::ToDoubleSeconds(absl::Now() - t0));
  }
  return best;
}

// The paths and figures `mlpo profile --store` recorded in a store.
std::vector<PlanPath> FromProfile(const std::string& target) {
  auto o = StoreOptionsForTarget(target);
  if (!o.ok()) Fail(std::string(o.status().message()));
  o->read_only = true;
  auto s = ObjectStore::Open(*o);
  if (!s.ok()) Fail(std::string(s.status().message()));
  auto text = (*s)->GetAttribute(kBandwidthAttribute);
  if (!text.ok())
    Fail(target + " has no recorded bandwidth: run `mlpo profile --store " +
         target + "` first");
  std::vector<PlanPath> out;
  try {
    json j = json::parse(*text);
    for (size_t i = 0; i < j.size(); ++i) {
      PlanPath p;
      p.name = j[i].value("path", "path" + std::to_string(i));
      p.read_bps = j[i].at("read_bps");
      p.write_bps = j[i].at("write_bps");
      p.mixed_bps = j[i].at("mixed_bps");
      if (i < o->paths.size()) p.capacity = o->paths[i].path.capacity;
      out.push_back(p);
    }
  } catch (const std::exception& e) {
    Fail(target + ": the recorded bandwidth is not readable: " + e.what());
  }
  return out;
}

}  // namespace

void AddPlanCommand(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "plan",
      "Capacity planner: state, disk and DRAM a model needs per rank and "
      "node, and the predicted update step of baseline, paper and mlpo from "
      "the paths' bandwidth (measured by `mlpo profile`)");
  struct Args {
    std::string params;
    int ranks = 1;
    std::string dram = "0";
    std::vector<std::string> paths;
    std::string from_profile;
    std::string state_format = "fp32";
    std::string optimizer = "adam";
    double kernel_rate = 0;
    std::string subgroup = "8000000";
    bool tag = false;
    int paper_ratio = 0;
    bool json = false;
  };
  auto a = std::make_shared<Args>();
  cmd->add_option("--params", a->params,
                  "Parameters of the whole model: 70e9, 70B, 500M (K, M, "
                  "B or G, T: powers of 1000)")
      ->required();
  cmd->add_option("--ranks", a->ranks,
                  "Ranks (GPUs) per node, sharing its paths and DRAM")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--dram", a->dram,
                  "Host memory the node gives mlpo (e.g. 512GiB); what the "
                  "gradient stage and buffers leave goes to the DRAM tier")
      ->capture_default_str();
  cmd->add_option("--path", a->paths,
                  "NAME:READ/WRITE/MIXED[:CAPACITY] bytes/s (and bytes), "
                  "e.g. nvme:6GB/4GB/8GB:7TB pfs:2GB/2GB/3GB; repeat per "
                  "path, the first is the baseline's");
  cmd->add_option("--from-profile", a->from_profile,
                  "Take the paths from a store's recorded `mlpo profile "
                  "--store` figures");
  cmd->add_option("--kernel-rate", a->kernel_rate,
                  "R_adam (the rule's kernel rate) of one rank in params/s "
                  "(default: measured here, "
                  "with this machine's cores shared by the ranks)")
      ->check(FiniteIn(1, 1e15));
  cmd->add_option("--state-format", a->state_format,
                  "How the store holds Adam's moments: fp32 (12 B/param), "
                  "bf16-moments (8), int8-moments (~6.03)")
      ->capture_default_str();
  cmd->add_option("--optimizer", a->optimizer,
                  "The update rule and the state it keeps: adam (p, m, v), "
                  "adam+amsgrad (and max_exp_avg_sq), lion (p, m), adagrad "
                  "(p, sum), sgd+momentum (p, momentum_buffer), sgd (p), adamax "
                  "(p, exp_avg, exp_inf)")
      ->capture_default_str();
  cmd->add_option("--subgroup", a->subgroup, "Elements per subgroup")
      ->capture_default_str();
  cmd->add_flag("--tag", a->tag,
                "Durability tag: the DRAM tier saves writes too");
  cmd->add_option("--paper-ratio", a->paper_ratio,
                  "Paper mode's integer ratio (default: the best one)")
      ->check(CLI::Range(0, 1000));
  cmd->add_flag("--json", a->json, "Print one JSON object on stdout");
  cmd->callback([a] {
    PlanInput in;
    auto params = ParseCount(a->params);
    if (!params.ok())
      Fail("--params: " + std::string(params.status().message()));
    in.params = static_cast<double>(*params);
    in.ranks = a->ranks;
    auto dram = ParseSize(a->dram);
    if (!dram.ok()) Fail("--dram: " + std::string(dram.status().message()));
    in.dram = *dram;
    auto sg = ParseSize(a->subgroup);
    if (!sg.ok() || *sg == 0) Fail("--subgroup: a positive count");
    in.subgroup = *sg;
    in.durability_tag = a->tag;
    {
      auto fmt = ParseStateFormat(a->state_format);
      if (!fmt.ok()) {
        std::cerr << "mlpo plan: --state-format: " << fmt.status().message()
                  << "\n";
        throw CLI::RuntimeError(2);
      }
      auto rule = ParseRuleSpec(a->optimizer);
      if (!rule.ok()) {
        std::cerr << "mlpo plan: --optimizer: " << rule.status().message()
                  << "\n";
        throw CLI::RuntimeError(2);
      }
      in.state_bytes_per_param = RuleBytesPerParam(*rule, *fmt);
    }
    in.paper_ratio = a->paper_ratio;
    if (!a->from_profile.empty()) in.paths = FromProfile(a->from_profile);
    for (auto& spec : a->paths) {
      auto p = ParsePlanPath(spec);
      if (!p.ok()) Fail(std::string(p.status().message()));
      in.paths.push_back(*p);
    }
    if (in.paths.empty()) Fail("give --path NAME:R/W/U (or --from-profile)");
    if (a->kernel_rate > 0) {
      in.kernel_params_per_s = a->kernel_rate;
    } else {
      int cores = static_cast<int>(std::thread::hardware_concurrency());
      in.kernel_params_per_s =
          MeasureRule(*ParseRuleSpec(a->optimizer), std::max(1, cores)) /
          std::max(1, a->ranks);
    }
    auto r = Plan(in);
    if (!r.ok()) Fail(std::string(r.status().message()));
    json out;
    out["params"] = in.params;
    out["ranks"] = in.ranks;
    out["kernel_params_per_s"] = in.kernel_params_per_s;
    out["state_format"] = a->state_format;
    out["optimizer"] = a->optimizer;
    out["state_bytes_per_param"] = in.state_bytes_per_param;
    out["state_bytes_per_rank"] = r->state_bytes_per_rank;
    out["grad_stage_bytes_per_rank"] = r->grad_stage_bytes_per_rank;
    out["buffers_bytes_per_rank"] = r->inflight_bytes_per_rank;
    out["dram_needed_without_cache_per_rank"] =
        r->dram_needed_without_cache_per_rank;
    out["dram_fits"] = r->dram_fits;
    out["cache_bytes_per_rank"] = r->cache_bytes_per_rank;
    out["cache_fraction"] = r->cache_fraction;
    for (size_t k = 0; k < in.paths.size(); ++k)
      out["paths"].push_back({{"name", in.paths[k].name},
                              {"mixed_bps", in.paths[k].mixed_bps},
                              {"capacity", in.paths[k].capacity},
                              {"disk_bytes", r->disk_bytes[k]},
                              {"fits", static_cast<bool>(r->disk_fits[k])}});
    for (auto& m : r->modes)
      out["modes"][m.mode] = {{"step_s", m.step_s},
                              {"bytes_per_step", m.bytes_per_step},
                              {"fractions", m.fractions},
                              {"limit", m.limit}};
    if (r->paper_ratio) out["paper_ratio"] = r->paper_ratio;
    out["saturates_first"] = r->saturates_first;
    if (a->json) {
      std::cout << out.dump(2) << "\n";
      return;
    }
    std::printf("%.3g parameters over %d rank(s): %s of optimizer state per "
                "rank (%s, %s: %.2f B/param), %s gradient stage, %s "
                "buffers\n",
                in.params, in.ranks,
                FormatBytes(double(r->state_bytes_per_rank)).c_str(),
                a->optimizer.c_str(), a->state_format.c_str(),
                in.state_bytes_per_param,
                FormatBytes(double(r->grad_stage_bytes_per_rank)).c_str(),
                FormatBytes(double(r->inflight_bytes_per_rank)).c_str());
    if (!r->dram_fits)
      std::printf("DRAM: %s per rank is not enough: it needs %s before any "
                  "cache\n",
                  FormatBytes(double(in.dram) / in.ranks).c_str(),
                  FormatBytes(double(r->dram_needed_without_cache_per_rank))
                      .c_str());
    else
      std::printf("DRAM tier: %s per rank (%.0f%% of the state)\n",
                  FormatBytes(double(r->cache_bytes_per_rank)).c_str(),
                  100 * r->cache_fraction);
    for (size_t k = 0; k < in.paths.size(); ++k)
      std::printf("path %-8s U %s: needs %s for a head and a tag%s\n",
                  in.paths[k].name.c_str(),
                  FormatRate(in.paths[k].mixed_bps).c_str(),
                  FormatBytes(double(r->disk_bytes[k])).c_str(),
                  r->disk_fits[k] ? "" : " -- MORE THAN ITS CAPACITY");
    std::printf("R_adam %.0f M params/s per rank\n",
                in.kernel_params_per_s / 1e6);
    for (auto& m : r->modes) {
      std::string f;
      for (double x : m.fractions) f += absl::StrFormat(" %.2f", x);
      std::printf("%-9s step %8.2f s  (%s moved; fractions%s; bound by %s)\n",
                  m.mode.c_str(), m.step_s,
                  FormatBytes(m.bytes_per_step).c_str(), f.c_str(),
                  m.limit.c_str());
    }
    if (r->paper_ratio) std::printf("paper ratio %d\n", r->paper_ratio);
    std::printf("saturates first: %s\n", r->saturates_first.c_str());
  });
}

}  // namespace mlpo
