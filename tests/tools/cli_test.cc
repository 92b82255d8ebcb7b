// Runs the real `mlpo` binary against stores made through the API: exit
// codes, JSON output, section statistics, corruption reports, bad targets.
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "store/admin/gc.h"
#include "store/store_files.h"
#include "store/store_target.h"
#include "tests/tools/cli_test_util.h"

namespace mlpo {
namespace {

// Tags list in the order their state was written, not by name: "step-10"
// after "step-9", and a tag of a rollback's state after the ones it rolled
// back from.
TEST_F(CliTest, TagsListInTheOrderTheirStateWasWritten) {
  {
    auto s = ObjectStore::Open(o_);
    ASSERT_TRUE(s.ok()) << s.status();
    for (uint64_t step : {9, 10}) {
      auto l = (*s)->Checkout("w0").get();
      ASSERT_TRUE(l.ok()) << l.status();
      ASSERT_TRUE((*s)->Commit(*l, step).get().ok());
      ASSERT_TRUE((*s)->Tag("step-" + std::to_string(step)).ok());
    }
    ASSERT_TRUE((*s)->Restore("step-9").ok());
    auto l = (*s)->Checkout("w0").get();
    ASSERT_TRUE(l.ok()) << l.status();
    ASSERT_TRUE((*s)->Commit(*l, 10).get().ok());
    ASSERT_TRUE((*s)->Tag("step-10.1").ok());
  }
  const std::vector<std::string> want = {"first", "step-9", "step-10",
                                         "step-10.1"};
  for (const char* cmd : {"tags", "inspect"}) {
    CliRun r = Mlpo(std::string(cmd) + " " + store_dir_ + " --json");
    ASSERT_EQ(r.code, 0) << r.out;
    const auto j = nlohmann::json::parse(r.out);
    std::vector<std::string> got;
    for (auto& t : j["tags"]) got.push_back(t["name"].get<std::string>());
    EXPECT_EQ(got, want) << cmd;
  }
  CliRun r = Mlpo("tags " + store_dir_);
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_LT(r.out.find("step-9 "), r.out.find("step-10 ")) << r.out;
}

// Where the adapter's keep_checkpoints keeps its automatic tags, a tag of
// that form made by hand would be dropped as one of them: refused, nothing
// written; other names, and that form in a store without retention, are not.
TEST_F(CliTest, TagRefusesTheAutomaticFormWhereRetentionDropsIt) {
  CliRun r = Mlpo("tag " + store_dir_ + " step-8");
  ASSERT_EQ(r.code, 0) << r.out;  // no retention here yet
  {
    auto s = ObjectStore::Open(o_);
    ASSERT_TRUE(s.ok()) << s.status();
    ASSERT_TRUE(
        (*s)->SetAttribute(kCheckpointOrderAttribute, "[\"step-8\"]").ok());
  }
  for (const char* name : {"step-9", "step-9.1"}) {
    r = Mlpo("tag " + store_dir_ + " " + name, true);
    EXPECT_NE(r.code, 0) << r.out;
    EXPECT_NE(r.out.find("keep_checkpoints drops the oldest"),
              std::string::npos) << r.out;
    EXPECT_NE(r.out.find(name), std::string::npos) << r.out;
  }
  for (const char* name : {"step-9x", "step-", "step-9.", "best-9"}) {
    r = Mlpo("tag " + store_dir_ + " " + name);
    EXPECT_EQ(r.code, 0) << name << ": " << r.out;
  }
  r = Mlpo("tags " + store_dir_ + " --json");
  ASSERT_EQ(r.code, 0) << r.out;
  const auto j = nlohmann::json::parse(r.out);
  std::vector<std::string> got;
  for (auto& t : j["tags"]) got.push_back(t["name"].get<std::string>());
  std::sort(got.begin(), got.end());
  EXPECT_EQ(got, (std::vector<std::string>{"best-9", "first", "step-",
                                           "step-8", "step-9.", "step-9x"}));
}

// A store of several ranks (data parallel: <path>/<store>/rank-<r>) keeps
// its shards one state: tag, restore and drop-tag on its directory act on
// every rank, each rank checked before any changes; one rank's directory is
// refused. (`mlpo restore <store>/rank-0 TAG`, as the "holds 2 stores; pass
// the one meant" message invited, left the ranks at different steps, which
// the adapter resumed as one state.)
TEST_F(CliTest, TagRestoreAndDropTagActOnEveryRankOfAStore) {
  StoreOptions o1 = o_;
  o1.rank = 1;
  auto commit = [](const StoreOptions& o, uint64_t step) {
    auto s = ObjectStore::Open(o);
    ASSERT_TRUE(s.ok()) << s.status();
    if ((*s)->Tags().empty()) {  // rank 1, new: as rank 0 was made
      ObjectLayout l = *ObjectLayout::Make({{"p", DType::kF32, 1000},
                                            {"m", DType::kBF16, 3000}});
      ASSERT_TRUE((*s)->Declare("w0", l).ok());
    }
    auto lease = (*s)->Checkout("w0").get();
    ASSERT_TRUE(lease.ok()) << lease.status();
    ASSERT_TRUE((*s)->Commit(*lease, step).get().ok());
  };
  commit(o1, 7);
  {
    auto s = ObjectStore::Open(o1);
    ASSERT_TRUE(s.ok()) << s.status();
    ASSERT_TRUE((*s)->Tag("first").ok());
  }
  commit(o_, 8);
  commit(o1, 8);
  auto head_step = [](const std::string& rank_dir) -> int {
    CliRun r = Mlpo("ls " + rank_dir + " --json");
    if (r.code != 0) return -1;
    return nlohmann::json::parse(r.out)["objects"][0]["head_step"].get<int>();
  };
  const std::string dir = o_.paths[1].path.root + "/t";
  const std::string rank1 = dir + "/rank-1";
  ASSERT_EQ(head_step(store_dir_), 8);
  ASSERT_EQ(head_step(rank1), 8);

  for (const std::string& cmd :
       {"restore " + store_dir_, "drop-tag " + store_dir_,
        "restore " + store_dir_ + "/", "restore " + rank1 + "/."}) {
    CliRun r = Mlpo(cmd + " first", true);
    EXPECT_NE(r.code, 0) << r.out;
    EXPECT_NE(r.out.find("one of the 2 ranks of store " + dir),
              std::string::npos) << cmd << ": " << r.out;
  }
  EXPECT_EQ(head_step(store_dir_), 8);
  // Read-only commands take one rank, and say so.
  CliRun r = Mlpo("verify " + dir, true);
  EXPECT_NE(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("holds the 2 ranks of store " + dir), std::string::npos)
      << r.out;
  r = Mlpo("tag " + dir + " second --json");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(nlohmann::json::parse(r.out)["ranks"], 2);
  r = Mlpo("restore " + o_.paths[0].path.root + " first");  // a path root
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("done (2 ranks)"), std::string::npos) << r.out;
  EXPECT_EQ(head_step(store_dir_), 7);
  EXPECT_EQ(head_step(rank1), 7);

