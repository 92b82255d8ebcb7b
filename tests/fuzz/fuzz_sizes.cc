// libFuzzer: size, cache-budget, cap and planner path parsing. A parsed
// size is within what the parser promises (at most 1 EiB).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "base/size_units.h"
#include "store/store_options.h"
#include "tools/plan/plan_model.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string text(reinterpret_cast<const char*>(data), size);
  auto s = mlpo::ParseSize(text);
  if (s.ok() && *s > (uint64_t{1} << 60)) std::abort();
  uint64_t bytes = 0;
  double pct = 0;
  if (mlpo::ParseCacheBudget(text, &bytes, &pct).ok() &&
      !(pct >= 0 && pct <= 100))
    std::abort();
  auto p = mlpo::ParsePlanPath(text);
  if (p.ok() && !(p->mixed_bps > 0)) std::abort();
  return 0;
}
