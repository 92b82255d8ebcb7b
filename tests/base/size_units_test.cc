#include "base/size_units.h"

#include "gtest/gtest.h"

namespace mlpo {
namespace {

TEST(SizeUnitsTest, BinaryAndDecimalUnits) {
  EXPECT_EQ(*ParseSize("4096"), 4096u);
  EXPECT_EQ(*ParseSize("256K"), 256u << 10);
  EXPECT_EQ(*ParseSize("1m"), 1u << 20);
  EXPECT_EQ(*ParseSize("2GiB"), uint64_t{2} << 30);
  EXPECT_EQ(*ParseSize("1.5G"), uint64_t{3} << 29);
  EXPECT_EQ(*ParseSize("600MB"), 600000000u);
  EXPECT_EQ(*ParseSize("1TB"), 1000000000000u);
  EXPECT_EQ(*ParseSize("0"), 0u);  // "uncapped" where an option allows it
  EXPECT_EQ(*ParseSize("1024T"), uint64_t{1} << 50);
}

TEST(SizeUnitsTest, BadTextIsInvalidArgumentNamingIt) {
  for (const char* bad : {"", "fast", "-1M", "12XB", "M", "inf", "nan", "1e30",
                          "0.0001", "2E"}) {
    auto r = ParseSize(bad);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(r.status().message().find(std::string("'") + bad + "'"),
              std::string::npos)
        << r.status();
  }
}

// Parameter counts as model names and papers write them: powers of 1000,
// "B" for billion (the count's B is not the size's byte).
TEST(SizeUnitsTest, CountsAcceptDecimalSuffixes) {
  EXPECT_EQ(*ParseCount("500000000"), 500000000u);
  EXPECT_EQ(*ParseCount("70e9"), 70000000000u);
  EXPECT_EQ(*ParseCount("500M"), 500000000u);
  EXPECT_EQ(*ParseCount("7B"), 7000000000u);
  EXPECT_EQ(*ParseCount("1.5b"), 1500000000u);
  EXPECT_EQ(*ParseCount("1.5G"), 1500000000u);
  EXPECT_EQ(*ParseCount("2K"), 2000u);
  EXPECT_EQ(*ParseCount("1T"), 1000000000000u);
  for (const char* bad : {"", "0", "-7B", "7X", "7GB", "1.5", "inf", "nan",
                          "1e20", "B", "seven"}) {
    auto r = ParseCount(bad);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(r.status().message().find(std::string("'") + bad + "'"),
              std::string::npos)
        << r.status();
  }
}

TEST(SizeUnitsTest, FormatBytesReadsBackThroughParseSize) {
  EXPECT_EQ(FormatBytes(512), "512.00 B");
  EXPECT_EQ(FormatBytes(1536), "1.50 KiB");
  EXPECT_EQ(FormatBytes(1.5 * (uint64_t{1} << 30)), "1.50 GiB");
  EXPECT_EQ(FormatBytes(3.0 * (uint64_t{1} << 50)), "3072.00 TiB");
  // What it prints parses back to the same size (units of 1024).
  for (uint64_t b : {uint64_t{1} << 20, uint64_t{3} << 29, uint64_t{5} << 40}) {
    std::string text = FormatBytes(static_cast<double>(b));
    text.erase(text.find(' '), 1);
    EXPECT_EQ(*ParseSize(text), b) << text;
  }
}

}  // namespace
}  // namespace mlpo