  // A tag only rank 0 holds: refused before rank 0 moves.
  {
    auto s = ObjectStore::Open(o_);
    ASSERT_TRUE(s.ok()) << s.status();
    ASSERT_TRUE((*s)->Tag("only0").ok());
  }
  commit(o_, 9);
  r = Mlpo("restore " + dir + " only0", true);
  EXPECT_NE(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("rank 1"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("has no tag 'only0'; nothing was changed"),
            std::string::npos) << r.out;
  EXPECT_EQ(head_step(store_dir_), 9);
  r = Mlpo("tag " + dir + " only0", true);  // new on one rank only: refused
  EXPECT_NE(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("already has tag 'only0'"), std::string::npos)
      << r.out;
  r = Mlpo("drop-tag " + dir + " second");
  ASSERT_EQ(r.code, 0) << r.out;
  for (const std::string& d : {store_dir_, rank1}) {
    r = Mlpo("tags " + d + " --json");
    ASSERT_EQ(r.code, 0) << r.out;
    const auto j = nlohmann::json::parse(r.out);
    for (auto& t : j["tags"]) EXPECT_NE(t["name"], "second") << d;
  }
}

TEST_F(CliTest, InspectLsShowAndTagsReportTheStore) {
  CliRun r = Mlpo("inspect " + store_dir_ + " --json");
  ASSERT_EQ(r.code, 0) << r.out;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["objects"], 1);
  EXPECT_EQ(j["paths"].size(), 2u);
  EXPECT_EQ(j["tags"][0]["name"], "first");
  r = Mlpo("ls " + store_dir_ + " --json");
  ASSERT_EQ(r.code, 0);
  j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["objects"][0]["name"], "w0");
  EXPECT_EQ(j["objects"][0]["head_step"], 7);
  EXPECT_EQ(j["objects"][0]["head"], 1);  // the store's first commit
  r = Mlpo("show " + store_dir_ + " w0 --json");
  ASSERT_EQ(r.code, 0) << r.out;
  j = nlohmann::json::parse(r.out);
  auto& p = j["sections"][0];
  EXPECT_EQ(p["nan"], 1);
  EXPECT_EQ(p["inf"], 1);
  EXPECT_EQ(p["min"], 0.0);
  EXPECT_EQ(p["max"], 999.0);
  double sum = 499500.0 - 7 - 8, sq = 0;
  for (int i = 0; i < 1000; ++i)
    if (i != 7 && i != 8) sq += double(i) * i;
  EXPECT_NEAR(p["mean"].get<double>(), sum / 998, 1e-9);
  EXPECT_NEAR(p["l2"].get<double>(), std::sqrt(sq), 1e-6);
  auto& m = j["sections"][1];
  EXPECT_EQ(m["dtype"], "bf16");
  EXPECT_EQ(m["mean"], -2.0);
  EXPECT_FALSE(j["extents"].empty());
  r = Mlpo("tags " + store_dir_ + " --json");
  j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["tags"][0]["objects"]["w0"], 1);  // the version
  EXPECT_EQ(j["tags"][0]["step"], 7);
  // Step 0 is a step (the initial state a tag before the first step
  // stores): `show --step 0` finds it, and a step nothing holds is named.
  {
    auto s = ObjectStore::Open(o_);
    ASSERT_TRUE(s.ok()) << s.status();
    ASSERT_TRUE((*s)->Declare("w0", *ObjectLayout::Make(
                                        {{"p", DType::kF32, 1000},
                                         {"m", DType::kBF16, 3000}})).ok());
    ASSERT_TRUE((*s)->Declare("z", *ObjectLayout::Make(
                                       {{"p", DType::kF32, 10}})).ok());
    Lease l = *(*s)->Blank("z");
    std::fill_n(l->Section<float>("p"), 10, 0.5f);
    ASSERT_TRUE((*s)->Commit(l, 0).get().ok());
  }
  r = Mlpo("show " + store_dir_ + " z --step 0 --json");
  ASSERT_EQ(r.code, 0) << r.out;
  j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["step"], 0);
  EXPECT_EQ(j["sections"][0]["mean"], 0.5);
  r = Mlpo("show " + store_dir_ + " z --step 3", true);
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.out.find("no kept version at step 3"), std::string::npos)
      << r.out;
}

