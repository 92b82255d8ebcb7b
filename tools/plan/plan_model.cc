#include "tools/plan/plan_model.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "base/size_units.h"
#include "store/placement/stripe.h"

namespace mlpo {
namespace {

// Step time of `bytes` split by `f` over paths of rate `u`, and the index
// of the path that takes longest.
double SplitTime(double bytes, const std::vector<double>& f,
                 const std::vector<double>& u, size_t* slowest) {
  double t = 0;
  *slowest = 0;
  for (size_t k = 0; k < f.size(); ++k) {
    if (f[k] <= 0) continue;
    double tk = u[k] > 0 ? f[k] * bytes / u[k] : INFINITY;
    if (tk > t) {
      t = tk;
      *slowest = k;
    }
  }
  return t;
}

}  // namespace

absl::StatusOr<PlanPath> ParsePlanPath(const std::string& spec) {
  std::vector<std::string> parts = absl::StrSplit(spec, ':');
  auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--path ", spec, ": ", why,
        " (expected NAME:READ/WRITE/MIXED[:CAPACITY], e.g. "
        "nvme:3GB/2GB/4GB:2TB)"));
  };
  if (parts.size() < 2 || parts.size() > 3 || parts[0].empty())
    return bad("wrong number of fields");
  std::vector<std::string> rates = absl::StrSplit(parts[1], '/');
  if (rates.size() != 3) return bad("give read, write and mixed bytes/s");
  PlanPath p;
  p.name = parts[0];
  double* dst[] = {&p.read_bps, &p.write_bps, &p.mixed_bps};
  for (int i = 0; i < 3; ++i) {
    auto v = ParseSize(rates[i]);
    if (!v.ok()) return bad(v.status().message());
    if (*v == 0) return bad("a bandwidth of 0");
    *dst[i] = static_cast<double>(*v);
  }
  if (parts.size() == 3) {
    auto c = ParseSize(parts[2]);
    if (!c.ok()) return bad(c.status().message());
    p.capacity = *c;
  }
  return p;
}

