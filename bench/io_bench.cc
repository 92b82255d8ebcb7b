// `mlpo-bench io`: the I/O engine against fio on the same file, at the same
// queue depths and block sizes, interleaved in one run; then two capped paths
// driven together against the sum of their caps.
//
// Like against like: the matrix gives the engine ordinary 4 KiB-page
// buffers, as fio's are. The engine's huge-page buffers (what the store
// uses) are then measured at each load's best setting and reported apart
// (`*_hugepage_ratio`): on a virtual disk with a 254-segment limit they turn
// one 4 MiB request into one device request instead of several.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <iterator>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>

#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "base/removed_on_signal.h"
#include "bench/bench_common.h"
#include "nlohmann/json.hpp"
#include "store/path/admission.h"
#include "tools/probe/bandwidth_probe.h"
#include "tools/cli_util.h"

namespace mlpo {
namespace {

// Runs fio with the same load; returns bytes/s (read + write) or an error.
absl::StatusOr<double> RunFio(const std::string& file, ProbeLoad load,
                              size_t block, int depth, uint64_t size,
                              double seconds) {
  std::string out = file + ".fio.json";
  std::string rw = load == ProbeLoad::kRead    ? "read"
                   : load == ProbeLoad::kWrite ? "write"
                                               : "rw";
  std::string cmd = absl::StrFormat(
      "fio --name=ref --filename=%s --rw=%s --rwmixread=50 --bs=%d "
      "--iodepth=%d --ioengine=io_uring --direct=1 --size=%d --time_based "
      "--runtime=%dms --output-format=json --output=%s >/dev/null 2>&1",
      file, rw, block, depth, size,
      std::max(1, static_cast<int>(seconds * 1000 + 0.5)), out);
  int rc = std::system(cmd.c_str());
  if (rc != 0)
    return absl::InternalError(absl::StrFormat(
        "fio failed (exit %d): %s; is fio installed?", rc, cmd));
  // fio's runtime takes whole seconds unless given a unit (0.3 was a
  // parse failure), and it may put notes before its JSON.
  std::ifstream in(out);
  std::string text((std::istreambuf_iterator<char>(in)),
                   std::istreambuf_iterator<char>());
  nlohmann::json j;
  try {
    size_t brace = text.find('{');
    j = nlohmann::json::parse(brace == std::string::npos ? text
                                                         : text.substr(brace));
  } catch (const std::exception& e) {
    return absl::InternalError(std::string("cannot parse fio output: ") +
                               e.what());
  }
  std::filesystem::remove(out);
  auto& job = j["jobs"][0];
  return job["read"]["bw_bytes"].get<double>() +
         job["write"]["bw_bytes"].get<double>();
}

}  // namespace

void AddIoBench(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "io", "I/O engine vs fio (same file, depths, block sizes), then two "
            "capped paths driven together");
  struct Args {
    BenchFlags f;
    std::string size = "2G";
    std::string caps = "600MB,300MB";
    double seconds = 0;
    bool size_given = false;
  };
  auto a = std::make_shared<Args>();
  AddBenchFlags(cmd, &a->f);
  cmd->add_option("--size", a->size, "Test file size (1G with --quick)")
      ->capture_default_str()
      ->each([a](const std::string&) { a->size_given = true; });
  cmd->add_option("--caps", a->caps,
                  "Caps of the two paths driven together (bytes/s)")
      ->capture_default_str();
  cmd->add_option("--seconds", a->seconds,
                  "Seconds per measurement (default 2, 1 with --quick)");
  cmd->callback([a] {
    const BenchFlags& f = a->f;
    EnsureBenchDir(f);
    // Arguments first: a bad one fails before any measurement.
    // --quick shrinks only what was left at its default.
    uint64_t size = f.quick && !a->size_given ? (uint64_t{1} << 30)
                                              : SizeArg("--size", a->size);
    std::vector<uint64_t> caps = SizeListArg("--caps", a->caps, 2);
    double secs = a->seconds > 0 ? a->seconds : (f.quick ? 1.0 : 2.0);
    std::vector<int> depths = f.quick ? std::vector<int>{16, 64}
                                      : std::vector<int>{1, 4, 16, 64};
    std::vector<size_t> blocks =
        f.quick ? std::vector<size_t>{1 << 20, 4 << 20}
                : std::vector<size_t>{256 << 10, 1 << 20, 4 << 20, 8 << 20};
    std::string file = f.dir + "/io-bench.dat";
    RemovedOnSignal removed_if_stopped(file);
    Progress("preparing " + file);
    if (auto st = PrepareProbeFile(file, size); !st.ok()) {
      std::cerr << "\nmlpo-bench io: " << st.message() << "\n";
      throw CLI::RuntimeError(1);
    }
    auto probe = [&](ProbeLoad load, int qd, size_t bs, bool huge) {
      ProbeOptions po;
      po.load = load;
      po.block = bs;
      po.depth = qd;
      po.file_bytes = size;
      po.duration = absl::Seconds(secs);
      po.huge_pages = huge;
      return RunProbe(file, po);
    };
    nlohmann::json out;
    out["points"] = nlohmann::json::array();
    for (ProbeLoad load :
         {ProbeLoad::kRead, ProbeLoad::kWrite, ProbeLoad::kMixed}) {
      double best_engine = 0, best_fio = 0;
      int best_qd = 0;
      size_t best_bs = 0;
      for (int qd : depths) {
        for (size_t bs : blocks) {
          Progress(absl::StrFormat("io %s qd=%d bs=%s", ProbeLoadName(load),
                                   qd, FormatBytes(bs)));
          auto e = probe(load, qd, bs, /*huge_pages=*/false);
          auto r = RunFio(file, load, bs, qd, size, secs);
          if (!e.ok() || !r.ok()) {
            std::cerr << "\nmlpo-bench io: "
                      << (!e.ok() ? e.status() : r.status()).message() << "\n";
            throw CLI::RuntimeError(1);
          }
          if (e->bytes_per_s() > best_engine) {
            best_engine = e->bytes_per_s();
            best_qd = qd;
            best_bs = bs;
          }
          best_fio = std::max(best_fio, *r);
          out["points"].push_back({{"load", ProbeLoadName(load)},
                                   {"depth", qd},
                                   {"block", bs},
                                   {"engine_bps", e->bytes_per_s()},
                                   {"fio_bps", *r}});
        }
      }
      std::string n = ProbeLoadName(load);
      {
        Progress(absl::StrFormat("io %s huge pages qd=%d bs=%s",
                                 ProbeLoadName(load), best_qd,
                                 FormatBytes(best_bs)));
        auto h = probe(load, best_qd, best_bs, /*huge_pages=*/true);
        if (!h.ok()) {
          std::cerr << "\nmlpo-bench io: " << h.status().message() << "\n";
          throw CLI::RuntimeError(1);
        }
        out[n + "_engine_hugepage_bps"] = h->bytes_per_s();
        out[n + "_hugepage_ratio"] = best_fio > 0 ? h->bytes_per_s() / best_fio : 0;
      }
      out[n + "_engine_bps"] = best_engine;
      out[n + "_fio_bps"] = best_fio;
      out[n + "_ratio"] = best_fio > 0 ? best_engine / best_fio : 0;
    }
    // Two capped "paths" (directories) driven together, reads then writes.
    std::string files[2] = {f.dir + "/cap-a.dat", f.dir + "/cap-b.dat"};
    uint64_t cap_file = std::min<uint64_t>(size / 2, uint64_t{512} << 20);
    for (auto& cf : files) {
      if (auto st = PrepareProbeFile(cf, cap_file); !st.ok()) {
        std::cerr << "\nmlpo-bench io: " << st.message() << "\n";
        throw CLI::RuntimeError(1);
      }
    }
    double sum_caps = static_cast<double>(caps[0] + caps[1]);
    double capped_secs = f.quick ? 2.0 : 4.0;
    for (ProbeLoad load : {ProbeLoad::kRead, ProbeLoad::kWrite}) {
      Progress(absl::StrFormat("capped two-path %s", ProbeLoadName(load)));
      std::vector<ProbeJob> jobs(2);
      for (int i = 0; i < 2; ++i) {
        jobs[i].file = files[i];
        jobs[i].read_cap = jobs[i].write_cap = caps[i];
        jobs[i].options.load = load;
        jobs[i].options.block = 1 << 20;
        jobs[i].options.depth = 16;
        jobs[i].options.file_bytes = cap_file;
        jobs[i].options.duration = absl::Seconds(capped_secs);
      }
      auto res = RunProbesTogether(jobs);
      if (!res.ok()) {
        std::cerr << "\nmlpo-bench io: capped run failed: "
                  << res.status().message() << "\n";
        throw CLI::RuntimeError(1);
      }
      double achieved = res->sum_of_rates();
      std::string n = ProbeLoadName(load);
      out["capped_" + n + "_bps"] = achieved;
      out["capped_" + n + "_ratio"] = achieved / sum_caps;
    }
    out["capped_sum_ratio"] = std::min(out["capped_read_ratio"].get<double>(),
                                       out["capped_write_ratio"].get<double>());
    out["caps_bps"] = {caps[0], caps[1]};
    std::error_code ec;
    if (!f.keep) {
      std::filesystem::remove(file, ec);
      for (auto& cf : files) std::filesystem::remove(cf, ec);
    }
    Progress("");
    if (f.json) {
      std::cout << out.dump(2) << "\n";
      return;
    }
    std::printf("%-6s %6s %10s %14s %14s %7s\n", "load", "depth", "block",
                "engine", "fio", "ratio");
    for (auto& p : out["points"])
      std::printf("%-6s %6d %10s %14s %14s %7.3f\n",
                  p["load"].get<std::string>().c_str(), p["depth"].get<int>(),
                  FormatBytes(p["block"].get<double>()).c_str(),
                  FormatRate(p["engine_bps"]).c_str(),
                  FormatRate(p["fio_bps"]).c_str(),
                  p["engine_bps"].get<double>() /
                      std::max(1.0, p["fio_bps"].get<double>()));
    for (const char* n : {"read", "write", "mixed"})
      std::printf("best %-5s engine %s  fio %s  ratio %.3f   engine on huge "
                  "pages %s (%.3f of fio)\n",
                  n, FormatRate(out[std::string(n) + "_engine_bps"]).c_str(),
                  FormatRate(out[std::string(n) + "_fio_bps"]).c_str(),
                  out[std::string(n) + "_ratio"].get<double>(),
                  FormatRate(out[std::string(n) + "_engine_hugepage_bps"]).c_str(),
                  out[std::string(n) + "_hugepage_ratio"].get<double>());
    std::printf(
        "capped two paths (%s + %s): read %s (%.3f), write %s (%.3f); "
        "capped_sum_ratio %.3f\n",
        FormatRate(caps[0]).c_str(), FormatRate(caps[1]).c_str(),
        FormatRate(out["capped_read_bps"]).c_str(),
        out["capped_read_ratio"].get<double>(),
        FormatRate(out["capped_write_bps"]).c_str(),
        out["capped_write_ratio"].get<double>(),
        out["capped_sum_ratio"].get<double>());
  });
}

}  // namespace mlpo
