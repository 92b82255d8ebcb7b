// The optimizer's keys of a store config (optimizer/optimizer_config.h):
// docs/configuration.md shows exactly the code's table (the store's keys,
// then these), each of these keys' default and range is what the optimizer's
// parser gives, and a config file holding them parses through the store,
// which leaves them to this layer.
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "optimizer/optimizer_config.h"
#include "store/store_options.h"
#include "tests/config_key_checks.h"

namespace mlpo {
namespace {

constexpr char kBegin[] = "<!-- BEGIN store config keys";
constexpr char kEnd[] = "<!-- END store config keys -->";

std::string ReadDoc() {
  std::ifstream in(std::string(MLPO_SOURCE_DIR) + "/docs/configuration.md");
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(OptimizerConfigTest, TheDocShowsTheCodesTable) {
  RegisterOptimizerConfigKeys();  // (again: once is what it does)
  std::string doc = ReadDoc();
  ASSERT_FALSE(doc.empty()) << "docs/configuration.md is missing";
  size_t b = doc.find(kBegin), e = doc.find(kEnd);
  ASSERT_NE(b, std::string::npos) << "no '" << kBegin << "' marker";
  ASSERT_NE(e, std::string::npos) << "no '" << kEnd << "' marker";
  b = doc.find('\n', b) + 1;
  std::string table = doc.substr(b, e - b);
  std::string want = StoreConfigMarkdown();
  for (const ConfigKey& k : OptimizerConfigKeys())
    EXPECT_NE(want.find(absl::StrCat("| `", k.key, "` |")), std::string::npos)
        << k.key << " is not in the table";
  if (table != want) {
    const char* tmp = std::getenv("MLPO_TEST_TMPDIR");
    std::string f = std::string(tmp ? tmp : "/tmp") + "/configuration-table.md";
    std::ofstream(f) << want;
    ADD_FAILURE() << "docs/configuration.md's key table differs from "
                     "StoreConfigKeys() and OptimizerConfigKeys(); the "
                     "table the code has is in "
                  << f << ":\n"
                  << want;
  }
}

// A store config with `key = value` and one path, through the store's
// parser and then the optimizer's.
absl::StatusOr<OptimizerConfig> ParseWith(const std::string& key,
                                          const std::string& value) {
  std::string text = "[[path]]\nroot = \"p0\"\n";
  if (!key.empty()) text = absl::StrCat(key, " = ", value, "\n", text);
  auto o = ParseStoreOptions(text, "/tmp");
  if (!o.ok()) return o.status();
  return ParseOptimizerConfig(o->upper);
}

std::string Settings(const OptimizerConfig& c) {
  return absl::StrCat(c.state_format ? StateFormatName(*c.state_format)
                                     : "unset",
                      "|", c.write_behind, "|", c.read_ahead);
}

TEST(OptimizerConfigTest, EachDefaultIsWhatTheParserGivesWithoutTheKey) {
  auto base = ParseWith("", "");
  ASSERT_TRUE(base.ok()) << base.status();
  EXPECT_EQ(Settings(*base), "unset|1|-1");
  ExpectEachDefaultIsTheParsers(OptimizerConfigKeys(), ParseWith, Settings,
                                {{"state_format", "\"int8-moments\""}});
}

TEST(OptimizerConfigTest, EachRangeAndTypeIsWhatTheParserAccepts) {
  for (const ConfigKey& k : OptimizerConfigKeys()) {
    SCOPED_TRACE(k.key);
    if (!k.lo.empty()) {
      for (const std::string& v : {k.lo, k.hi})
        EXPECT_TRUE(ParseWith(k.key, v).ok()) << v;
      for (const std::string& v : {std::to_string(std::stoll(k.lo) - 1),
                                   std::to_string(std::stoll(k.hi) + 1)}) {
        auto o = ParseWith(k.key, v);
        ASSERT_FALSE(o.ok()) << k.key << " = " << v << " was accepted";
        EXPECT_NE(o.status().message().find(k.key), std::string::npos)
            << o.status();
      }
    }
    // A value of another type: refused naming the key.
    for (const char* v : {"2.5", "[1]", "\"sometimes\""}) {
      auto o = ParseWith(k.key, v);
      ASSERT_FALSE(o.ok()) << k.key << " = " << v << " was accepted";
      EXPECT_TRUE(absl::IsInvalidArgument(o.status())) << o.status();
      EXPECT_NE(o.status().message().find(k.key), std::string::npos)
          << o.status();
    }
  }
}

TEST(OptimizerConfigTest, ATypoIsUnknownAndNamesTheOptimizersKeysToo) {
  auto o = ParseWith("write_behnd", "false");
  ASSERT_FALSE(o.ok());
  std::string m(o.status().message());
  EXPECT_NE(m.find("'write_behnd'"), std::string::npos) << m;
  EXPECT_NE(m.find("write_behind"), std::string::npos) << m;
  EXPECT_NE(m.find("cache"), std::string::npos) << m;
}

}  // namespace
}  // namespace mlpo
