// `mlpo profile PATH...`: measures each path's O_DIRECT bandwidth through the
// engine (sequential read, sequential write, mixed) and deletes its files.
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <iostream>

#include "CLI/CLI.hpp"
#include "absl/strings/str_format.h"
#include "nlohmann/json.hpp"
#include "store/bandwidth_probe.h"
#include "store/size_units.h"
#include "tools/cli_util.h"
#include "tools/commands.h"

namespace mlpo {

void AddProfileCommand(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "profile",
      "Measure each path's read, write and mixed (read+write in flight "
      "together) bandwidth with O_DIRECT through mlpo's I/O engine");
  struct Args {
    std::vector<std::string> paths;
    std::string size = "1G", block = "1M", engine = "auto";
    int depth = 32;
    double seconds = 0;
    bool json = false;
  };
  auto a = std::make_shared<Args>();
  cmd->add_option("paths", a->paths, "Directories to measure")->required();
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
      ->capture_default_str();
  cmd->add_option("--engine", a->engine, "auto, uring or threadpool")
      ->capture_default_str()
      ->check(CLI::IsMember({"auto", "uring", "threadpool"}));
  cmd->add_flag("--json", a->json, "Print one JSON object on stdout");
  cmd->callback([a] {
    auto size = ParseSize(a->size);
    auto block = ParseSize(a->block);
    if (!size.ok() || !block.ok()) {
      std::cerr << "mlpo profile: "
                << (!size.ok() ? size.status() : block.status()).message()
                << "\n";
      throw CLI::RuntimeError(2);
    }
    // Every path is checked before anything is measured or printed.
    for (const auto& path : a->paths) {
      std::error_code ec;
      if (!std::filesystem::is_directory(path, ec)) {
        std::cerr << "mlpo profile: " << path
                  << " does not exist or is not a directory\n";
        throw CLI::RuntimeError(1);
      }
    }
    nlohmann::json out = nlohmann::json::object();
    out["paths"] = nlohmann::json::array();
    int rc = 0;
    for (const auto& path : a->paths) {
      std::error_code ec;
      std::string file =
          absl::StrFormat("%s/.mlpo-profile-%d.tmp", path, getpid());
      nlohmann::json row = {{"path", path}};
      absl::Status st = PrepareProbeFile(file, *size);
      for (ProbeLoad load :
           {ProbeLoad::kWrite, ProbeLoad::kRead, ProbeLoad::kMixed}) {
        if (!st.ok()) break;
        std::fprintf(stderr, "profile %s: %-5s ...", path.c_str(),
                     ProbeLoadName(load));
        ProbeOptions po;
        po.load = load;
        po.block = *block;
        po.depth = a->depth;
        po.file_bytes = *size;
        po.duration = absl::Seconds(a->seconds);
        po.engine = a->engine == "uring"        ? IoEngineKind::kUring
                    : a->engine == "threadpool" ? IoEngineKind::kThreadPool
                                                : IoEngineKind::kAuto;
        auto r = RunProbe(file, po);
        if (!r.ok()) {
          st = r.status();
          break;
        }
        row[std::string(ProbeLoadName(load)) + "_bps"] = r->bytes_per_s();
        std::fprintf(stderr, " %s\n", FormatRate(r->bytes_per_s()).c_str());
      }
      std::filesystem::remove(file, ec);
      if (!st.ok()) {
        std::cerr << "mlpo profile: " << path << ": " << st.message() << "\n";
        rc = 1;
        continue;
      }
      out["paths"].push_back(row);
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
    }
    if (rc) throw CLI::RuntimeError(rc);
  });
}

}  // namespace mlpo