absl::StatusOr<PlanResult> Plan(const PlanInput& in) {
  if (!(in.params >= 1) || !std::isfinite(in.params))
    return absl::InvalidArgumentError("--params must be at least 1");
  if (in.ranks < 1) return absl::InvalidArgumentError("--ranks must be >= 1");
  if (in.paths.empty())
    return absl::InvalidArgumentError("give at least one --path");
  if (!(in.kernel_params_per_s > 0))
    return absl::InvalidArgumentError("the kernel rate must be positive");
  PlanResult r;
  const double n = in.ranks;
  r.params_per_rank = in.params / n;
  const double bpp = in.state_bytes_per_param;
  if (!(bpp > 0))
    return absl::InvalidArgumentError("state bytes per parameter must be > 0");
  r.state_bytes_per_rank = static_cast<uint64_t>(bpp * r.params_per_rank);
  r.grad_stage_bytes_per_rank = static_cast<uint64_t>(2 * r.params_per_rank);
  uint64_t sg = std::min<uint64_t>(in.subgroup,
                                   static_cast<uint64_t>(r.params_per_rank));
  r.inflight_bytes_per_rank =
      static_cast<uint64_t>((in.prefetch + in.commits) * sg * bpp);
  r.dram_needed_without_cache_per_rank = r.grad_stage_bytes_per_rank +
                                         r.inflight_bytes_per_rank +
                                         in.overhead;
  double per_rank_dram = static_cast<double>(in.dram) / n;
  r.dram_fits = per_rank_dram >= r.dram_needed_without_cache_per_rank;
  double left = per_rank_dram - r.dram_needed_without_cache_per_rank;
  r.cache_bytes_per_rank = static_cast<uint64_t>(
      std::clamp(left, 0.0, static_cast<double>(r.state_bytes_per_rank)));
  r.cache_fraction = r.state_bytes_per_rank
                         ? double(r.cache_bytes_per_rank) /
                               double(r.state_bytes_per_rank)
                         : 0;
  const double c = r.cache_fraction;
  const double p_node = in.params;  // every rank of the node steps at once
  const double kernel_s = r.params_per_rank / in.kernel_params_per_s;
  std::vector<double> u;
  for (auto& p : in.paths) u.push_back(p.mixed_bps);

  // mlpo: water-filled over capacity for one step's bytes (the state).
  const double node_state = bpp * p_node;
  std::vector<uint64_t> room;
  for (auto& p : in.paths)
    room.push_back(p.capacity ? p.capacity / 2 : UINT64_MAX);  // head + tag
  std::vector<double> f = WaterFill(u, room, static_cast<uint64_t>(node_state));
  for (size_t k = 0; k < in.paths.size(); ++k) {
    r.disk_bytes.push_back(static_cast<uint64_t>(2 * node_state * f[k]));
    r.disk_fits.push_back(in.paths[k].capacity == 0 ||
                          r.disk_bytes.back() <= in.paths[k].capacity);
  }
  auto finish = [&](PlanMode m, size_t slowest, double io_s) {
    m.step_s = std::max(io_s, kernel_s);
    // Paths that finish within 1% of the slowest bound the step together.
    std::vector<std::string> bound;
    for (size_t k = 0; k < m.fractions.size(); ++k)
      if (m.fractions[k] > 0 && u[k] > 0 &&
          m.fractions[k] * m.bytes_per_step / u[k] >= 0.99 * io_s)
        bound.push_back(in.paths[k].name);
    if (kernel_s >= io_s) {
      m.limit = "the Adam kernel (params / R_adam)";
    } else if (bound.size() > 1) {
      m.limit = absl::StrCat("paths ", absl::StrJoin(bound, ", "),
                             " together (fractions follow bandwidth)");
    } else {
      m.limit = absl::StrCat("path ", in.paths[slowest].name, " at ",
                             absl::StrFormat("%.2f GB/s mixed",
                                             u[slowest] / 1e9));
    }
    return m;
  };
  {
    PlanMode m;
    m.mode = "baseline";
    m.bytes_per_step = 28 * p_node;
    m.fractions.assign(in.paths.size(), 0.0);
    m.fractions[0] = 1;
    size_t s = 0;
    r.modes.push_back(finish(m, s, SplitTime(m.bytes_per_step, m.fractions,
                                             u, &s)));
  }
  // Bytes per parameter the DRAM tier saves: mlpo's in its format; paper's
  // (fp32) from the same DRAM.
  const double cache_bytes = static_cast<double>(r.cache_bytes_per_rank);
  const double c12 =
      r.params_per_rank > 0
          ? std::min(1.0, cache_bytes / (12 * r.params_per_rank))
          : 0;
  const double saved = (in.durability_tag ? 2 : 1) * bpp * c;
  const double saved12 = (in.durability_tag ? 2 : 1) * 12 * c12;
  if (in.paths.size() >= 2) {
    int best = 1;
    double best_t = INFINITY;
    for (int ratio = 1; ratio <= 64; ++ratio) {
      double f2 = 1.0 / ratio;
      double t = std::max((1 - f2) / u[0], f2 / u[1]);
      if (t < best_t) {
        best_t = t;
        best = ratio;
      }
    }
    r.paper_ratio = in.paper_ratio > 0 ? in.paper_ratio : best;
    PlanMode m;
    m.mode = "paper";
    m.bytes_per_step = (24 - saved12) * p_node;
    m.fractions.assign(in.paths.size(), 0.0);
    m.fractions[1] = 1.0 / r.paper_ratio;
    m.fractions[0] = 1 - m.fractions[1];
    size_t s = 0;
    r.modes.push_back(finish(m, s, SplitTime(m.bytes_per_step, m.fractions,
                                             u, &s)));
  }
  {
    PlanMode m;
    m.mode = "mlpo";
    m.bytes_per_step = (2 * bpp - saved) * p_node;
    m.fractions = f;
    size_t s = 0;
    r.modes.push_back(finish(m, s, SplitTime(m.bytes_per_step, m.fractions,
                                             u, &s)));
  }
  // Which path runs out first: of room (a path whose share was cut to what
  // fits) or, under the water level, all of them at once.
  std::string full;
  for (size_t k = 0; k < in.paths.size(); ++k)
    if (!r.disk_fits[k] ||
        (room[k] != UINT64_MAX &&
         f[k] * node_state >= static_cast<double>(room[k]) * 0.999))
      full = in.paths[k].name;
  r.saturates_first =
      !full.empty()
          ? absl::StrCat("the capacity of ", full,
                         " (its share is cut to what fits)")
          : r.modes.back().limit.rfind("the Adam", 0) == 0
                ? r.modes.back().limit
                : "every path's bandwidth at once (mlpo's fractions follow "
                  "U_k); in paper mode " +
                      (r.modes.size() > 2 ? r.modes[1].limit
                                          : std::string("-"));
  return r;
}

}  // namespace mlpo
