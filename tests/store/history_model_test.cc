// A model-based test of the store's history: random sequences of what a
// user does (commit a step, tag, restore any tag -- older ones included --,
// drop a tag, gc, copy a tag to another path, close and reopen, cut the
// power), checked after every operation against an in-memory model of what
// each head and each tag must read back.
//
// This is the test that would have caught the lineage bug: before versions
// were store-wide sequence numbers, a commit after a restore reused the
// version key of a tagged record (commit only checked "greater than the
// head") and overwrote it, so the old tag silently read the new lineage and
// later opens failed with "referenced but has no record".
//
// MLPO_MODEL_OPS sets the number of operations per seed (a few hundred in
// the default run; the slow label runs thousands).
#include <cstdlib>
#include <map>
#include <random>
#include <string>

#include "gtest/gtest.h"
#include "store/admin/copy.h"
#include "store/admin/gc.h"
#include "store/fs/fault_injection_fs.h"
#include "tests/store/store_test_util.h"

namespace mlpo {
namespace {

constexpr int kObjects = 3;
std::string Obj(int i) { return "g0.s00000" + std::to_string(i); }

int ModelOps(int dflt) {
  const char* e = std::getenv("MLPO_MODEL_OPS");
  return e ? std::max(1, std::atoi(e)) : dflt;
}

// What one object holds: the content id it was filled from, and its step.
struct Content {
  uint64_t id = 0, step = 0;
  bool operator==(const Content&) const = default;
};
using State = std::map<std::string, Content>;  // object -> content

struct Model {
  State heads;
  std::map<std::string, State> tags;
  uint64_t step = 0;  // the heads' step (all objects move together)
};

class HistoryModelTest : public ::testing::TestWithParam<std::tuple<int, bool>> {
 protected:
  void SetUp() override {
    base_ = TestStoreOptions(dir_, {0.6, 0.4});
    if (std::get<1>(GetParam())) base_.cache_percent = 50;
    Reopen(nullptr);
    for (int i = 0; i < kObjects; ++i)
      ASSERT_TRUE(s_->Declare(Obj(i), TestLayout(9000 + 5000 * i)).ok());
  }

  void Reopen(FileSystem* fsys) {
    s_.reset();
    StoreOptions o = base_;
    o.fs = fsys;
    auto s = ObjectStore::Open(o);
    ASSERT_TRUE(s.ok()) << s.status();
    s_ = std::move(*s);
  }

  // Everything the model says must read back, does: every head (content and
  // step) and every tag (the same set of tags, each object's content).
  void Check(const std::string& after) {
    SCOPED_TRACE("after " + after);
    for (int i = 0; i < kObjects; ++i) {
      auto l = s_->Checkout(Obj(i)).get();
      ASSERT_TRUE(l.ok()) << l.status();
      auto want = model_.heads.find(Obj(i));
      if (want == model_.heads.end()) {
        EXPECT_TRUE((*l)->is_new()) << Obj(i);
        continue;
      }
      EXPECT_EQ((*l)->step(), want->second.step) << Obj(i);
      EXPECT_TRUE(Matches(**l, want->second.id)) << Obj(i) << " head";
    }
    auto tags = s_->Tags();
    ASSERT_EQ(tags.size(), model_.tags.size());
    for (auto& [name, state] : model_.tags) {
      auto t = tags.find(name);
      ASSERT_NE(t, tags.end()) << "tag " << name << " is gone";
      ASSERT_EQ(t->second.size(), state.size()) << "tag " << name;
      for (auto& [obj, c] : state) {
        auto v = t->second.find(obj);
        ASSERT_NE(v, t->second.end()) << "tag " << name << " " << obj;
        auto l = s_->ReadVersion(obj, v->second);
        ASSERT_TRUE(l.ok()) << "tag " << name << ": " << l.status();
        EXPECT_EQ((*l)->step(), c.step) << "tag " << name << " " << obj;
        EXPECT_TRUE(Matches(**l, c.id))
            << "tag " << name << " " << obj << " reads another lineage";
      }
    }
    ExpectNoLeak(s_.get());
  }