TEST_F(CliTest, VerifyExitsNonZeroAndNamesTheCorruptExtent) {
  EXPECT_EQ(Mlpo("verify " + store_dir_).code, 0);
  // Flip a byte in the first extent.
  auto s = ObjectStore::Open(StoreOptionsForTarget(store_dir_).value());
  ASSERT_TRUE(s.ok());
  ExtentRef e = (*s)->GetVersion("w0", 0)->extents[0];
  std::string file = (*s)->path(e.path)->SegmentFile(e.offset);
  uint64_t off = (*s)->path(e.path)->SegmentOffset(e.offset);
  s->reset();
  int fd = ::open(file.c_str(), O_RDWR);
  char c;
  ASSERT_EQ(pread(fd, &c, 1, off + 5), 1);
  c = ~c;
  ASSERT_EQ(pwrite(fd, &c, 1, off + 5), 1);
  ::close(fd);
  CliRun r = Mlpo("verify " + store_dir_ + " --json");
  EXPECT_EQ(r.code, 1);
  auto j = nlohmann::json::parse(r.out);
  EXPECT_FALSE(j["ok"].get<bool>());
  ASSERT_EQ(j["bad"].size(), 1u);
  EXPECT_EQ(j["bad"][0]["object"], "w0");
  EXPECT_EQ(j["bad"][0]["file"], file);
  EXPECT_EQ(j["bad"][0]["offset"], off);
  EXPECT_EQ(Mlpo("verify " + store_dir_ + " --tag first").code, 1);
}

