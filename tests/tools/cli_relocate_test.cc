// `mlpo relocate` and copies: a copied or moved store is refused until
// relocated, then is a store of its own that never touches the original
// (issue 17); a copied root holding several stores is relocated with --all.
#include <filesystem>
#include <string>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/tools/cli_test_util.h"

namespace mlpo {
namespace {



// Issue 17, reproduction 2: a tool run on a copy acted on the original
// (the copied descriptor names the original's absolute roots and index).
// Now the copy is refused until relocated, then is a store of its own.
TEST_F(CliTest, ACopyIsRefusedUntilRelocatedAndThenNeverTouchesTheOriginal) {
  {
    auto s = ObjectStore::Open(o_);
    ASSERT_TRUE(s.ok());
    auto lease = (*s)->Checkout("w0").get();
    ASSERT_TRUE(lease.ok());
    ASSERT_TRUE((*s)->Commit(*lease, 8).get().ok());
  }
  TempDir copies;
  std::string copy = copies.path() + "/backup";
  ASSERT_EQ(std::system(("cp -a " + dir_.path() + " " + copy).c_str()), 0);
  std::string copy_dir = copy + "/p1/t/rank-0";
  for (const char* cmd : {"restore", "drop-tag"}) {
    CliRun r = Mlpo(std::string(cmd) + " " + copy_dir + " first", true);
    EXPECT_EQ(r.code, 1) << r.out;
    EXPECT_NE(r.out.find("mlpo relocate"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("copy or a moved store"), std::string::npos) << r.out;
  }
  CliRun r = Mlpo("ls " + copy_dir, true);
  EXPECT_EQ(r.code, 1) << r.out;
  // The original: head still at step 8, tag still there.
  auto j = nlohmann::json::parse(Mlpo("ls " + store_dir_ + " --json").out);
  EXPECT_EQ(j["objects"][0]["head_step"], 8);
  EXPECT_EQ(Mlpo("tags " + store_dir_ + " --json").out.find("first") !=
                std::string::npos,
            true);
  // Opened through options naming the copy's roots: refused too, nothing
  // written.
  StoreOptions oc = o_;
  oc.paths[0].path.root = copy + "/p0";
  oc.paths[1].path.root = copy + "/p1";
  oc.meta_dir.clear();
  auto refused = ObjectStore::Open(oc);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("mlpo relocate"),
            std::string::npos)
      << refused.status();

  r = Mlpo("relocate " + copy_dir + " --json", true);
  ASSERT_EQ(r.code, 0) << r.out;
  j = nlohmann::json::parse(r.out.substr(r.out.find('{')));
  EXPECT_TRUE(j["copy"].get<bool>());
  EXPECT_NE(j["new_uuid"], j["old_uuid"]);
  r = Mlpo("restore " + copy_dir + " first", true);
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(Mlpo("drop-tag " + copy_dir + " first").code, 0);
  EXPECT_EQ(Mlpo("gc " + copy_dir).code, 0);
  // The copy moved; the original did not.
  j = nlohmann::json::parse(Mlpo("ls " + copy_dir + " --json").out);
  EXPECT_EQ(j["objects"][0]["head_step"], 7);
  j = nlohmann::json::parse(Mlpo("ls " + store_dir_ + " --json").out);
  EXPECT_EQ(j["objects"][0]["head_step"], 8);
  j = nlohmann::json::parse(Mlpo("tags " + store_dir_ + " --json").out);
  ASSERT_EQ(j["tags"].size(), 1u);
  EXPECT_EQ(j["tags"][0]["name"], "first");
  EXPECT_EQ(Mlpo("verify " + store_dir_ + " --tag first").code, 0);
  EXPECT_EQ(Mlpo("verify " + copy_dir).code, 0);
  // Both open through the API, each as itself.
  auto orig = ObjectStore::Open(o_);
  ASSERT_TRUE(orig.ok()) << orig.status();
  auto cs = ObjectStore::Open(oc);
  ASSERT_TRUE(cs.ok()) << cs.status();
  EXPECT_NE((*orig)->store_uuid(), (*cs)->store_uuid());
}

// The copy named by a path root, as a user names the adapter's store=:
// refused until relocated, naming the store's directory; relocated through
// the root, it finds both copied roots and becomes a store of its own.
TEST_F(CliTest, ACopiedRootIsRelocatedThroughTheRoot) {
  TempDir copies;
  const std::string copy = copies.path() + "/backup";
  ASSERT_EQ(std::system(("cp -a " + dir_.path() + " " + copy).c_str()), 0);
  CliRun r = Mlpo("ls " + copy + "/p1", true);
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("mlpo relocate " + copy + "/p1/t/rank-0"),
            std::string::npos)
      << r.out;
  r = Mlpo("relocate " + copy + "/p1 --json", true);
  ASSERT_EQ(r.code, 0) << r.out;
  auto j = nlohmann::json::parse(r.out.substr(r.out.find('{')));
  EXPECT_TRUE(j["copy"].get<bool>());
  EXPECT_EQ(j["new_roots"],
            nlohmann::json::array({copy + "/p0", copy + "/p1"}));
  r = Mlpo("ls " + copy + "/p0 --json");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(nlohmann::json::parse(r.out)["objects"][0]["head_step"], 7);
  EXPECT_EQ(Mlpo("verify " + copy + "/p1").code, 0);
}

// A copied root holding several stores (the adapter's namespaces): refused
// without --all, naming them and nothing changed; with --all each is
// relocated from its own directory, and runs again are named per store.
TEST_F(CliTest, ACopiedRootWithSeveralStoresIsRelocatedWithAll) {
  StoreOptions two = o_;
  two.name = "u";
  {
    auto s = ObjectStore::Open(two);
    ASSERT_TRUE(s.ok()) << s.status();
    ASSERT_TRUE((*s)->Declare("z", *ObjectLayout::Make(
                                       {{"p", DType::kF32, 10}})).ok());
    Lease l = *(*s)->Blank("z");
    std::fill_n(l->Section<float>("p"), 10, 1.0f);
    ASSERT_TRUE((*s)->Commit(l, 3).get().ok());
  }
  TempDir copies;
  const std::string copy = copies.path() + "/backup";
  ASSERT_EQ(std::system(("cp -a " + dir_.path() + " " + copy).c_str()), 0);
  CliRun r = Mlpo("relocate " + copy + "/p1", true);
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("holds 2 stores"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("--all"), std::string::npos) << r.out;
  EXPECT_EQ(Mlpo("ls " + copy + "/p1/u/rank-0").code, 1) << "relocated";
  EXPECT_EQ(Mlpo("relocate " + copy + "/p1 --all --root 0=/x", true).code,
            2);
  r = Mlpo("relocate " + copy + "/p1 --all --json");
  ASSERT_EQ(r.code, 0) << r.out;
  auto j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j["stores"].size(), 2u) << r.out;
  for (const auto& st : j["stores"]) {
    EXPECT_TRUE(st["copy"].get<bool>()) << st;
    EXPECT_EQ(st["new_roots"],
              nlohmann::json::array({copy + "/p0", copy + "/p1"}));
  }
  r = Mlpo("ls " + copy + "/p0/u/rank-0 --json");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(nlohmann::json::parse(r.out)["objects"][0]["head_step"], 3);
  EXPECT_EQ(Mlpo("verify " + copy + "/p1/t/rank-0").code, 0);
  // The originals are untouched and still open where they are.
  EXPECT_EQ(Mlpo("verify " + store_dir_).code, 0);
  // Again: each store says it is already where its records say.
  r = Mlpo("relocate " + copy + "/p1 --all --json");
  EXPECT_EQ(r.code, 1) << r.out;
  j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j["stores"].size(), 2u) << r.out;
  for (const auto& st : j["stores"])
    EXPECT_NE(st["error"].get<std::string>().find(
                  "nothing was moved or copied"),
              std::string::npos)
        << st;
}

