#include "base/parallel_copy.h"

#include <cstdint>
#include <vector>

#include "gtest/gtest.h"

namespace mlpo {
namespace {

TEST(ParallelCopyTest, CopiesEveryByteOfOddSizes) {
  // Below one piece, a few pieces with a ragged end, and many pieces.
  for (size_t n : {size_t{0}, size_t{1}, size_t{4096}, (size_t{4} << 20) + 3,
                   (size_t{9} << 20) + 4097, (size_t{37} << 20) + 5}) {
    std::vector<uint8_t> src(n), dst(n + 1, 0xAB);
    for (size_t i = 0; i < n; ++i) src[i] = static_cast<uint8_t>(i * 131 + 7);
    ParallelCopy(dst.data(), src.data(), n);
    EXPECT_TRUE(std::equal(src.begin(), src.end(), dst.begin())) << n;
    EXPECT_EQ(dst[n], 0xAB) << "wrote past the end at n = " << n;
  }
}

}  // namespace
}  // namespace mlpo