TEST_F(CliTest, ReadingCommandsWorkWhileAWriterHoldsTheStore) {
  auto writer = ObjectStore::Open(o_);
  ASSERT_TRUE(writer.ok()) << writer.status();
  CliRun r = Mlpo("ls " + store_dir_ + " --json");
  ASSERT_EQ(r.code, 0);
  EXPECT_EQ(nlohmann::json::parse(r.out)["objects"][0]["head_step"], 7);
  EXPECT_EQ(Mlpo("verify " + store_dir_).code, 0);
  EXPECT_EQ(Mlpo("show " + store_dir_ + " w0").code, 0);
  // Mutating commands need the lock and say who holds it.
  EXPECT_EQ(Mlpo("tag " + store_dir_ + " busy").code, 1);
  EXPECT_EQ(WriterLock::HolderPid(o_.meta_dir.empty() ? DefaultMetaDir(o_)
                                                        : o_.meta_dir),
            getpid());
}

TEST_F(CliTest, BadTargetsAndNamesFailWithStatusOne) {
  EXPECT_EQ(Mlpo("inspect " + dir_.path() + "/nothing").code, 1);
  EXPECT_EQ(Mlpo("inspect " + dir_.path()).code, 1);  // not a store dir
  EXPECT_EQ(Mlpo("show " + store_dir_ + " nosuch").code, 1);
  EXPECT_EQ(Mlpo("restore " + store_dir_ + " nosuch").code, 1);
  EXPECT_EQ(Mlpo("tag " + store_dir_ + " ../evil").code, 1);
  EXPECT_NE(Mlpo("frobnicate").code, 0);
  EXPECT_EQ(Mlpo("--help").code, 0);
  // tag, drop-tag and gc through the CLI.
  EXPECT_EQ(Mlpo("tag " + store_dir_ + " second").code, 0);
  EXPECT_EQ(Mlpo("drop-tag " + store_dir_ + " first").code, 0);
  CliRun r = Mlpo("gc " + store_dir_ + " --json");
  ASSERT_EQ(r.code, 0);
  EXPECT_EQ(nlohmann::json::parse(r.out)["freed_bytes"], 0);  // still tagged
}