// A moved store (the original is gone) keeps its identity when relocated;
// the error before names the old root as gone.
TEST_F(CliTest, AMovedStoreIsRelocatedWithItsIdentity) {
  std::string uuid;
  {
    auto s = ObjectStore::Open(o_);
    ASSERT_TRUE(s.ok());
    uuid = (*s)->store_uuid();
  }
  TempDir other;
  std::string moved = other.path() + "/moved";
  ASSERT_EQ(std::system(("mv " + dir_.path() + " " + moved).c_str()), 0);
  std::string dir = moved + "/p1/t/rank-0";
  CliRun r = Mlpo("tags " + dir, true);
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.out.find("mlpo relocate"), std::string::npos) << r.out;
  // A bad --root is a usage error, and changes nothing.
  EXPECT_EQ(Mlpo("relocate " + dir + " --root 7=/nowhere").code, 2);
  r = Mlpo("relocate " + dir + " --json", true);
  ASSERT_EQ(r.code, 0) << r.out;
  auto j = nlohmann::json::parse(r.out.substr(r.out.find('{')));
  EXPECT_FALSE(j["copy"].get<bool>());
  EXPECT_EQ(j["new_uuid"], uuid);
  j = nlohmann::json::parse(Mlpo("tags " + dir + " --json").out);
  EXPECT_EQ(j["tags"][0]["step"], 7);
  EXPECT_EQ(Mlpo("verify " + dir + " --tag first").code, 0);
  ASSERT_EQ(std::system(("mv " + moved + " " + dir_.path()).c_str()), 0);
}

