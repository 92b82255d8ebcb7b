// Checks shared by the tests of a layer's config keys (store_config_test,
// optimizer_config_test): each row of a key table holds the default its
// parser gives.
#ifndef MLPO_TESTS_CONFIG_KEY_CHECKS_H_
#define MLPO_TESTS_CONFIG_KEY_CHECKS_H_

#include <map>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "store/store_options.h"

namespace mlpo {

// For every key of `keys`: a config with the key set to its default parses
// (parse(key, value); parse("", "") has no key) to the same settings
// (settings(parsed), a string) as one without it; a key whose default is
// not a TOML value ("(...)") is set to its `samples` value instead, which
// must change something.
template <typename Parse, typename Settings>
void ExpectEachDefaultIsTheParsers(
    const std::vector<ConfigKey>& keys, Parse parse, Settings settings,
    const std::map<std::string, std::string>& samples) {
  auto base = parse("", "");
  ASSERT_TRUE(base.ok()) << base.status();
  for (const ConfigKey& k : keys) {
    SCOPED_TRACE(k.key);
    if (k.default_value[0] == '(') {
      auto it = samples.find(k.key);
      ASSERT_NE(it, samples.end()) << "no sample value for " << k.key;
      auto o = parse(k.key, it->second);
      ASSERT_TRUE(o.ok()) << o.status();
      EXPECT_NE(settings(*o), settings(*base)) << "the key changed nothing";
      continue;
    }
    auto o = parse(k.key, k.default_value);
    ASSERT_TRUE(o.ok()) << o.status();
    EXPECT_EQ(settings(*o), settings(*base))
        << k.key << " = " << k.default_value << " is not the default";
  }
}

}  // namespace mlpo

#endif  // MLPO_TESTS_CONFIG_KEY_CHECKS_H_
