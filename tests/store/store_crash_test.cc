// A child process commits in a loop and is SIGKILLed at random points; after
// each kill the store reopens with every head readable and checksums valid,
// heads never move backwards, and the allocators hold exactly the referenced
// extents (crash orphans were reclaimed).
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <map>
#include <random>

#include "gtest/gtest.h"
#include "store/admin/gc.h"
#include "tests/store/store_test_util.h"

namespace mlpo {
namespace {

constexpr int kObjects = 6;

[[noreturn]] void ChildCommitLoop(const StoreOptions& o, int ready_fd,
                                  uint64_t first_version) {
  auto s = ObjectStore::Open(o);
  if (!s.ok()) _exit(2);
  char c = 'r';
  if (write(ready_fd, &c, 1) != 1) _exit(3);
  for (uint64_t v = first_version;; ++v) {
    for (int i = 0; i < kObjects; ++i) {
      std::string name = "obj-" + std::to_string(i);
      auto l = (*s)->Checkout(name).get();
      if (!l.ok()) _exit(4);
      FillFor(l->get(), v);
      if (!(*s)->Commit(*l, v).get().ok()) _exit(5);
    }
    if (v % 7 == 0 && !(*s)->Tag("t" + std::to_string(v)).ok()) _exit(6);
    if (v % 11 == 0) {
      auto tags = (*s)->Tags();
      if (!tags.empty()) (void)(*s)->DropTag(tags.begin()->first);
      (void)Gc(**s);
    }
  }
}

TEST(StoreCrashTest, SigkillDuringCommitsLosesNothingCommitted) {
  TempDir dir;
  StoreOptions o = TestStoreOptions(dir, {0.6, 0.4});
  {
    auto s = ObjectStore::Open(o);
    ASSERT_TRUE(s.ok());
    for (int i = 0; i < kObjects; ++i)
      ASSERT_TRUE(
          (*s)->Declare("obj-" + std::to_string(i), TestLayout(30000 + i * 7000))
              .ok());
  }
  std::mt19937 rng(99);
  std::map<std::string, uint64_t> last_head;
  uint64_t next_version = 1;
  int kills = 0;
  const int iterations = CrashIterations(50);
  for (int iter = 0; iter < iterations; ++iter) {
    ASSERT_TRUE(RunAndKill(
        [&](int ready) { ChildCommitLoop(o, ready, next_version); },
        1000 * (rng() % 60)))
        << "the child failed or exited before it was killed";
    ++kills;

    auto s = ObjectStore::Open(o);
    ASSERT_TRUE(s.ok()) << "iteration " << iter << ": " << s.status();
    for (int i = 0; i < kObjects; ++i) {
      std::string name = "obj-" + std::to_string(i);
      auto l = (*s)->Checkout(name).get();
      ASSERT_TRUE(l.ok()) << "iteration " << iter << ": " << l.status();
      if ((*l)->is_new()) {
        EXPECT_EQ(last_head[name], 0u) << name << " lost its head";
        continue;
      }
      uint64_t v = (*l)->step();
      EXPECT_GE(v, last_head[name]) << name << " went backwards";
      EXPECT_TRUE(Matches(**l, v)) << name << " version " << v;
      last_head[name] = v;
      next_version = std::max(next_version, v + 1);
    }
    ExpectStoreVerifies(s->get());
  }
  EXPECT_EQ(kills, iterations);
  EXPECT_GT(next_version, 3u) << "the child hardly committed anything";
}

}  // namespace
}  // namespace mlpo
