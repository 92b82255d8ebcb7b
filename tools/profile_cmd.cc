// `mlpo profile PATH...` and `mlpo profile --store STORE`: measures each
// path's O_DIRECT bandwidth through the engine (sequential write, read, and
// mixed) with the one probe definition the benchmarks use too (ProbePath),
// and deletes its files. With --store it measures the store's paths with
// their caps and records the figures in the store's index, where a store
// opened without explicit fractions takes its stripe fractions from them.
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <iostream>

#include "CLI/CLI.hpp"
#include "absl/strings/str_format.h"
#include "nlohmann/json.hpp"
#include "store/store_target.h"
#include "tools/probe/bandwidth_probe.h"
#include "store/object_store.h"
#include "base/size_units.h"
#include "tools/cli_checks.h"
#include "tools/cli_util.h"
#include "tools/ownership.h"
#include "tools/commands.h"

namespace mlpo {

void AddProfileCommand(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "profile",
      "Measure each path's read, write and mixed (read+write in flight "
      "together) bandwidth with O_DIRECT through mlpo's I/O engine; with "
      "--store, measure a store's paths and record the figures in its index");
  struct Args {
    std::vector<std::string> paths;
    std::string store;
    std::string size = "1G", block = "4M", engine = "auto";
    int depth = 16;
    double seconds = 2;
    bool json = false;
  };
  auto a = std::make_shared<Args>();
  cmd->add_option("paths", a->paths, "Directories to measure");
  cmd->add_option("--store", a->store,
                  "Measure this store's paths (TOML config or store "
                  "directory), with their caps, and record the figures in "
                  "its index (needs the writer lock)");
  cmd->add_option("--size", a->size,
                  "Bytes of the temporary test file per path (e.g. 512M, 2G)")
      ->capture_default_str();
  cmd->add_option("--block", a->block, "Bytes per request (multiple of 4K)")
      ->capture_default_str();
  cmd->add_option("--depth", a->depth, "Requests in flight")
      ->capture_default_str()
      ->check(CLI::Range(1, 4096));
  cmd->add_option("--seconds", a->seconds,
                  "Run each load this long (0 = one pass over the file)")
      ->capture_default_str()
      ->check(FiniteIn(0, 3600));
  cmd->add_option("--engine", a->engine, "auto, uring or threadpool")
      ->capture_default_str()
      ->check(CLI::IsMember({"auto", "uring", "threadpool"}));
  cmd->add_flag("--json", a->json, "Print one JSON object on stdout");
  cmd->callback([a] {
    auto size = ParseSize(a->size);
    auto block = ParseSize(a->block);
    if (!size.ok() || !block.ok() || *block == 0 || *block % 4096) {
      std::cerr << "mlpo profile: "
                << (!size.ok()    ? size.status().message()
                    : !block.ok() ? block.status().message()
                                  : "--block must be a multiple of 4096")
                << "\n";
      throw CLI::RuntimeError(2);
    }
    if (a->paths.empty() == a->store.empty()) {
      std::cerr << "mlpo profile: give directories or --store STORE (one of "
                   "the two)\n";
      throw CLI::RuntimeError(2);
    }
    struct Target {
      std::string root;
      uint64_t read_cap = 0, write_cap = 0;
    };
    std::vector<Target> targets;
    std::unique_ptr<ObjectStore> store;
    if (!a->store.empty()) {
      auto o = StoreOptionsForTarget(a->store);
      if (!o.ok()) {
        std::cerr << "mlpo profile: " << o.status().message() << "\n";
        throw CLI::RuntimeError(1);
      }
      WillWrite(*o);  // run as root: the owner keeps the files
      auto s = ObjectStore::Open(*o);  // the lock: no job is running on it
      if (!s.ok()) {
        std::cerr << "mlpo profile: " << s.status().message() << "\n";
        throw CLI::RuntimeError(1);
      }
      store = std::move(*s);
      for (auto& p : store->options().paths)
        targets.push_back({p.path.root, p.path.read_cap, p.path.write_cap});
    } else {
      for (auto& p : a->paths) targets.push_back({p});
    }
    // Every path is checked before anything is measured or printed; a
    // directory named twice (DIR and DIR/, or through a link) is measured
    // once.
    std::vector<Target> distinct;
    std::vector<std::filesystem::path> seen;
    for (const auto& t : targets) {
      std::error_code ec;
      if (!std::filesystem::is_directory(t.root, ec)) {
        std::cerr << "mlpo profile: " << t.root
                  << " does not exist or is not a directory\n";
        throw CLI::RuntimeError(1);
      }
      std::filesystem::path c = std::filesystem::canonical(t.root, ec);
      if (ec) c = t.root;
      auto same = std::find(seen.begin(), seen.end(), c);
      if (same != seen.end()) {
        std::cerr << "mlpo profile: " << t.root << " is "
                  << distinct[same - seen.begin()].root
                  << " again; measured once\n";
        continue;
      }
      seen.push_back(c);
      distinct.push_back(t);
      // The test file must leave the disk most of its room: a size above
      // half the free space filled the disk (and the store on it).
      struct statvfs fs;
      if (statvfs(t.root.c_str(), &fs) == 0) {
        uint64_t free_bytes =
            static_cast<uint64_t>(fs.f_bavail) * static_cast<uint64_t>(fs.f_frsize);
        if (*size > free_bytes / 2) {
          std::cerr << "mlpo profile: --size " << FormatBytes(*size)
                    << " is more than half the free space of " << t.root
                    << " (" << FormatBytes(free_bytes)
                    << " free); give a smaller --size\n";
          throw CLI::RuntimeError(1);
        }
      }
    }
    targets = std::move(distinct);
    nlohmann::json out = nlohmann::json::object();
    out["paths"] = nlohmann::json::array();
    int rc = 0;
    for (const auto& t : targets) {
      PathProbeOptions po;
      po.file_bytes = *size;
      po.block = *block;
      po.depth = a->depth;
      po.duration = absl::Seconds(a->seconds);
      po.read_cap = t.read_cap;
      po.write_cap = t.write_cap;
      po.engine = a->engine == "uring"        ? IoEngineKind::kUring
                  : a->engine == "threadpool" ? IoEngineKind::kThreadPool
                                              : IoEngineKind::kAuto;
      po.on_load = [&](ProbeLoad l) {
        Progress(absl::StrFormat("profile %s: %s ...", t.root,
                                 ProbeLoadName(l)));
      };
      auto r = ProbePath(t.root, po);
      Progress("");
      if (!r.ok()) {
        std::cerr << "mlpo profile: " << r.status().message() << "\n";
        rc = 1;
        continue;
      }
      out["paths"].push_back({{"path", t.root},
                              {"read_bps", r->read_bps},
                              {"write_bps", r->write_bps},
                              {"mixed_bps", r->mixed_bps}});
    }
    if (store && rc == 0) {
      absl::Status st =
          store->SetAttribute(kBandwidthAttribute, out["paths"].dump());
      if (!st.ok()) {
        std::cerr << "mlpo profile: " << st.message() << "\n";
        rc = 1;
      }
      out["recorded_in"] = store->options().meta_dir;
    }
    if (a->json) {
      std::cout << out.dump(2) << "\n";
    } else if (!out["paths"].empty()) {
      std::printf("%-32s %14s %14s %14s\n", "path", "read", "write",
                  "mixed(r+w)");
      for (auto& r : out["paths"])
        std::printf("%-32s %14s %14s %14s\n",
                    r["path"].get<std::string>().c_str(),
                    FormatRate(r["read_bps"]).c_str(),
                    FormatRate(r["write_bps"]).c_str(),
                    FormatRate(r["mixed_bps"]).c_str());
      if (out.contains("recorded_in"))
        std::printf("recorded in %s: stores opened without explicit "
                    "fractions stripe by the mixed figures\n",
                    out["recorded_in"].get<std::string>().c_str());
    }
    if (rc) throw CLI::RuntimeError(rc);
  });
}

}  // namespace mlpo
