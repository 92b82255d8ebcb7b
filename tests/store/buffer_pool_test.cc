#include "store/buffer_pool.h"

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

}  // namespace
}  // namespace mlpo
