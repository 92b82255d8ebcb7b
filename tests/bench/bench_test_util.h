// What the tests that run the built benchmarks share.
#ifndef MLPO_TESTS_BENCH_BENCH_TEST_UTIL_H_
#define MLPO_TESTS_BENCH_BENCH_TEST_UTIL_H_

#include <fstream>
#include <set>
#include <string>

#include "nlohmann/json.hpp"

namespace mlpo {

// The names of the events in a Chrome trace file a benchmark wrote with
// --trace (empty when it is missing or not JSON).
inline std::set<std::string> TraceEventNames(const std::string& file) {
  std::set<std::string> names;
  std::ifstream in(file);
  auto t = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (t.is_discarded() || !t.contains("traceEvents")) return names;
  for (const auto& e : t["traceEvents"])
    if (e.contains("name")) names.insert(e["name"].get<std::string>());
  return names;
}

}  // namespace mlpo

#endif  // MLPO_TESTS_BENCH_BENCH_TEST_UTIL_H_
