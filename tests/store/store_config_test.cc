// The store's TOML keys: every row of the code's table (StoreConfigKeys)
// has the default and range the parser gives, so the table cannot drift
// from the code (tests/optimizer/optimizer_config_test.cc checks that
// docs/configuration.md shows it, with the optimizer's keys); the keys of
// the layers above are kept for them unparsed; a config file's keys and
// values, and the shipped default config.
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/size_units.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "store/store_options.h"
#include "tests/config_key_checks.h"
#include "tests/test_util.h"

namespace mlpo {
namespace {

// Everything a TOML key can set, for comparing two parses.
std::string Settings(const StoreOptions& o) {
  std::string s = absl::StrCat(
      o.name, "|", o.rank, "|", static_cast<int>(o.durability), "|",
      o.meta_dir, "|", o.extent_bytes, "|", o.buffer_pool_bytes, "|",
      o.cache_bytes, "|", o.cache_percent, "|", o.adaptive);
  for (const StorePathConfig& p : o.paths)
    absl::StrAppend(&s, "|", p.path.root, ",", static_cast<int>(p.path.kind),
                    ",", p.fraction, ",", p.path.read_cap, ",",
                    p.path.write_cap, ",", p.path.slots, ",",
                    absl::ToInt64Milliseconds(p.path.slot_turn), ",",
                    p.path.capacity, ",", p.path.segment_bytes, ",",
                    p.path.queue_depth, ",", static_cast<int>(p.path.engine));
  return s;
}

// A config with one path and `key = value` (a [[path]] key goes into the
// path's table), plus `extra` top-level lines.
absl::StatusOr<StoreOptions> ParseWith(const std::string& key,
                                       const std::string& value,
                                       const std::string& extra = "") {
  std::string top = extra;
  std::string path = key == "path.root" ? "" : "root = \"p0\"\n";
  if (!key.empty()) {
    if (absl::StartsWith(key, "path."))
      absl::StrAppend(&path, key.substr(5), " = ", value, "\n");
    else
      absl::StrAppend(&top, key, " = ", value, "\n");
  }
  return ParseStoreOptions(absl::StrCat(top, "[[path]]\n", path), "/tmp");
}

// Keys whose default is not a TOML value: a value to show the parser knows
// them.
const std::map<std::string, std::string>& Samples() {
  static const auto* m = new std::map<std::string, std::string>{
      {"meta_dir", "\"m\""},
      {"adaptive", "true"},
      {"path.root", "\"p1\""},
  };
  return *m;
}

TEST(StoreConfigTest, EachDefaultIsWhatTheParserGivesWithoutTheKey) {
  ExpectEachDefaultIsTheParsers(
      StoreConfigKeys(),
      [](const std::string& key, const std::string& value) {
        return ParseWith(key, value);
      },
      Settings, Samples());
}

// One past a range's end, as a TOML value.
std::string Beyond(const ConfigKey& k, bool above) {
  const std::string& v = above ? k.hi : k.lo;
  if (k.takes == "number") return above ? "1e19" : "-0.5";
  if (k.takes == "integer") return std::to_string(std::stoll(v) + (above ? 1 : -1));
  // A size: its byte count as an integer.
  std::string text = v.front() == '"' ? v.substr(1, v.size() - 2) : v;
  auto bytes = ParseSize(text);
  EXPECT_TRUE(bytes.ok()) << k.key << ": " << bytes.status();
  if (!above && *bytes == 0) return "-1";
  return std::to_string(*bytes + (above ? 1 : -1));
}

TEST(StoreConfigTest, EachRangeIsWhatTheParserAccepts) {
  int ranged = 0;
  for (const ConfigKey& k : StoreConfigKeys()) {
    if (k.lo.empty()) continue;
    ++ranged;
    SCOPED_TRACE(k.key);
    // segment_bytes must also hold one extent: its low end with the
    // smallest extents.
    std::string extra =
        k.key == "path.segment_bytes" ? "extent_bytes = \"64K\"\n" : "";
    for (const std::string& v : {k.lo, k.hi}) {
      auto o = ParseWith(k.key, v, extra);
      EXPECT_TRUE(o.ok()) << k.key << " = " << v << ": " << o.status();
    }
    std::string field = k.key.substr(k.key.rfind('.') + 1);
    for (bool above : {false, true}) {
      std::string v = Beyond(k, above);
      auto o = ParseWith(k.key, v, extra);
      ASSERT_FALSE(o.ok()) << k.key << " = " << v << " was accepted";
      EXPECT_NE(o.status().message().find(field), std::string::npos)
          << o.status();
    }
  }
  EXPECT_GE(ranged, 10);
}

TEST(StoreConfigTest, AnUnknownKeyNamesItAndTheKeysThereAre) {
  auto o = ParseWith("cahce", "\"4G\"");
  ASSERT_FALSE(o.ok());
  std::string m(o.status().message());
  EXPECT_NE(m.find("'cahce'"), std::string::npos) << m;
  EXPECT_NE(m.find("cache"), std::string::npos) << m;
  EXPECT_NE(m.find("docs/configuration.md"), std::string::npos) << m;
  o = ParseWith("path.rd_cap", "1");
  ASSERT_FALSE(o.ok());
  m = std::string(o.status().message());
  EXPECT_NE(m.find("path[0].rd_cap"), std::string::npos) << m;
  EXPECT_NE(m.find("read_cap"), std::string::npos) << m;
  EXPECT_EQ(m.find("durability"), std::string::npos) << "top-level keys: " << m;
}

// A key a layer above registered is kept for it as the parser read it,
// not checked; one no layer registered is unknown.
TEST(StoreConfigTest, ALayerAbovesKeysAreKeptUnparsed) {
  auto before = ParseWith("upper_layer_key", "3");
  ASSERT_FALSE(before.ok());
  EXPECT_NE(before.status().message().find("upper_layer_key"),
            std::string::npos) << before.status();
  RegisterUpperConfigKeys({{"upper_layer_key", "integer", "0", "", "",
                            "a key of a layer above (this test's)"}});
  RegisterUpperConfigKeys({{"rank", "integer", "0", "", "", "not again"}});
  int ours = 0;
  for (const ConfigKey& k : UpperConfigKeys()) {
    EXPECT_NE(k.key, "rank") << "a store key was taken as a layer's";
    ours += k.key == "upper_layer_key";
  }
  EXPECT_EQ(ours, 1);
  for (const auto& [value, kind] :
       std::vector<std::pair<std::string, ConfigValue::Kind>>{
           {"3", ConfigValue::Kind::kInteger},
           {"true", ConfigValue::Kind::kBool},
           {"\"x\"", ConfigValue::Kind::kString},
           {"2.5", ConfigValue::Kind::kOther}}) {
    auto o = ParseWith("upper_layer_key", value);
    ASSERT_TRUE(o.ok()) << value << ": " << o.status();
    ASSERT_EQ(o->upper.count("upper_layer_key"), 1u);
    const ConfigValue& v = o->upper.at("upper_layer_key");
    EXPECT_EQ(v.kind, kind) << value;
    if (kind == ConfigValue::Kind::kInteger) {
      EXPECT_EQ(v.integer, 3);
    } else if (kind == ConfigValue::Kind::kBool) {
      EXPECT_TRUE(v.boolean);
    } else if (kind == ConfigValue::Kind::kString) {
      EXPECT_EQ(v.string, "x");
    }
  }
  // Listed with the keys there are when another key is unknown.
  auto typo = ParseWith("upper_layer_kye", "3");
  ASSERT_FALSE(typo.ok());
  EXPECT_NE(typo.status().message().find("upper_layer_key"),
            std::string::npos) << typo.status();
}

TEST(StoreOptionsTest, TomlLoadsAndRejectsUnknownKeysAndBadValues) {
  TempDir dir;
  std::string cfg = dir.path() + "/store.toml";
  std::ofstream(cfg) << "name = \"run\"\nrank = 2\ndurability = \"tag\"\n"
                        "extent_bytes = \"2M\"\n"
                        "[[path]]\nroot = \"nv\"\nkind = \"nvme\"\n"
                        "fraction = 0.7\n"
                        "[[path]]\nroot = \"/abs/pfs\"\nkind = \"pfs\"\n"
                        "fraction = 0.3\nread_cap = \"600MB\"\nslots = 2\n";
  auto o = LoadStoreOptions(cfg);
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->name, "run");
  EXPECT_EQ(o->rank, 2);
  EXPECT_EQ(o->durability, Durability::kTag);
  EXPECT_EQ(o->extent_bytes, 2u << 20);
  ASSERT_EQ(o->paths.size(), 2u);
  EXPECT_EQ(o->paths[0].path.root, dir.path() + "/nv");  // relative to file
  EXPECT_EQ(o->paths[1].path.kind, PathKind::kPfs);
  EXPECT_EQ(o->paths[1].path.read_cap, 600000000u);
  EXPECT_EQ(o->paths[1].path.slots, 2);
  auto bad = [&](const std::string& text, const std::string& want) {
    auto r = ParseStoreOptions(text, dir.path());
    EXPECT_FALSE(r.ok()) << text;
    EXPECT_NE(r.status().message().find(want), std::string::npos)
        << r.status() << " for: " << text;
  };
  bad("nmae = \"x\"\n[[path]]\nroot=\"a\"\n", "nmae");
  bad("[[path]]\nroot=\"a\"\nspeed = 3\n", "path[0].speed");
  bad("[[path]]\nroot=\"a\"\nkind = \"ssd\"\n", "path[0].kind");
  bad("[[path]]\nroot=\"a\"\nread_cap = \"fast\"\n", "path[0].read_cap");
  bad("durability = \"never\"\n[[path]]\nroot=\"a\"\n", "durability");
  bad("name = \"x\"\n", "no paths");
  bad("name = \"../x\"\n[[path]]\nroot=\"a\"\n", "bad store name");
  bad("name = \n", "line 1");
  EXPECT_EQ(LoadStoreOptions(dir.path() + "/missing.toml").status().code(),
            absl::StatusCode::kNotFound);
}

// The STORE descriptor is read back from disk, so any byte of it may be
// wrong: each number that is not an integer the field can hold (a float far
// out of range, a negative size, a string) is a DataLoss naming the field,
// never a silent wrap or an out-of-range cast (found by fuzz_store_options:
// "extent_bytes": 1.05e34 was undefined behaviour in the JSON library's cast).
TEST(StoreOptionsTest, ADescriptorsNumbersAreCheckedFieldByField) {
  StoreOptions o;
  o.name = "run";
  o.rank = 3;
  o.meta_dir = "/m";
  o.extent_bytes = 2u << 20;
  StorePathConfig pc;
  pc.path.root = "/a";
  pc.fraction = 1;
  pc.path.read_cap = 5000;
  pc.path.slots = 2;
  pc.path.queue_depth = 16;
  o.paths.push_back(pc);
  auto good = nlohmann::json::parse(StoreDescriptorJson(o, "uuid-1"));
  auto back = StoreOptionsFromDescriptor(good.dump());
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->rank, 3);
  EXPECT_EQ(back->extent_bytes, 2u << 20);
  EXPECT_EQ(back->paths[0].path.read_cap, 5000u);
  EXPECT_EQ(back->paths[0].path.slots, 2);
  EXPECT_EQ(back->paths[0].path.queue_depth, 16);
  EXPECT_EQ(back->store_uuid, "uuid-1");

