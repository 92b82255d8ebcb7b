// mlpo-bench: benchmarks that print our figure against a reference measured
// in the same run (fio, the raw engine, the baseline mode).
#include "bench/bench_common.h"
#include "optimizer/optimizer_config.h"

int main(int argc, char** argv) {
  mlpo::RegisterOptimizerConfigKeys();  // (the store configs' optimizer keys)
  CLI::App app{"mlpo-bench: measured against references in the same run"};
  app.require_subcommand(1);
  mlpo::AddIoBench(app);
  mlpo::AddStoreBench(app);
  mlpo::AddStepBench(app);
  mlpo::AddKernelBench(app);
  mlpo::AddSlotsBench(app);
  mlpo::AddGpuBench(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int rc = app.exit(e);
    // A command's own failure keeps its code; every usage error (a bad
    // option value, a missing argument) exits 2, as the README says.
    if (rc != 0 && dynamic_cast<const CLI::RuntimeError*>(&e) == nullptr)
      rc = 2;
    return rc;
  }
  return 0;
}
