#include "bench/bench_common.h"

#include "absl/strings/str_split.h"
#include "base/size_units.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iostream>

namespace mlpo {

void AddBenchFlags(CLI::App* cmd, BenchFlags* f) {
  cmd->add_option("--dir", f->dir, "Directory for the benchmark's files")
      ->capture_default_str();
  cmd->add_flag("--quick", f->quick,
                "Reduced run (~30 s) for smoke tests and quick checks");
  cmd->add_flag("--json", f->json, "Print one JSON object on stdout");
}

void EnsureDir(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) {
    std::cerr << "mlpo-bench: cannot create " << dir << ": " << ec.message()
              << "\n";
    throw CLI::RuntimeError(1);
  }
}

CLI::Validator CountArg() {
  return CLI::Validator(
      [](std::string& v) -> std::string {
        auto n = ParseCount(v);
        if (!n.ok()) return std::string(n.status().message());
        v = std::to_string(*n);
        return std::string();
      },
      "COUNT");
}

void EnsureNamedDir(const std::string& flag, const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::is_directory(dir, ec)) return;
  fs::path parent = fs::absolute(fs::path(dir), ec).lexically_normal();
  parent = parent.has_filename() ? parent.parent_path()
                                 : parent.parent_path().parent_path();
  if (!fs::is_directory(parent, ec)) {
    std::cerr << "mlpo-bench: " << flag << ": " << dir << ": its parent "
              << parent.string() << " does not exist (a typo, or a disk "
              << "that is not mounted?); only the last directory is made\n";
    throw CLI::RuntimeError(2);
  }
  fs::create_directory(dir, ec);
  if (ec) {
    std::cerr << "mlpo-bench: " << flag << ": cannot create " << dir << ": "
              << ec.message() << "\n";
    throw CLI::RuntimeError(1);
  }
}

void EnsureBenchDir(const BenchFlags& f) {
  if (f.dir == BenchFlags{}.dir)
    EnsureDir(f.dir);
  else
    EnsureNamedDir("--dir", f.dir);
}

void EnsureWritableFile(const std::string& flag, const std::string& file) {
  std::FILE* f = std::fopen(file.c_str(), "a");
  if (f == nullptr) {
    std::cerr << "mlpo-bench: " << flag << ": cannot write " << file << ": "
              << std::strerror(errno) << "\n";
    throw CLI::RuntimeError(2);
  }
  std::fclose(f);
}

uint64_t SizeArg(const std::string& flag, const std::string& value) {
  auto v = ParseSize(value);
  if (!v.ok()) {
    std::cerr << "mlpo-bench: " << flag << ": " << v.status().message() << "\n";
    throw CLI::RuntimeError(2);
  }
  return *v;
}

std::vector<uint64_t> SizeListArg(const std::string& flag,
                                  const std::string& value, size_t want) {
  std::vector<uint64_t> out;
  for (absl::string_view part : absl::StrSplit(value, ','))
    out.push_back(SizeArg(flag, std::string(part)));
  if (out.size() != want) {
    std::cerr << "mlpo-bench: " << flag << " takes " << want
              << " comma-separated sizes, got '" << value << "'\n";
    throw CLI::RuntimeError(2);
  }
  return out;
}


void BenchFail(const std::string& cmd, const std::string& what,
               const absl::Status& s) {
  std::cerr << "\nmlpo-bench " << cmd << ": " << what << ": " << s.message()
            << "\n";
  throw CLI::RuntimeError(1);
}

void SetSyntheticModel(OptimizerOptions* o, uint64_t params,
                       uint64_t subgroup, int threads) {
  ParamGroup g;
  g.numel = params;
  g.hyper.weight_decay = 0.01;
  o->groups.push_back(g);
  o->subgroup_numel = subgroup;
  o->grad_dtype = DType::kF16;
  o->param_dtype = DType::kBF16;
  o->pipeline.threads = threads;
}

}  // namespace mlpo