// A store moved in part (path 0 and its index moved, path 1 left where it
// was) is a move: the path still in place is not "the original", so the
// store keeps its identity. Relocating a store that was not moved at all
// is refused and changes nothing.
TEST_F(CliTest, APartlyMovedStoreKeepsItsIdentityAndAnUnmovedOneIsRefused) {
  std::string uuid;
  {
    auto s = ObjectStore::Open(o_);
    ASSERT_TRUE(s.ok());
    uuid = (*s)->store_uuid();
  }
  CliRun r = Mlpo("relocate " + store_dir_, true);
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("nothing was moved or copied"), std::string::npos)
      << r.out;
  {
    auto s = ObjectStore::Open(o_);
    ASSERT_TRUE(s.ok()) << s.status();
    EXPECT_EQ((*s)->store_uuid(), uuid);
  }
  TempDir other;
  const std::string p0 = o_.paths[0].path.root, p1 = o_.paths[1].path.root;
  const std::string moved = other.path() + "/p0";
  ASSERT_EQ(std::system(("mv " + p0 + " " + moved).c_str()), 0);
  // Only the moved path and the index named: the other stays where it is
  // (not guessed to be DIR's root too).
  r = Mlpo("relocate " + moved + "/t/rank-0 --root 0=" + moved +
               " --meta-dir " + moved + "/t/rank-0/meta --json",
           true);
  ASSERT_EQ(r.code, 0) << r.out;
  auto j = nlohmann::json::parse(r.out.substr(r.out.find('{')));
  EXPECT_FALSE(j["copy"].get<bool>()) << r.out;
  EXPECT_EQ(j["new_uuid"], uuid);
  EXPECT_EQ(j["new_roots"], nlohmann::json::array({moved, p1}));
  EXPECT_EQ(Mlpo("verify " + p1 + "/t/rank-0 --tag first").code, 0);
}

