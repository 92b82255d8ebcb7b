// Issue 17, reproduction 7: one missing segment file blocked everything
// (open, verify --deep and recover stopped at the first problem). Now a
// writer's open names every missing file and changes nothing, a read-only
// verify --deep names every missing or short file and every version they
// cost, and Salvage keeps exactly the tags and heads that do not touch
// them, reading back bit-identical, then the store trains on.
#include <filesystem>
#include <map>
#include <set>

#include "gtest/gtest.h"
#include "store/admin/gc.h"
#include "store/admin/salvage.h"
#include "store/admin/verify.h"
#include "tests/store/store_test_util.h"

namespace mlpo {
namespace {

constexpr int kObjects = 2;
std::string Obj(int i) { return "o" + std::to_string(i); }

TEST(SalvageTest, AMissingAndAShortSegmentCostOnlyWhatTheyHeld) {
  TempDir dir;
  StoreOptions o = TestStoreOptions(dir, {0.5, 0.5});
  // tag name -> object -> step; and which segment files each tag touches.
  std::map<std::string, std::map<std::string, uint64_t>> tagged;
  std::map<std::string, std::set<std::string>> files_of;
  std::map<std::string, uint64_t> head;
  {
    auto s = ObjectStore::Open(o);
    ASSERT_TRUE(s.ok()) << s.status();
    for (int i = 0; i < kObjects; ++i)
      ASSERT_TRUE((*s)->Declare(Obj(i), TestLayout(50000 + 7000 * i)).ok());
    for (uint64_t step = 1; step <= 40; ++step) {
      for (int i = 0; i < kObjects; ++i) {
        auto l = (*s)->Checkout(Obj(i)).get();
        ASSERT_TRUE(l.ok());
        FillFor(l->get(), step * 10 + i);
        ASSERT_TRUE((*s)->Commit(*l, step).get().ok());
        head[Obj(i)] = step;
      }
      if (step % 2 == 0) {
        std::string t = "t" + std::to_string(step);
        ASSERT_TRUE((*s)->Tag(t).ok());
        for (int i = 0; i < kObjects; ++i) tagged[t][Obj(i)] = step;
      }
    }
    for (auto& [t, objs] : (*s)->Tags())
      for (auto& [obj, v] : objs) {
        auto rec = (*s)->GetVersion(obj, v);
        ASSERT_TRUE(rec.ok());
        for (auto& e : rec->extents)
          files_of[t].insert((*s)->path(e.path)->SegmentFile(e.offset));
      }
  }
  std::string ns = "/t/rank-0/";
  std::string gone = o.paths[0].path.root + ns + "seg-000001";
  std::string cut = o.paths[1].path.root + ns + "seg-000000";
  ASSERT_TRUE(std::filesystem::exists(gone));
  ASSERT_TRUE(std::filesystem::exists(o.paths[0].path.root + ns +
                                      "seg-000002"))
      << "the test needs three segments on path 0";
  std::filesystem::remove(gone);
  std::filesystem::resize_file(cut, 1 << 20);  // the first MiB survives
  std::set<std::string> want_kept;
  for (auto& [t, files] : files_of) {
    bool hit = files.count(gone) > 0;
    if (files.count(cut)) {
      // Only extents past the first MiB of the cut file are lost.
      auto s = ObjectStore::Open([&] {
        StoreOptions r = o;
        r.read_only = true;
        return r;
      }());
      ASSERT_TRUE(s.ok()) << s.status();
      auto all_tags = (*s)->Tags();
      for (auto& [obj, v] : all_tags[t]) {
        auto rec = (*s)->GetVersion(obj, v);
        for (auto& e : rec->extents)
          if ((*s)->path(e.path)->SegmentFile(e.offset) == cut &&
              (*s)->path(e.path)->SegmentOffset(e.offset) + e.length >
                  (1u << 20))
            hit = true;
      }
    }
    if (!hit) want_kept.insert(t);
  }
  ASSERT_FALSE(want_kept.empty());
  ASSERT_LT(want_kept.size(), tagged.size());

  // A writer's open names the missing file and changes nothing.
  auto w = ObjectStore::Open(o);
  ASSERT_FALSE(w.ok());
  EXPECT_EQ(w.status().code(), absl::StatusCode::kDataLoss) << w.status();
  EXPECT_NE(w.status().message().find("seg-0000"), std::string::npos);
  EXPECT_NE(w.status().message().find("--salvage"), std::string::npos);

  // A read-only deep verify lists every problem, not the first.
  {
    StoreOptions r = o;
    r.read_only = true;
    auto s = ObjectStore::Open(r);
    ASSERT_TRUE(s.ok()) << s.status();
    auto rep = Verify(*(*s), "", nullptr, /*deep=*/true);
    ASSERT_TRUE(rep.ok()) << rep.status();
    EXPECT_EQ(rep->missing_segments, std::vector<std::string>{gone});
    EXPECT_EQ(rep->short_segments, std::vector<std::string>{cut});
    std::set<std::string> bad_tags;
    for (auto& [t, objs] : (*s)->Tags())
      for (auto& b : rep->bad)
        if (objs.count(b.object) && objs.at(b.object) == b.version)
          bad_tags.insert(t);
    for (auto& [t, objs] : tagged)
      EXPECT_EQ(bad_tags.count(t) == 0, want_kept.count(t) == 1) << t;
  }

  auto rep = Salvage(o);
  ASSERT_TRUE(rep.ok()) << rep.status();
  EXPECT_EQ(std::set<std::string>(rep->kept_tags.begin(), rep->kept_tags.end()),
            want_kept);
  EXPECT_EQ(rep->kept_tags.size() + rep->dropped_tags.size(), tagged.size());
  EXPECT_FALSE(rep->bad.empty());
  // The newest versions were written last, in the newest segments: the
  // heads survive unless they touched the lost files.
  auto s = ObjectStore::Open(o);
  ASSERT_TRUE(s.ok()) << s.status();
  auto tags = (*s)->Tags();
  EXPECT_EQ(tags.size(), want_kept.size());
  for (const std::string& t : want_kept) {
    ASSERT_TRUE((*s)->Restore(t).ok()) << t;
    for (int i = 0; i < kObjects; ++i) {
      auto l = (*s)->Checkout(Obj(i)).get();
      ASSERT_TRUE(l.ok()) << l.status();
      EXPECT_EQ((*l)->step(), tagged[t][Obj(i)]);
      EXPECT_TRUE(Matches(**l, tagged[t][Obj(i)] * 10 + i)) << t;
    }
  }
  // Trains on: new versions can land anywhere, the repaired files too.
  for (uint64_t step = 100; step < 140; ++step)
    for (int i = 0; i < kObjects; ++i) {
      auto l = (*s)->Checkout(Obj(i)).get();
      ASSERT_TRUE(l.ok()) << l.status();
      FillFor(l->get(), step * 10 + i);
      ASSERT_TRUE((*s)->Commit(*l, step).get().ok());
    }
  ASSERT_TRUE(Gc(**s).ok());
  auto v = Verify(*(*s), "", nullptr, /*deep=*/true);
  ASSERT_TRUE(v.ok());
  EXPECT_TRUE(v->bad.empty()) << v->bad.size() << " bad: " << v->bad[0].error;
  EXPECT_TRUE(v->missing_segments.empty());
  EXPECT_TRUE(v->short_segments.empty());
  ExpectStoreVerifies(s->get());
}

}  // namespace
}  // namespace mlpo
