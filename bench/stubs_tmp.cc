namespace CLI { class App; }
#include "bench/bench_common.h"
namespace mlpo { void AddStoreBench(CLI::App&) {} void AddStepBench(CLI::App&) {} }
