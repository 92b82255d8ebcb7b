namespace CLI { class App; }
#include "bench/bench_common.h"
namespace mlpo { void AddStepBench(CLI::App&) {} }