  TempDir dir_;
  StoreOptions base_;
  std::unique_ptr<ObjectStore> s_;
  Model model_;
};

TEST_P(HistoryModelTest, RandomWorkflowsReadBackWhatTheModelSays) {
  std::mt19937_64 rng(1234 + std::get<0>(GetParam()));
  const int ops = ModelOps(200);
  uint64_t next_id = 1, next_tag = 1;
  std::map<std::string, int> counts;
  for (int op = 0; op < ops; ++op) {
    int what = static_cast<int>(rng() % 100);
    std::string name;
    if (what < 40) {
      name = "commit";
      uint64_t step = model_.step + 1;
      for (int i = 0; i < kObjects; ++i) {
        auto l = s_->Checkout(Obj(i)).get();
        ASSERT_TRUE(l.ok()) << l.status();
        uint64_t id = next_id++;
        FillFor(l->get(), id);
        Lease lease = std::move(*l);
        ASSERT_TRUE(s_->Commit(std::move(lease), step).get().ok());
        model_.heads[Obj(i)] = {id, step};
      }
      model_.step = step;
    } else if (what < 55) {
      name = "tag";
      // Names that repeat a step on purpose, as the adapter's "step-<t>"
      // would after a rollback.
      std::string t = "step-" + std::to_string(model_.step) + "." +
                      std::to_string(next_tag++);
      ASSERT_TRUE(s_->Tag(t).ok());
      model_.tags[t] = model_.heads;
    } else if (what < 72) {
      name = "restore";
      if (model_.tags.empty()) continue;
      auto it = model_.tags.begin();
      std::advance(it, rng() % model_.tags.size());
      absl::Status st = s_->Restore(it->first);
      ASSERT_TRUE(st.ok()) << st;
      model_.heads = it->second;
      model_.step = 0;
      for (auto& [o, c] : model_.heads) model_.step = c.step;
    } else if (what < 80) {
      name = "drop-tag";
      if (model_.tags.empty()) continue;
      auto it = model_.tags.begin();
      std::advance(it, rng() % model_.tags.size());
      ASSERT_TRUE(s_->DropTag(it->first).ok());
      model_.tags.erase(it);
    } else if (what < 85) {
      name = "gc";
      ASSERT_TRUE(Gc(*s_).ok());
    } else if (what < 88) {
      name = "copy-to";
      if (model_.tags.empty()) continue;
      auto it = model_.tags.begin();
      std::advance(it, rng() % model_.tags.size());
      auto rep = CopyTagTo(*s_, it->first, static_cast<int>(rng() % 2));
      ASSERT_TRUE(rep.ok()) << rep.status();
    } else if (what < 94) {
      name = "reopen";
      Reopen(nullptr);
    } else {
      // A power cut between operations: with durability "step" everything
      // acknowledged is on disk; the store then reopens on what a reboot
      // finds (the DRAM tier, when on, holds only clean copies).
      name = "power-cut";
      FaultInjectionFileSystem fsys;
      Reopen(&fsys);
      if (rng() % 2 == 0) {
        // One more commit cut short by the power: not acknowledged, so the
        // model keeps the heads it had.
        auto l = s_->Checkout(Obj(0)).get();
        ASSERT_TRUE(l.ok());
        FillFor(l->get(), next_id++);
        fsys.CutPower();
        (void)s_->Commit(std::move(*l), model_.step + 1).get();
      } else {
        fsys.CutPower();
      }
      s_.reset();
      ASSERT_TRUE(fsys.RestoreToLastSync().ok());
      Reopen(nullptr);
    }
    ++counts[name];
    Check(name + " (operation " + std::to_string(op) + ")");
    if (HasFatalFailure() || HasFailure()) {
      ADD_FAILURE() << "seed " << std::get<0>(GetParam()) << " failed at "
                    << "operation " << op << " (" << name << ")";
      return;
    }
  }
  for (auto& [n, c] : counts) std::printf("  %-10s %d\n", n.c_str(), c);
  // Reopened at the end: still everything the model says.
  Reopen(nullptr);
  Check("the final reopen");
  ExpectStoreVerifies(s_.get());
}

INSTANTIATE_TEST_SUITE_P(
    Seeds, HistoryModelTest,
    ::testing::Combine(::testing::Values(1, 2), ::testing::Bool()),
    [](const auto& info) {
      return "seed" + std::to_string(std::get<0>(info.param)) +
             (std::get<1>(info.param) ? "_cache" : "");
    });

}  // namespace
}  // namespace mlpo
