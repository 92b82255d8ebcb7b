// `mlpo-bench slots`: N ranks (forked processes) of one node share a capped
// path with one I/O slot, as ranks share a node's PFS mount. Each rank runs
// "steps" over its own store (check out and commit every object); measured
// twice in the same run: slots handed on after a turn (slot_turn_ms) and
// held until the rank is idle. Printed: the aggregate bandwidth of each and
// the spread of per-rank step times (slowest rank's mean over fastest's):
// with turns the ranks progress together, without them one rank runs while
// the others wait.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <deque>
#include <future>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "bench/bench_common.h"
#include "nlohmann/json.hpp"
#include "store/object_store.h"
#include "tools/cli_util.h"

namespace mlpo {
namespace {

using json = nlohmann::json;

struct RankResult {
  std::vector<double> step_s;
  uint64_t bytes = 0;
};

// One rank: its own store on the shared path; returns step times (or exits
// non-zero with a message).
RankResult RunRank(const std::string& root, uint64_t cap, int rank,
                   int objects, uint64_t object_bytes, int steps,
                   absl::Duration turn) {
  StoreOptions o;
  o.name = "slots";
  o.rank = rank;
  o.extent_bytes = 1 << 20;
  StorePathConfig pc;
  pc.path.root = root;
  pc.path.kind = PathKind::kPfs;
  pc.path.slots = 1;
  pc.path.slot_turn = turn;
  pc.path.read_cap = pc.path.write_cap = cap;
  pc.path.segment_bytes = 256 << 20;
  o.paths.push_back(pc);
  auto s = ObjectStore::Open(o);
  if (!s.ok()) {
    std::cerr << "rank " << rank << ": " << s.status().message() << "\n";
    std::exit(1);
  }
  ObjectLayout layout = *ObjectLayout::Make(
      {{"p", DType::kF32, object_bytes / 12},
       {"m", DType::kF32, object_bytes / 12},
       {"v", DType::kF32, object_bytes / 12}});
  RankResult r;
  for (int i = 0; i < objects; ++i)
    (void)(*s)->Declare(absl::StrFormat("o%d", i), layout);
  // Pipelined like the update step: reads ahead and commits in flight keep
  // the rank's engine busy, which is when a held slot starves the others.
  const int depth = 4;
  for (int step = 0; step <= steps; ++step) {
    absl::Time t0 = absl::Now();
    std::deque<std::future<absl::StatusOr<Lease>>> reads;
    std::deque<std::future<absl::Status>> commits;
    int next = 0;
    while (next < objects && static_cast<int>(reads.size()) < depth)
      reads.push_back((*s)->Checkout(absl::StrFormat("o%d", next++)));
    while (!reads.empty()) {
      auto l = reads.front().get();
      reads.pop_front();
      if (!l.ok()) std::exit(1);
      if (next < objects)
        reads.push_back((*s)->Checkout(absl::StrFormat("o%d", next++)));
      Lease lease = std::move(*l);
      commits.push_back((*s)->Commit(std::move(lease), step + 1));
      while (static_cast<int>(commits.size()) > depth) {
        if (!commits.front().get().ok()) std::exit(1);
        commits.pop_front();
      }
      if (step > 0) r.bytes += 2 * layout.total_bytes();
    }
    for (auto& c : commits)
      if (!c.get().ok()) std::exit(1);
    if (step > 0) r.step_s.push_back(absl::ToDoubleSeconds(absl::Now() - t0));
  }
  return r;
}

struct Trial {
  double wall_s = 0, aggregate_bps = 0, spread = 0;
  std::vector<double> rank_mean_s;
};

Trial RunTrial(const std::string& root, uint64_t cap, int ranks, int objects,
               uint64_t object_bytes, int steps, absl::Duration turn) {
  std::vector<int> fds;
  std::vector<pid_t> pids;
  absl::Time t0 = absl::Now();
  for (int r = 0; r < ranks; ++r) {
    int p[2];
    if (::pipe(p) != 0) std::exit(1);
    pid_t pid = ::fork();
    if (pid == 0) {
      ::close(p[0]);
      RankResult res =
          RunRank(root, cap, r, objects, object_bytes, steps, turn);
      std::string out = json{{"steps", res.step_s}, {"bytes", res.bytes}}.dump();
      if (::write(p[1], out.data(), out.size()) < 0) _exit(1);
      _exit(0);
    }
    ::close(p[1]);
    fds.push_back(p[0]);
    pids.push_back(pid);
  }
  Trial t;
  uint64_t bytes = 0;
  for (int r = 0; r < ranks; ++r) {
    std::string text;
    char buf[4096];
    ssize_t n;
    while ((n = ::read(fds[r], buf, sizeof(buf))) > 0) text.append(buf, n);
    ::close(fds[r]);
    int status = 0;
    ::waitpid(pids[r], &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 || text.empty()) {
      std::cerr << "mlpo-bench slots: rank " << r << " failed\n";
      throw CLI::RuntimeError(1);
    }
    json j = json::parse(text);
    double sum = 0;
    for (double x : j["steps"]) sum += x;
    t.rank_mean_s.push_back(sum / std::max<size_t>(1, j["steps"].size()));
    bytes += j["bytes"].get<uint64_t>();
  }
  t.wall_s = absl::ToDoubleSeconds(absl::Now() - t0);
  t.aggregate_bps = bytes / t.wall_s;
  auto [lo, hi] =
      std::minmax_element(t.rank_mean_s.begin(), t.rank_mean_s.end());
  t.spread = *hi / *lo;
  std::filesystem::remove_all(root + "/slots");
  return t;
}

}  // namespace

void AddSlotsBench(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "slots",
      "Ranks of a node sharing a capped one-slot path (forked processes): "
      "aggregate bandwidth and the spread of per-rank step times with slots "
      "handed on after a turn against slots held until idle, in one run");
  struct Args {
    BenchFlags f;
    int ranks = 3, objects = 8, steps = 3, turn_ms = 100;
    std::string object_bytes = "24M", cap = "200MB";
  };
  auto a = std::make_shared<Args>();
  AddBenchFlags(cmd, &a->f);
  cmd->add_option("--ranks", a->ranks, "Processes sharing the path")
      ->capture_default_str()
      ->check(CLI::Range(2, 16));
  cmd->add_option("--objects", a->objects, "Objects per rank")
      ->capture_default_str()
      ->check(CLI::Range(1, 10000));
  cmd->add_option("--object-bytes", a->object_bytes, "Bytes per object")
      ->capture_default_str();
  cmd->add_option("--steps", a->steps, "Timed steps per rank")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000));
  cmd->add_option("--cap", a->cap, "The path's cap per direction, bytes/s")
      ->capture_default_str();
  cmd->add_option("--turn-ms", a->turn_ms, "slot_turn_ms of the first trial")
      ->capture_default_str()
      ->check(CLI::Range(1, 60000));
  cmd->callback([a] {
    BenchFlags& f = a->f;
    if (f.quick) {
      a->objects = std::min(a->objects, 4);
      a->steps = std::min(a->steps, 2);
    }
    uint64_t bytes = SizeArg("--object-bytes", a->object_bytes);
    uint64_t cap = SizeArg("--cap", a->cap);
    std::string root = f.dir + "/slots-path";
    EnsureBenchDir(f);
    EnsureDir(root);
    json out;
    for (int pass = 0; pass < 2; ++pass) {
      absl::Duration turn =
          pass == 0 ? absl::Milliseconds(a->turn_ms) : absl::ZeroDuration();
      std::string name = pass == 0 ? "turns" : "held_until_idle";
      Progress(absl::StrFormat("%d ranks, slots %s", a->ranks, name));
      Trial t = RunTrial(root, cap, a->ranks, a->objects, bytes, a->steps,
                         turn);
      out[name] = {{"aggregate_bps", t.aggregate_bps},
                   {"wall_s", t.wall_s},
                   {"rank_mean_step_s", t.rank_mean_s},
                   {"spread", t.spread}};
    }
    out["ranks"] = a->ranks;
    out["cap_bps"] = cap;
    out["aggregate_ratio_turns_vs_held"] =
        out["turns"]["aggregate_bps"].get<double>() /
        out["held_until_idle"]["aggregate_bps"].get<double>();
    Progress("");
    if (f.json) {
      std::cout << out.dump(2) << "\n";
      return;
    }
    std::printf("%d ranks on one path capped at %s per direction, one slot\n",
                a->ranks, FormatRate(double(cap)).c_str());
    for (const char* name : {"turns", "held_until_idle"}) {
      const json& j = out[name];
      std::string per;
      for (double x : j["rank_mean_step_s"]) per += absl::StrFormat(" %.2f", x);
      std::printf("%-16s aggregate %s, per-rank mean step s:%s, spread "
                  "%.2fx\n",
                  name, FormatRate(j["aggregate_bps"].get<double>()).c_str(),
                  per.c_str(), j["spread"].get<double>());
    }
    std::printf("aggregate_ratio_turns_vs_held %.2f\n",
                out["aggregate_ratio_turns_vs_held"].get<double>());
  });
}

}  // namespace mlpo
