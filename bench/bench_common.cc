#include "bench/bench_common.h"

#include <unistd.h>

#include <cstdio>
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

void Progress(const std::string& line) {
  // In a terminal the line is rewritten in place; in a log, one line each.
  static const bool tty = isatty(STDERR_FILENO);
  if (tty)
    std::fprintf(stderr, "\r\033[K%s", line.c_str());
  else if (!line.empty())
    std::fprintf(stderr, "%s\n", line.c_str());
  std::fflush(stderr);
}

}  // namespace mlpo