// A user passes the CLI the directory they gave the adapter's store=: a
// path root holding one store names that store (on either path); a root
// holding two is an error naming both, and nothing is opened.
TEST_F(CliTest, APathRootHoldingOneStoreNamesIt) {
  for (const auto& pc : o_.paths) {
    CliRun r = Mlpo("inspect " + pc.path.root + " --json");
    ASSERT_EQ(r.code, 0) << pc.path.root << ": " << r.out;
    EXPECT_EQ(nlohmann::json::parse(r.out)["objects"], 1);
  }
  EXPECT_EQ(Mlpo("verify " + o_.paths[0].path.root).code, 0);
  // The store's name directory too.
  EXPECT_EQ(Mlpo("ls " + o_.paths[0].path.root + "/t").code, 0);
  StoreOptions two = o_;
  two.name = "u";
  ASSERT_TRUE(ObjectStore::Open(two).ok());
  CliRun r = Mlpo("tag " + o_.paths[0].path.root + " x", /*with_stderr=*/true);
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("holds 2 stores"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("/t/rank-0"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("/u/rank-0"), std::string::npos) << r.out;
  r = Mlpo("tags " + store_dir_ + " --json");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(r.out.find("\"x\""), std::string::npos) << "tagged: " << r.out;
}

// Issue 7, items 9 and 13: bounded reads, named subcommands, checked
// version numbers, no table before an error.
TEST_F(CliTest, BadArgumentsAreNamedWithoutOutputOrHanging) {
  CliRun r = Mlpo("inspect /dev/zero", true);
  EXPECT_EQ(r.code, 1);  // not 124: timeout would mean it read forever
  EXPECT_NE(r.out.find("not a regular file"), std::string::npos) << r.out;
  r = Mlpo("frobnicate " + store_dir_, true);
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.out.find("unknown subcommand 'frobnicate'"), std::string::npos)
      << r.out;
  r = Mlpo("show " + store_dir_ + " w0 --version -1", true);
  EXPECT_NE(r.code, 0);
  EXPECT_EQ(r.out.find("18446744073709551615"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("--version"), std::string::npos) << r.out;
  // The bound in words, not as the largest double.
  for (const char* bad : {" --version 0", " --step -1", " --step x"}) {
    r = Mlpo("show " + store_dir_ + " w0" + bad, true);
    EXPECT_EQ(r.code, 2) << bad;
    EXPECT_NE(r.out.find("must be a whole number >="), std::string::npos)
        << r.out;
    EXPECT_EQ(r.out.find("1797693"), std::string::npos) << r.out;
  }
  r = Mlpo("profile " + dir_.path() + "/nosuch");
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(r.out, "");  // no table header before the error
}

// Numbers and names out of range are refused before anything runs: nan
// passed CLI::Range, 0 and empty names were taken as "not given", and a
// profile larger than the disk filled it.
TEST_F(CliTest, AbsurdNumbersAndEmptyNamesAreRefusedBeforeAnythingRuns) {
  for (const char* rate : {"0", "-1", "nan", "inf", "x"}) {
    CliRun r = Mlpo(std::string("plan --params 1M --path nvme:1G/1G/1G "
                                "--kernel-rate ") + rate, true);
    EXPECT_EQ(r.code, 2) << rate;
    EXPECT_NE(r.out.find("--kernel-rate"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("must be a number from 1"), std::string::npos)
        << r.out;
  }
  CliRun r = Mlpo("profile " + dir_.path() + " --seconds nan", true);
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.out.find("--seconds: 'nan' must be a number from 0 to 3600"),
            std::string::npos) << r.out;
  r = Mlpo("profile " + dir_.path() + " --size 100000T", true);
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.out.find("more than half the free space"), std::string::npos)
      << r.out;
  size_t files = 0;
  for (auto& e : std::filesystem::directory_iterator(dir_.path())) {
    (void)e;
    ++files;
  }
  CliRun again = Mlpo("profile " + dir_.path() + " --size 100000T", true);
  EXPECT_EQ(again.code, 1);
  size_t after = 0;
  for (auto& e : std::filesystem::directory_iterator(dir_.path())) {
    (void)e;
    ++after;
  }
  EXPECT_EQ(after, files);  // no probe file left
  for (const std::string& cmd :
       {"verify " + store_dir_ + " --tag ''",
        "recover " + store_dir_ + " --lost-path ''",
        "export " + store_dir_ + " --tag '' -o " + dir_.path() + "/x.st"}) {
    r = Mlpo(cmd, true);
    EXPECT_EQ(r.code, 2) << cmd;
    EXPECT_NE(r.out.find("must not be empty"), std::string::npos) << r.out;
  }
  EXPECT_FALSE(std::filesystem::exists(dir_.path() + "/x.st"));
}

