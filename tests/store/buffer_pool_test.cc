#include "store/buffer_pool.h"

#include <map>

#include "gtest/gtest.h"

namespace mlpo {
namespace {

TEST(BufferPoolTest, ReusesBySizeWithinBudget) {
  BufferPool pool(10 << 20);
  AlignedBuffer a = pool.Get(6 << 20);
  char* pa = a.data();
  pool.Put(std::move(a));
  EXPECT_EQ(pool.idle_bytes(), 6u << 20);
  AlignedBuffer b = pool.Get(6 << 20);
  EXPECT_EQ(b.data(), pa);  // the same memory came back
  EXPECT_EQ(pool.reused(), 1u);
  AlignedBuffer c = pool.Get(4 << 20);  // other size: fresh
  EXPECT_NE(c.data(), pa);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(b.data()) % (2 << 20), 0u)
      << "large buffers are 2 MiB aligned for huge pages";
  pool.Put(std::move(b));
  pool.Put(std::move(c));  // 6 + 4 = 10 MiB: fits
  EXPECT_EQ(pool.idle_bytes(), 10u << 20);
  pool.Put(AlignedBuffer(1 << 20));  // over budget: dropped
  EXPECT_EQ(pool.idle_bytes(), 10u << 20);
}

// Records what is pinned; fails the call numbered fail_at (1-based).
class FakeRegistrar : public HostRegistrar {
 public:
  absl::Status RegisterHost(void* p, size_t n) override {
    if (++calls == fail_at) return absl::InternalError("injected pin failure");
    if (!pinned.emplace(p, n).second)
      return absl::AlreadyExistsError("pinned twice");
    return absl::OkStatus();
  }
  void UnregisterHost(void* p) override {
    if (pinned.erase(p) == 0) ++bad_unpins;
  }
  uint64_t registered_bytes() const override {
    uint64_t t = 0;
    for (auto& [p, n] : pinned) t += n;
    return t;
  }
  std::map<void*, size_t> pinned;
  int calls = 0, fail_at = -1, bad_unpins = 0;
};

// Every buffer the pool makes is pinned once, a recycled one is not pinned
// again, one the pool frees is unpinned first, and ClearRegistrar unpins
// what is still out (the store calls it before the DRAM tier frees its own).
TEST(BufferPoolTest, PinsWhatItMakesAndUnpinsBeforeFreeing) {
  BufferPool pool(8 << 20);
  pool.Put(pool.Get(1 << 20));  // idle before the registrar comes
  FakeRegistrar r;
  ASSERT_TRUE(pool.SetRegistrar(&r).ok());
  EXPECT_EQ(r.pinned.size(), 1u);  // the idle one
  AlignedBuffer a = pool.Get(1 << 20);  // the idle one, already pinned
  AlignedBuffer b = pool.Get(6 << 20);  // new: pinned now
  EXPECT_EQ(r.calls, 2);
  EXPECT_EQ(r.pinned.count(b.data()), 1u);
  EXPECT_EQ(pool.pinned_bytes(), 7u << 20);
  pool.Put(std::move(b));  // kept idle: stays pinned
  AlignedBuffer c = pool.Get(4 << 20);
  void* pc = c.data();
  pool.Put(std::move(c));  // 6 + 4 > 8 MiB: freed, unpinned first
  EXPECT_EQ(r.pinned.count(pc), 0u);
  EXPECT_EQ(pool.pinned_bytes(), 7u << 20);
  pool.ClearRegistrar();  // `a` is still out
  EXPECT_TRUE(r.pinned.empty());
  EXPECT_EQ(r.bad_unpins, 0);
  EXPECT_EQ(pool.pinned_bytes(), 0u);
  pool.Put(std::move(a));  // no registrar: nothing to unpin
  EXPECT_EQ(r.bad_unpins, 0);
  // A buffer that cannot be pinned still serves; the failure is counted.
  FakeRegistrar flaky;
  flaky.fail_at = 3;  // two idle buffers pin, the next new one fails
  ASSERT_TRUE(pool.SetRegistrar(&flaky).ok());
  AlignedBuffer d = pool.Get(2 << 20);
  EXPECT_NE(d.data(), nullptr);
  EXPECT_EQ(pool.pin_failures(), 1u);
  pool.ClearRegistrar();
  EXPECT_TRUE(flaky.pinned.empty());
  // Pinning the idle buffers fails half-way: nothing stays pinned.
  FakeRegistrar bad;
  bad.fail_at = 2;
  EXPECT_FALSE(pool.SetRegistrar(&bad).ok());
  EXPECT_TRUE(bad.pinned.empty());
  EXPECT_EQ(pool.pinned_bytes(), 0u);
}

}  // namespace
}  // namespace mlpo