  const std::vector<std::string> top = {"rank", "extent_bytes"};
  const std::vector<std::string> path = {"read_cap", "write_cap", "slots",
                                         "capacity", "segment_bytes",
                                         "queue_depth"};
  const std::vector<nlohmann::json> wrong = {1.0485700e34, -1, 2.5, "4M",
                                             nullptr, true};
  for (const auto& value : wrong) {
    for (const std::string& key : top) {
      auto j = good;
      j[key] = value;
      auto r = StoreOptionsFromDescriptor(j.dump());
      ASSERT_FALSE(r.ok()) << key << " = " << value.dump();
      EXPECT_EQ(r.status().code(), absl::StatusCode::kDataLoss);
      EXPECT_TRUE(absl::StrContains(r.status().message(), key))
          << r.status();
    }
    for (const std::string& key : path) {
      if (key == "slots" && value == -1) continue;  // -1: slots by kind
      auto j = good;
      j["paths"][0][key] = value;
      auto r = StoreOptionsFromDescriptor(j.dump());
      ASSERT_FALSE(r.ok()) << key << " = " << value.dump();
      EXPECT_EQ(r.status().code(), absl::StatusCode::kDataLoss);
      EXPECT_TRUE(absl::StrContains(r.status().message(), key))
          << r.status();
    }
  }
  auto j = good;
  j["paths"][0]["fraction"] = "half";
  auto r = StoreOptionsFromDescriptor(j.dump());
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(absl::StrContains(r.status().message(), "fraction"))
      << r.status();
}

TEST(StoreOptionsTest, TheShippedDefaultConfigLoads) {
  auto o = LoadStoreOptions(std::string(MLPO_SOURCE_DIR) +
                            "/config/default-store.toml");
  ASSERT_TRUE(o.ok()) << o.status();
  ASSERT_EQ(o->paths.size(), 2u);
  EXPECT_EQ(o->paths[1].path.kind, PathKind::kPfs);
  EXPECT_EQ(o->extent_bytes, 4u << 20);
}

}  // namespace
}  // namespace mlpo
