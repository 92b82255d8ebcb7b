// CheckpointReader over a manifest that is not what the adapter writes: the
// manifest is read back from a store, so each number it uses is checked and
// a wrong one is a DataLoss naming the field, never an unchecked cast.
#include <string>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "optimizer/checkpoint_reader.h"
#include "tests/store/store_test_util.h"

namespace mlpo {
namespace {

absl::Status OpenWithManifest(const nlohmann::json& manifest) {
  TempDir dir;
  StoreOptions o = TestStoreOptions(dir, {1.0});
  {
    auto s = ObjectStore::Open(o);
    if (!s.ok()) return s.status();
    absl::Status set = (*s)->SetAttribute(kManifestAttribute, manifest.dump());
    if (!set.ok()) return set;
  }
  return CheckpointReader::Open(o, "").status();
}

TEST(CheckpointReaderTest, AManifestsBadNumberIsDataLossNamingIt) {
  // One group of no elements on this rank and one parameter: it opens.
  nlohmann::json good = {
      {"format", 1}, {"world", 1}, {"rank", 0}, {"subgroup_numel", 1024},
      {"groups", {{{"flat_numel", 0}, {"shard_start", 0},
                   {"shard_numel", 0}}}},
      {"params", {{{"name", "w"}, {"shape", {0}}, {"group", 0},
                   {"offset", 0}, {"numel", 0}}}}};
  ASSERT_TRUE(OpenWithManifest(good).ok()) << OpenWithManifest(good);

  struct Case {
    nlohmann::json::json_pointer where;
    nlohmann::json value;
    std::string names;
  };
  const Case cases[] = {
      {"/world"_json_pointer, 1e30, "world"},
      {"/world"_json_pointer, "one", "world"},
      {"/subgroup_numel"_json_pointer, 1.5e34, "subgroup_numel"},
      {"/groups/0/flat_numel"_json_pointer, -1, "flat_numel"},
      {"/groups/0/shard_start"_json_pointer, 2.5, "shard_start"},
      {"/groups/0/shard_numel"_json_pointer, 1e300, "shard_numel"},
      {"/params/0/group"_json_pointer, 1e19, "group"},
      {"/params/0/offset"_json_pointer, -7, "offset"},
      {"/params/0/numel"_json_pointer, 3.25, "numel"},
      {"/params/0/shape/0"_json_pointer, 1e25, "shape"},
  };
  for (const Case& c : cases) {
    nlohmann::json m = good;
    m[c.where] = c.value;
    absl::Status s = OpenWithManifest(m);
    EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss)
        << c.where.to_string() << " = " << c.value.dump() << ": " << s;
    EXPECT_TRUE(absl::StrContains(s.message(), c.names))
        << c.where.to_string() << ": " << s;
  }
}

}  // namespace
}  // namespace mlpo
