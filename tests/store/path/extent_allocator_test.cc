#include "store/path/extent_allocator.h"

#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "store/io/io_engine.h"

namespace mlpo {
namespace {

constexpr uint64_t kSeg = 64 * kIoAlignment;

TEST(ExtentAllocatorTest, FillFreeCoalesceExhaust) {
  ExtentAllocator a(kSeg);
  a.AddSegment();
  std::vector<Range> got;
  for (int i = 0; i < 64; ++i) {
    auto r = a.Allocate(kIoAlignment);
    ASSERT_TRUE(r.ok());
    ASSERT_EQ(r->size(), 1u);
    got.push_back((*r)[0]);
  }
  EXPECT_EQ(a.free(), 0u);
  auto full = a.Allocate(kIoAlignment);
  EXPECT_EQ(full.status().code(), absl::StatusCode::kResourceExhausted);
  // Free every other block: 32 separate ranges, then the rest: one range.
  for (int i = 0; i < 64; i += 2) ASSERT_TRUE(a.Free(got[i]).ok());
  EXPECT_EQ(a.free_ranges(), 32u);
  for (int i = 1; i < 64; i += 2) ASSERT_TRUE(a.Free(got[i]).ok());
  EXPECT_EQ(a.free_ranges(), 1u);
  EXPECT_EQ(a.free(), kSeg);
  // Double free is refused.
  EXPECT_EQ(a.Free(got[0]).code(), absl::StatusCode::kInvalidArgument);
}

TEST(ExtentAllocatorTest, ExtentsNeverCrossSegmentsAndSplitWhenNeeded) {
  ExtentAllocator a(kSeg);
  a.AddSegment();
  a.AddSegment();
  auto r = a.Allocate(kSeg + 8 * kIoAlignment);
  ASSERT_TRUE(r.ok());
  uint64_t total = 0;
  for (auto& x : *r) {
    EXPECT_EQ(x.offset / kSeg, (x.offset + x.length - 1) / kSeg);
    total += x.length;
  }
  EXPECT_EQ(total, kSeg + 8 * kIoAlignment);
  for (auto& x : *r) ASSERT_TRUE(a.Free(x).ok());
  EXPECT_EQ(a.free_ranges(), 2u);  // the two segments do not merge
}

TEST(ExtentAllocatorTest, MarkUsedRebuildsAndDetectsDoubleReference) {
  ExtentAllocator a(kSeg);
  a.AddSegment();
  ASSERT_TRUE(a.MarkUsed({4 * kIoAlignment, 8 * kIoAlignment}).ok());
  EXPECT_EQ(a.used(), 8 * kIoAlignment);
  EXPECT_EQ(a.MarkUsed({8 * kIoAlignment, kIoAlignment}).code(),
            absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(a.Free({4 * kIoAlignment, 8 * kIoAlignment}).ok());
  EXPECT_EQ(a.free_ranges(), 1u);
}

TEST(ExtentAllocatorTest, RandomOperationsMatchBitmapModel) {
  std::mt19937 rng(1234);
  ExtentAllocator a(kSeg);
  const int segs = 4;
  for (int i = 0; i < segs; ++i) a.AddSegment();
  const uint64_t blocks = segs * kSeg / kIoAlignment;
  std::vector<bool> used(blocks, false);
  std::vector<std::vector<Range>> live;
  for (int step = 0; step < 5000; ++step) {
    if (live.empty() || rng() % 2) {
      uint64_t n = 1 + rng() % 80;
      uint64_t free_blocks = 0;
      for (bool u : used) free_blocks += !u;
      auto r = a.Allocate(n * kIoAlignment);
      if (n > free_blocks) {
        ASSERT_EQ(r.status().code(), absl::StatusCode::kResourceExhausted);
        continue;
      }
      ASSERT_TRUE(r.ok()) << r.status();
      for (auto& x : *r) {
        ASSERT_EQ(x.offset / kSeg, (x.offset + x.length - 1) / kSeg);
        for (uint64_t b = x.offset / kIoAlignment;
             b < (x.offset + x.length) / kIoAlignment; ++b) {
          ASSERT_FALSE(used[b]) << "block " << b << " handed out twice";
          used[b] = true;
        }
      }
      live.push_back(*r);
    } else {
      size_t i = rng() % live.size();
      for (auto& x : live[i]) {
        ASSERT_TRUE(a.Free(x).ok());
        for (uint64_t b = x.offset / kIoAlignment;
             b < (x.offset + x.length) / kIoAlignment; ++b)
          used[b] = false;
      }
      live.erase(live.begin() + i);
    }
    uint64_t free_blocks = 0;
    for (bool u : used) free_blocks += !u;
    ASSERT_EQ(a.free(), free_blocks * kIoAlignment);
  }
}

}  // namespace
}  // namespace mlpo