// `mlpo plan --optimizer`: each rule's bytes per parameter (p and its
// slots) set the state's size and the step's bytes; a typo is named.
TEST_F(CliTest, PlanCountsEachRulesBytesPerParameter) {
  std::map<std::string, double> want = {{"adam", 12}, {"adam+amsgrad", 16},
                                        {"lion", 8},  {"adagrad", 8},
                                        {"sgd", 4},   {"sgd+momentum", 8}};
  for (const auto& [rule, bytes] : want) {
    CliRun r = Mlpo("plan --params 1M --path nvme:1G/1G/1G --kernel-rate 1e9 "
                    "--json --optimizer " + rule);
    ASSERT_EQ(r.code, 0) << r.out;
    auto j = nlohmann::json::parse(r.out.substr(r.out.find('{')));
    EXPECT_EQ(j["state_bytes_per_param"].get<double>(), bytes) << rule;
    EXPECT_EQ(j["optimizer"], rule);
  }
  CliRun r = Mlpo("plan --params 1M --path nvme:1G/1G/1G --kernel-rate 1e9 "
                  "--optimizer adamw", true);
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.out.find("unknown update rule 'adamw'"), std::string::npos)
      << r.out;
}

// `mlpo profile --store` measures the store's paths and records the
// figures in its index; the next open without fractions stripes by them.
TEST_F(CliTest, ProfileStoreRecordsBandwidthThatSetsTheFractions) {
  CliRun r = Mlpo("profile --store " + store_dir_ +
                  " --size 8M --seconds 0 --json");
  ASSERT_EQ(r.code, 0) << r.out;
  auto j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j["paths"].size(), 2u);
  double u0 = j["paths"][0]["mixed_bps"], u1 = j["paths"][1]["mixed_bps"];
  EXPECT_GT(u0, 0);
  EXPECT_GT(u1, 0);
  StoreOptions o = o_;
  for (auto& p : o.paths) p.fraction = 0;
  auto s = ObjectStore::Open(o);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_NEAR((*s)->placement()->fractions()[0], u0 / (u0 + u1), 1e-9);
  // Both modes at once, or neither, is a usage error.
  EXPECT_EQ(Mlpo("profile").code, 2);
  // One directory named three ways is measured once, and said so.
  std::string d = dir_.path() + "/probe";
  std::filesystem::create_directories(d);
  std::filesystem::create_directory_symlink(d, dir_.path() + "/link");
  r = RunCommand("timeout 60 " + std::string(MLPO_CLI) + " profile " + d +
                 " " + d + "/ " + dir_.path() +
                 "/link --size 8M --seconds 0 --json 2>" + dir_.path() +
                 "/err");
  ASSERT_EQ(r.code, 0) << r.out;
  j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j["paths"].size(), 1u) << r.out;
  EXPECT_EQ(j["paths"][0]["path"], d);
  std::ifstream err(dir_.path() + "/err");
  std::string said((std::istreambuf_iterator<char>(err)), {});
  EXPECT_NE(said.find(d + "/ is " + d + " again; measured once"),
            std::string::npos) << said;
  EXPECT_NE(said.find("/link is " + d + " again"), std::string::npos)
      << said;
}

