// Fixture helpers for object store tests: a store over N temp paths.
#ifndef MLPO_TESTS_STORE_STORE_TEST_UTIL_H_
#define MLPO_TESTS_STORE_STORE_TEST_UTIL_H_

#include <fcntl.h>
#include <unistd.h>

#include <string>
#include <tuple>
#include <vector>

#include "gtest/gtest.h"
#include "store/admin/verify.h"
#include "store/object_store.h"
#include "tests/test_util.h"

namespace mlpo {

inline StoreOptions TestStoreOptions(const TempDir& dir,
                                     std::vector<double> fractions) {
  StoreOptions o;
  o.name = "t";
  o.extent_bytes = 64 << 10;
  for (size_t i = 0; i < fractions.size(); ++i) {
    StorePathConfig pc;
    pc.path.root = dir.Sub("p" + std::to_string(i));
    pc.path.kind = i == 0 ? PathKind::kNvme : PathKind::kPfs;
    pc.path.segment_bytes = 4 << 20;
    pc.path.slots = 0;
    pc.fraction = fractions[i];
    o.paths.push_back(pc);
  }
  return o;
}

inline ObjectLayout TestLayout(uint64_t n) {
  return *ObjectLayout::Make({{"p", DType::kF32, n},
                              {"m", DType::kF32, n},
                              {"v", DType::kF32, n}});
}

// Fills a lease's blob with bytes derived from (object, version).
inline void FillFor(CheckoutLease* l, uint64_t version) {
  FillRandom(l->data(), l->size(),
             std::hash<std::string>()(l->object()) * 31 + version);
}

// Checks `obj` out, fills it for `step` and commits it at `step`.
inline absl::Status CommitFilled(ObjectStore* s, const std::string& obj,
                                 uint64_t step) {
  auto l = s->Checkout(obj).get();
  if (!l.ok()) return l.status();
  FillFor(l->get(), step);
  return s->Commit(*l, step).get();
}

// A store with two objects "a" and "b" of TestLayout(30000): versions 1
// and 2, tag "t2" at 2, heads at 3.
inline void MakeTwoObjectStore(const StoreOptions& o) {
  auto s = ObjectStore::Open(o);
  ASSERT_TRUE(s.ok()) << s.status();
  for (const char* n : {"a", "b"}) {
    ASSERT_TRUE((*s)->Declare(n, TestLayout(30000)).ok());
    for (uint64_t v = 1; v <= 2; ++v)
      ASSERT_TRUE(CommitFilled(s->get(), n, v).ok());
  }
  ASSERT_TRUE((*s)->Tag("t2").ok());
  for (const char* n : {"a", "b"})
    ASSERT_TRUE(CommitFilled(s->get(), n, 3).ok());
}

inline bool Matches(const CheckoutLease& l, uint64_t version) {
  std::string want(l.size(), '\0');
  FillRandom(want.data(), want.size(),
             std::hash<std::string>()(l.object()) * 31 + version);
  return std::memcmp(want.data(), l.data(), l.size()) == 0;
}

// Usage of every path must equal the bytes that version records hold:
// those heads and tags reference, and those a dropped tag left for gc.
inline void ExpectNoLeak(ObjectStore* s) {
  StoreStats st = s->Stats();
  for (auto& p : st.paths)
    EXPECT_EQ(p.usage.used, p.referenced_bytes + p.unreferenced_bytes)
        << "path " << p.root;
}

// Every head and every tag reads back with good checksums, and nothing
// leaks: what the crash and power-loss loops check after each reopen.
inline void ExpectStoreVerifies(ObjectStore* s) {
  ExpectNoLeak(s);
  auto rep = Verify(*s);
  ASSERT_TRUE(rep.ok());
  EXPECT_TRUE(rep->bad.empty()) << rep->bad.size() << " bad extents";
  for (auto& [tag, objs] : s->Tags()) {
    auto tr = Verify(*s, tag);
    ASSERT_TRUE(tr.ok());
    EXPECT_TRUE(tr->bad.empty()) << "tag " << tag;
  }
}

// The store MakeTwoObjectStore made, as a read-only open sees it: the heads
// of "a" and "b" at `step` with that step's bytes, tag "t2" holding version
// 2, nothing else, and every head and tag verifying without a leak.
inline void ExpectTwoObjectStoreAt(const StoreOptions& o, uint64_t step) {
  StoreOptions ro = o;
  ro.read_only = true;
  auto s = ObjectStore::Open(ro);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ((*s)->List().size(), 2u);
  for (const char* n : {"a", "b"}) {
    auto l = (*s)->Checkout(n).get();
    ASSERT_TRUE(l.ok()) << l.status();
    EXPECT_EQ((*l)->step(), step) << n;
    EXPECT_TRUE(Matches(**l, step)) << n;
  }
  auto tags = (*s)->Tags();
  ASSERT_EQ(tags.count("t2"), 1u);
  EXPECT_EQ(tags["t2"]["a"], 2u);
  ExpectStoreVerifies(s->get());
}

// Flips one bit of a file in place.
inline void FlipBit(const std::string& file, uint64_t offset, int bit) {
  int fd = ::open(file.c_str(), O_RDWR);
  ASSERT_GE(fd, 0) << file;
  unsigned char c;
  ASSERT_EQ(::pread(fd, &c, 1, static_cast<off_t>(offset)), 1);
  c ^= static_cast<unsigned char>(1u << bit);
  ASSERT_EQ(::pwrite(fd, &c, 1, static_cast<off_t>(offset)), 1);
  ::close(fd);
}

// The segment file holding linear offset `off` of a path of store "t".
inline std::string SegFile(const PathOptions& po, uint64_t off) {
  std::string n = std::to_string(off / po.segment_bytes);
  return po.root + "/t/rank-0/seg-" + std::string(6 - n.size(), '0') + n;
}

// Test names for (durability, DRAM tier on) parameters: step, step_cache,
// tag, tag_cache.
inline std::string DurabilityAndTierName(
    const ::testing::TestParamInfo<std::tuple<Durability, bool>>& info) {
  return std::string(std::get<0>(info.param) == Durability::kStep ? "step"
                                                                  : "tag") +
         (std::get<1>(info.param) ? "_cache" : "");
}

}  // namespace mlpo

#endif  // MLPO_TESTS_STORE_STORE_TEST_UTIL_H_