// Paths copied to places of other names (the guess from DIR finds only
// its own): --root names the other, DIR stays the new place of its own
// path and the index moves with it. A --root that leaves DIR out is a
// usage error that changes nothing.
TEST_F(CliTest, ACopyWhosePathsMovedApartNeedsOnlyTheOtherRootNamed) {
  TempDir a, b;
  const std::string x0 = a.path() + "/x0", y1 = b.path() + "/y1";
  ASSERT_EQ(std::system(("cp -a " + o_.paths[0].path.root + " " + x0 +
                         " && cp -a " + o_.paths[1].path.root + " " + y1)
                            .c_str()),
            0);
  const std::string dir = x0 + "/t/rank-0";
  CliRun r = Mlpo("relocate " + dir, true);
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("--root I=PATH"), std::string::npos) << r.out;
  r = Mlpo("relocate " + dir + " --root 0=" + y1, true);
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("--root I=" + x0), std::string::npos) << r.out;
  EXPECT_EQ(Mlpo("ls " + dir).code, 1) << "relocated by a refused command";
  r = Mlpo("relocate " + dir + " --root 1=" + y1 + " --json", true);
  ASSERT_EQ(r.code, 0) << r.out;
  auto j = nlohmann::json::parse(r.out.substr(r.out.find('{')));
  EXPECT_TRUE(j["copy"].get<bool>()) << r.out;
  EXPECT_EQ(j["new_roots"], nlohmann::json::array({x0, y1}));
  EXPECT_EQ(j["new_meta_dir"], dir + "/meta");
  EXPECT_EQ(Mlpo("verify " + y1 + "/t/rank-0 --tag first").code, 0);
  // The copy names the original as what it was copied from.
  auto orig = nlohmann::json::parse(
      Mlpo("inspect " + store_dir_ + " --json").out);
  j = nlohmann::json::parse(Mlpo("inspect " + dir + " --json").out);
  EXPECT_EQ(j["copied_from"], nlohmann::json::array({orig["uuid"]}));
  EXPECT_NE(j["uuid"], orig["uuid"]);
  EXPECT_EQ(orig["copied_from"], nlohmann::json::array());
  EXPECT_EQ(Mlpo("verify " + store_dir_ + " --tag first").code, 0);
}

// A hard-linked copy (`cp -al`) shares the files written in place: a
// command that writes refuses either store and names `mlpo unshare`; a
// reading one works; `mlpo unshare` (on the original) or `mlpo relocate`
// (on the copy) ends the sharing, and the copy's writes never reach the
// original.
TEST_F(CliTest, AHardLinkedCopyIsUnsharedBeforeEitherStoreIsWritten) {
  TempDir copies;
  std::string copy = copies.path() + "/snap";
  ASSERT_EQ(std::system(("cp -al " + dir_.path() + " " + copy).c_str()), 0);
  std::string copy_dir = copy + "/p1/t/rank-0";
  CliRun r = Mlpo("restore " + store_dir_ + " first", true);
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("hard links"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("mlpo unshare"), std::string::npos) << r.out;
  EXPECT_EQ(Mlpo("verify " + store_dir_).code, 0);  // reading is fine
  // Pointed at the copy before it is relocated: refused, as every command.
  r = Mlpo("unshare " + copy_dir, true);
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("mlpo relocate"), std::string::npos) << r.out;
  r = Mlpo("unshare " + store_dir_ + " --json", true);
  ASSERT_EQ(r.code, 0) << r.out;
  auto j = nlohmann::json::parse(r.out.substr(r.out.find('{')));
  EXPECT_GE(j["files"].size(), 3u);
  EXPECT_GT(j["bytes"].get<uint64_t>(), 0u);
  r = Mlpo("unshare " + store_dir_, true);
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("nothing to do"), std::string::npos) << r.out;
  EXPECT_EQ(Mlpo("restore " + store_dir_ + " first").code, 0);
  // The copy shares nothing now (the original took new files): relocate
  // copies nothing, and what it does stays in the copy.
  r = Mlpo("relocate " + copy_dir + " --json", true);
  ASSERT_EQ(r.code, 0) << r.out;
  j = nlohmann::json::parse(r.out.substr(r.out.find('{')));
  EXPECT_TRUE(j["unshared_files"].empty()) << r.out;
  EXPECT_EQ(Mlpo("drop-tag " + copy_dir + " first").code, 0);
  j = nlohmann::json::parse(Mlpo("tags " + store_dir_ + " --json").out);
  ASSERT_EQ(j["tags"].size(), 1u);
  EXPECT_EQ(Mlpo("verify " + store_dir_ + " --tag first").code, 0);
  EXPECT_EQ(Mlpo("verify " + copy_dir).code, 0);
}

}  // namespace
}  // namespace mlpo