// `mlpo recover`: a healthy store reports nothing lost; a store whose index
// WAL was deleted is refused by every command until recover rolls it back.
TEST_F(CliTest, RecoverReportsAndRepairsARolledBackIndex) {
  CliRun r = Mlpo("recover " + store_dir_ + " --json");
  ASSERT_EQ(r.code, 0) << r.out;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_FALSE(j["rolled_back"].get<bool>());
  EXPECT_EQ(j["objects"], 1);
  ASSERT_EQ(j["tags"].size(), 1u);
  EXPECT_EQ(j["tags"][0]["bad_extents"], 0);
  // A commit acknowledged after the last tag lives only in the WAL; delete
  // the WAL.
  {
    auto s = ObjectStore::Open(o_);
    ASSERT_TRUE(s.ok());
    auto lease = (*s)->Checkout("w0").get();
    ASSERT_TRUE(lease.ok());
    ASSERT_TRUE((*s)->Commit(*lease, 8).get().ok());
  }
  std::string meta = DefaultMetaDir(o_);
  for (auto& e : std::filesystem::directory_iterator(meta))
    if (e.path().extension() == ".log") std::filesystem::remove(e.path());
  r = Mlpo("tags " + store_dir_, true);
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.out.find("mlpo recover"), std::string::npos) << r.out;
  EXPECT_EQ(Mlpo("tag " + store_dir_ + " third").code, 1);
  r = Mlpo("recover " + store_dir_ + " --json");
  ASSERT_EQ(r.code, 0) << r.out;
  j = nlohmann::json::parse(r.out);
  EXPECT_TRUE(j["rolled_back"].get<bool>());
  EXPECT_GT(j["lost_index_writes"].get<int>(), 0);
  r = Mlpo("ls " + store_dir_ + " --json");
  ASSERT_EQ(r.code, 0);
  j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["objects"][0]["head_step"], 7);  // step 8 was lost, and said so
  EXPECT_EQ(Mlpo("verify " + store_dir_).code, 0);
  EXPECT_EQ(Mlpo("verify " + store_dir_ + " --tag first").code, 0);
}

// Issue 17, reproduction 6: read-only tools beside a stepping, tagging job
// raised false alarms ("lost acknowledged writes ... run mlpo recover",
// "Can't access NNN.sst", ENOENT on a .log). Every read-only command of
// every kind, run beside a writer that commits, tags (each tag flushes the
// index into a backup), drops tags and collects garbage, must succeed.
// MLPO_READER_RUNS: runs of each kind (the slow label runs 1000).
TEST_F(CliTest, ReadOnlyCommandsBesideAWritingJobRaiseNoFalseAlarm) {
  const char* env = std::getenv("MLPO_READER_RUNS");
  const int runs = env ? std::max(1, std::atoi(env)) : 25;
  std::atomic<bool> stop{false};
  std::atomic<int> steps{0};
  std::string writer_error;
  std::thread writer([&] {
    auto s = ObjectStore::Open(o_);
    if (!s.ok()) {
      writer_error = std::string(s.status().message());
      return;
    }
    for (uint64_t step = 8; !stop; ++step) {
      auto l = (*s)->Checkout("w0").get();
      if (!l.ok()) {
        writer_error = std::string(l.status().message());
        return;
      }
      absl::Status st = (*s)->Commit(*l, step).get();
      if (st.ok() && step % 2 == 0) st = (*s)->Tag("s" + std::to_string(step));
      if (st.ok() && step % 2 == 0 && step >= 14)
        st = (*s)->DropTag("s" + std::to_string(step - 6));
      if (st.ok() && step % 6 == 0) st = Gc(**s).status();
      if (!st.ok()) {
        writer_error = std::string(st.message());
        return;
      }
      ++steps;
    }
  });
  std::map<std::string, int> failures;
  std::string first_failure;
  for (int i = 0; i < runs && writer_error.empty(); ++i) {
    for (const char* cmd : {"ls", "tags", "inspect", "verify", "show"}) {
      std::string args = std::string(cmd) + " " + store_dir_ +
                         (std::string(cmd) == "show" ? " w0" : "") + " --json";
      CliRun r = Mlpo(args, /*with_stderr=*/true);
      if (r.code != 0) {
        ++failures[cmd];
        if (first_failure.empty()) first_failure = args + ": " + r.out;
      }
    }
  }
  stop = true;
  writer.join();
  EXPECT_TRUE(writer_error.empty()) << writer_error;
  EXPECT_GT(steps.load(), 5) << "the writer hardly ran";
  EXPECT_TRUE(failures.empty()) << failures.size() << " kinds failed; first: "
                                << first_failure;
  std::printf("%d runs of each read-only command beside %d writer steps\n",
              runs, steps.load());
}

