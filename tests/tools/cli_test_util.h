// The `mlpo` CLI tests' fixture: a store made through the API (one object
// with statistics worth checking and a tag) and a runner for the real binary
// (MLPO_CLI, set by tests/CMakeLists.txt). Shared by cli_test.cc and
// cli_relocate_test.cc.
#ifndef MLPO_TESTS_TOOLS_CLI_TEST_UTIL_H_
#define MLPO_TESTS_TOOLS_CLI_TEST_UTIL_H_

#include <cmath>
#include <string>

#include "gtest/gtest.h"
#include "tests/store/store_test_util.h"

namespace mlpo {

using CliRun = CommandResult;

// Runs `mlpo ARGS`; stdout in out (with stderr too when `with_stderr`).
inline CliRun Mlpo(const std::string& args, bool with_stderr = false) {
  return RunCommand("timeout 60 " + std::string(MLPO_CLI) + " " + args +
                    (with_stderr ? " 2>&1" : " 2>/dev/null"));
}

class CliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    o_ = TestStoreOptions(dir_, {0.5, 0.5});
    auto s = ObjectStore::Open(o_);
    ASSERT_TRUE(s.ok());
    ObjectLayout l = *ObjectLayout::Make({{"p", DType::kF32, 1000},
                                          {"m", DType::kBF16, 3000}});
    ASSERT_TRUE((*s)->Declare("w0", l).ok());
    auto lease = (*s)->Checkout("w0").get();
    ASSERT_TRUE(lease.ok());
    float* p = (*lease)->Section<float>("p");
    for (int i = 0; i < 1000; ++i) p[i] = static_cast<float>(i);  // mean 499.5
    p[7] = NAN;
    p[8] = INFINITY;
    uint16_t* m = (*lease)->Section<uint16_t>("m");
    for (int i = 0; i < 3000; ++i) m[i] = FloatToBF16(-2.0f);
    ASSERT_TRUE((*s)->Commit(*lease, 7).get().ok());
    ASSERT_TRUE((*s)->Tag("first").ok());
    store_dir_ = o_.paths[1].path.root + "/t/rank-0";
  }
  TempDir dir_;
  StoreOptions o_;
  std::string store_dir_;
};

}  // namespace mlpo

#endif  // MLPO_TESTS_TOOLS_CLI_TEST_UTIL_H_
