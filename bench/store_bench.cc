// `mlpo-bench store`: checkout and commit throughput of large objects
// striped over 1 path and over 2 capped paths, against the raw engine on the
// same paths with the same caps in the same run (store_ratio); then the time
// to tag a store as it grows (tag_ms, expected flat in data size).
#include <cstdio>
#include <deque>
#include <filesystem>
#include <future>
#include <iostream>

#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "base/removed_on_signal.h"
#include "bench/bench_common.h"
#include "nlohmann/json.hpp"
#include "tools/probe/bandwidth_probe.h"
#include "store/object_store.h"
#include "store/placement/stripe.h"
#include "tools/cli_util.h"

namespace mlpo {
namespace {

using json = nlohmann::json;

[[noreturn]] void Die(const absl::Status& s) {
  std::cerr << "\nmlpo-bench store: " << s.message() << "\n";
  throw CLI::RuntimeError(1);
}

struct Throughput {
  double write_bps = 0, read_bps = 0;
};

// Commits `n` objects of `bytes` each for versions 1 and 2 (untimed: the
// store reaches its steady state, where new versions reuse freed extents as
// they do in training), then times checking all out and committing them all
// as version 3, with `depth` operations in flight.
Throughput RunStore(ObjectStore* s, const std::string& prefix, int n,
                    uint64_t bytes, int depth, bool warm = true) {
  ObjectLayout layout = *ObjectLayout::Make({{"p", DType::kF32, bytes / 12},
                                             {"m", DType::kF32, bytes / 12},
                                             {"v", DType::kF32, bytes / 12}});
  auto name = [&](int i) { return absl::StrFormat("%s%d", prefix, i); };
  for (int i = 0; i < n; ++i)
    if (auto st = s->Declare(name(i), layout); !st.ok()) Die(st);
  auto commit_all = [&](std::vector<Lease>& leases, uint64_t version) {
    std::deque<std::future<absl::Status>> commits;
    for (auto& l : leases) {
      commits.push_back(s->Commit(l, version));
      while (static_cast<int>(commits.size()) >= depth) {
        if (auto st = commits.front().get(); !st.ok()) Die(st);
        commits.pop_front();
      }
    }
    for (auto& f : commits)
      if (auto st = f.get(); !st.ok()) Die(st);
  };
  auto checkout_all = [&]() {
    std::vector<Lease> leases;
    std::deque<std::future<absl::StatusOr<Lease>>> reads;
    auto take = [&]() {
      auto l = reads.front().get();
      if (!l.ok()) Die(l.status());
      leases.push_back(*l);
      reads.pop_front();
    };
    for (int i = 0; i < n; ++i) {
      reads.push_back(s->Checkout(name(i)));
      while (static_cast<int>(reads.size()) >= depth) take();
    }
    while (!reads.empty()) take();
    return leases;
  };
  uint64_t total = layout.total_bytes() * n;
  std::vector<Lease> leases = checkout_all();
  for (size_t i = 0; i < leases.size(); ++i)
    std::memset(leases[i]->data(), static_cast<int>(i + 1), 4096);
  commit_all(leases, 1);
  if (warm) {
    leases = checkout_all();
    commit_all(leases, 2);
  }
  Throughput t;
  leases.clear();
  absl::Time t0 = absl::Now();
  leases = checkout_all();
  t.read_bps = total / absl::ToDoubleSeconds(absl::Now() - t0);
  t0 = absl::Now();
  commit_all(leases, 3);
  t.write_bps = total / absl::ToDoubleSeconds(absl::Now() - t0);
  return t;
}

// The raw engine on the same paths: one file per path sized like the store's
// share, written then read with the store's block size and depth, all paths
// at once, with the same caps.
Throughput RunRaw(const StoreOptions& o, const std::vector<uint64_t>& bytes) {
  Throughput t;
  std::vector<ProbeJob> jobs(o.paths.size());
  for (size_t i = 0; i < o.paths.size(); ++i) {
    const PathOptions& p = o.paths[i].path;
    jobs[i].file = p.root + "/raw-probe.dat";
    jobs[i].read_cap = p.read_cap;
    jobs[i].write_cap = p.write_cap;
    jobs[i].cap_burst = p.cap_burst;
    jobs[i].options.block = o.extent_bytes;
    jobs[i].options.depth = p.queue_depth;
    jobs[i].options.file_bytes = bytes[i];
    if (auto st = PrepareProbeFile(jobs[i].file, bytes[i]); !st.ok()) Die(st);
  }
  for (ProbeLoad load : {ProbeLoad::kWrite, ProbeLoad::kRead}) {
    for (auto& j : jobs) j.options.load = load;
    auto res = RunProbesTogether(jobs);
    if (!res.ok()) Die(res.status());
    (load == ProbeLoad::kWrite ? t.write_bps : t.read_bps) = res->bytes_per_s();
  }
  for (auto& j : jobs) std::filesystem::remove(j.file);
  return t;
}

StoreOptions BenchOptions(const std::string& dir, const std::string& name,
                          int paths, const std::vector<uint64_t>& caps) {
  StoreOptions o;
  o.name = name;
  o.extent_bytes = 4 << 20;
  for (int i = 0; i < paths; ++i) {
    StorePathConfig pc;
    pc.path.root = absl::StrFormat("%s/%s", dir, i == 0 ? "nvme" : "pfs");
    std::filesystem::create_directories(pc.path.root);
    pc.path.kind = i == 0 ? PathKind::kNvme : PathKind::kPfs;
    pc.path.slots = 0;
    pc.path.queue_depth = 16;
    pc.path.segment_bytes = uint64_t{1} << 30;
    if (!caps.empty()) {
      pc.path.read_cap = pc.path.write_cap = caps[i];
      pc.fraction = static_cast<double>(caps[i]);
    }
    o.paths.push_back(pc);
  }
  return o;
}

}  // namespace

void AddStoreBench(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "store", "Store checkout/commit throughput vs the raw engine on the same "
               "paths, and tag time as the store grows");
  struct Args {
    BenchFlags f;
    std::string caps = "600MB,300MB";
    std::string tag_size = "10G";
    bool tag_size_given = false;
  };
  auto a = std::make_shared<Args>();
  AddBenchFlags(cmd, &a->f);
  cmd->add_flag("--keep", a->f.keep,
                "Leave the stores under --dir for `mlpo inspect`");
  cmd->add_option("--caps", a->caps, "Caps of the two-path case (bytes/s)")
      ->capture_default_str();
  cmd->add_option("--tag-size", a->tag_size,
                  "Store size at which tag time is measured (2G with --quick)")
      ->capture_default_str()
      ->each([a](const std::string&) { a->tag_size_given = true; });
  cmd->callback([a] {
    const BenchFlags& f = a->f;
    // Arguments first: a bad one fails before any measurement.
    std::vector<uint64_t> caps = SizeListArg("--caps", a->caps, 2);
    uint64_t target =
        f.quick && !a->tag_size_given ? (uint64_t{2} << 30)
                                      : SizeArg("--tag-size", a->tag_size);
    std::string dir = f.dir + "/store-bench";
    EnsureBenchDir(f);
    std::filesystem::remove_all(dir);
    EnsureDir(dir);
    std::unique_ptr<RemovedOnSignal> removed_if_stopped;
    if (!f.keep)
      removed_if_stopped = std::make_unique<RemovedOnSignal>(dir, true);
    json out;
    out["cases"] = json::array();
    std::vector<uint64_t> sizes =
        f.quick ? std::vector<uint64_t>{64 << 20, 256 << 20}
                : std::vector<uint64_t>{64 << 20, 256 << 20, 1 << 30};
    uint64_t per_case = f.quick ? (uint64_t{1} << 30) : (uint64_t{3} << 30);
    double worst = 1e9;
    for (int npaths : {1, 2}) {
      std::vector<uint64_t> cap = npaths == 2 ? caps : std::vector<uint64_t>{};
      StoreOptions o = BenchOptions(dir, absl::StrFormat("bench%d", npaths),
                                    npaths, cap);
      auto s = ObjectStore::Open(o);
      if (!s.ok()) Die(s.status());
      for (uint64_t size : sizes) {
        int n = std::max<int>(2, per_case / size);
        if (npaths == 2) n = std::max(2, n / 2);  // capped: fewer bytes
        Progress(absl::StrFormat("store: %d path(s), %d x %s objects",
                                 npaths, n, FormatBytes(size)));
        Throughput st = RunStore(s->get(), absl::StrFormat("o%lu-", size >> 20),
                                 n, size, 4);
        Progress(absl::StrFormat("raw engine: %d path(s), %s", npaths,
                                 FormatBytes(double(n) * size)));
        auto shares = SplitBytes(
            uint64_t(n) * size / kIoAlignment * kIoAlignment,
            (*s)->placement()->fractions());
        Throughput raw = RunRaw(o, shares);
        double ratio = (st.read_bps + st.write_bps) /
                       (raw.read_bps + raw.write_bps);
        worst = std::min(worst, ratio);
        out["cases"].push_back({{"paths", npaths},
                                {"capped", npaths == 2},
                                {"object_bytes", size},
                                {"objects", n},
                                {"store_write_bps", st.write_bps},
                                {"store_read_bps", st.read_bps},
                                {"raw_write_bps", raw.write_bps},
                                {"raw_read_bps", raw.read_bps},
                                {"ratio", ratio}});
      }
    }
    out["store_ratio"] = worst;
    // Tag time at a quarter of the size and at the full size.
    {
      StoreOptions o = BenchOptions(dir, "tagbench", 2, {});
      auto s = ObjectStore::Open(o);
      if (!s.ok()) Die(s.status());
      uint64_t obj = 256 << 20;
      int n = std::max<int>(4, target / obj);
      json tags = json::array();
      int done = 0;
      for (int stage : {n / 4, n}) {
        Progress(absl::StrFormat("tag bench: filling to %s",
                                 FormatBytes(double(stage) * obj)));
        RunStore(s->get(), absl::StrFormat("t%d-", done), stage - done, obj, 4,
                 /*warm=*/false);
        done = stage;
        absl::Time t0 = absl::Now();
        if (auto st = (*s)->Tag(absl::StrFormat("at-%d", stage)); !st.ok())
          Die(st);
        double ms = absl::ToDoubleMilliseconds(absl::Now() - t0);
        tags.push_back({{"store_bytes", double(stage) * obj}, {"tag_ms", ms}});
      }
      out["tag"] = tags;
      out["tag_ms"] = tags.back()["tag_ms"];
    }
    if (!f.keep) std::filesystem::remove_all(dir);
    Progress("");
    if (f.json) {
      std::cout << out.dump(2) << "\n";
      return;
    }
    std::printf("%5s %6s %10s %6s %14s %14s %14s %14s %7s\n", "paths", "capped",
                "object", "count", "store write", "raw write", "store read",
                "raw read", "ratio");
    for (auto& c : out["cases"])
      std::printf("%5d %6s %10s %6d %14s %14s %14s %14s %7.3f\n",
                  c["paths"].get<int>(), c["capped"].get<bool>() ? "yes" : "no",
                  FormatBytes(c["object_bytes"].get<double>()).c_str(),
                  c["objects"].get<int>(),
                  FormatRate(c["store_write_bps"]).c_str(),
                  FormatRate(c["raw_write_bps"]).c_str(),
                  FormatRate(c["store_read_bps"]).c_str(),
                  FormatRate(c["raw_read_bps"]).c_str(),
                  c["ratio"].get<double>());
    std::printf("store_ratio (worst case, store/raw read+write) %.3f\n",
                out["store_ratio"].get<double>());
    for (auto& t : out["tag"])
      std::printf("tag of a %s store: %.2f ms\n",
                  FormatBytes(t["store_bytes"].get<double>()).c_str(),
                  t["tag_ms"].get<double>());
  });
}

}  // namespace mlpo