// Flips one byte of `e` in its segment file.
void FlipExtentByte(ObjectStore* s, const ExtentRef& e) {
  std::string file = s->path(e.path)->SegmentFile(e.offset);
  uint64_t off = s->path(e.path)->SegmentOffset(e.offset) + 5;
  int fd = ::open(file.c_str(), O_RDWR);
  ASSERT_GE(fd, 0) << file;
  char c;
  ASSERT_EQ(pread(fd, &c, 1, off), 1);
  c = ~c;
  ASSERT_EQ(pwrite(fd, &c, 1, off), 1);
  ::close(fd);
}

// Issue 17: verify said OK and exited 0 when only a replica was readable,
// and show never listed replica extents.
TEST_F(CliTest, VerifyHasItsOwnStateWhenOnlyTheReplicaReads) {
  ASSERT_EQ(Mlpo("tag " + store_dir_ + " first --copy-to 1").code, 0);
  CliRun r = Mlpo("show " + store_dir_ + " w0 --json");
  ASSERT_EQ(r.code, 0);
  auto j = nlohmann::json::parse(r.out);
  EXPECT_FALSE(j["replica"].empty());
  for (auto& e : j["replica"]) EXPECT_EQ(e["path"], o_.paths[1].path.root);
  r = Mlpo("show " + store_dir_ + " w0", true);
  EXPECT_NE(r.out.find("replica extents"), std::string::npos) << r.out;
  VersionRecord rec;
  {
    auto s = ObjectStore::Open(o_);
    ASSERT_TRUE(s.ok());
    rec = *(*s)->GetVersion("w0", 0);
    FlipExtentByte(s->get(), rec.extents[0]);
  }
  r = Mlpo("verify " + store_dir_ + " --tag first --json");
  EXPECT_EQ(r.code, 3);
  j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["state"], "replica_only");
  EXPECT_TRUE(j["ok"].get<bool>());  // nothing lost
  r = Mlpo("verify " + store_dir_ + " --tag first", true);
  EXPECT_EQ(r.code, 3);
  EXPECT_NE(r.out.find("READABLE ONLY FROM THE REPLICA"), std::string::npos)
      << r.out;
  {
    auto s = ObjectStore::Open(o_);
    ASSERT_TRUE(s.ok());
    FlipExtentByte(s->get(), rec.replica[0]);
  }
  r = Mlpo("verify " + store_dir_ + " --tag first --json");
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(nlohmann::json::parse(r.out)["state"], "bad");
}

// Issue 17, reproduction 3: a restore that fails still changed the store
// (heads moved back, newer untagged state freed). Now nothing changes.
TEST_F(CliTest, ARestoreThatFailsChangesNothing) {
  std::string head_bytes;
  {
    auto s = ObjectStore::Open(o_);
    ASSERT_TRUE(s.ok());
    auto l = (*s)->Checkout("w0").get();
    ASSERT_TRUE(l.ok());
    (*l)->Section<float>("p")[0] = 42.0f;
    ASSERT_TRUE((*s)->Commit(*l, 8).get().ok());  // untagged, newer
    auto h = (*s)->Checkout("w0").get();
    head_bytes.assign((*h)->data(), (*h)->size());
    auto tags = (*s)->Tags();
    FlipExtentByte(s->get(),
                   (*s)->GetVersion("w0", tags["first"]["w0"])->extents[0]);
  }
  CliRun r = Mlpo("restore " + store_dir_ + " first", true);
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.out.find("nothing was changed"), std::string::npos) << r.out;
  auto s = ObjectStore::Open(o_);
  ASSERT_TRUE(s.ok());
  absl::Status st = (*s)->Restore("first");
  EXPECT_EQ(st.code(), absl::StatusCode::kDataLoss) << st;
  auto h = (*s)->Checkout("w0").get();
  ASSERT_TRUE(h.ok()) << h.status();
  EXPECT_EQ((*h)->step(), 8u);
  EXPECT_EQ(std::string((*h)->data(), (*h)->size()), head_bytes);
  EXPECT_EQ((*s)->Tags().count("first"), 1u);
  ExpectNoLeak(s->get());
}

}  // namespace
}  // namespace mlpo
