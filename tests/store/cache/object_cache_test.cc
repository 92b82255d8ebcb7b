// The DRAM tier: the eviction rule on its own (Belady with a declared order,
// LRU without, never past the budget), then through the store (a hit is the
// committed bytes with no I/O; restores, read-only opens, held leases and
// disk faults do not make it serve anything but what is on disk).
#include "store/cache/object_cache.h"

#include <unistd.h>

#include <cerrno>
#include <fstream>
#include <random>
#include <cstring>
#include <set>

#include "gtest/gtest.h"
#include "store/fs/fault_injection_fs.h"
#include "tests/store/store_test_util.h"

namespace mlpo {
namespace {

constexpr size_t kBlob = 64 << 10;

AlignedBuffer Blob() { return AlignedBuffer(kBlob, false); }

// Simulates a cache of `slots` blobs on an access sequence with `policy`,
// returning hits; the reference for the optimal count is a brute force
// over every eviction choice (tiny sequences only).
int OptimalHits(const std::vector<int>& seq, size_t slots, size_t i,
                std::set<int> in) {
  if (i == seq.size()) return 0;
  int x = seq[i];
  if (in.count(x)) return 1 + OptimalHits(seq, slots, i + 1, in);
  int best = OptimalHits(seq, slots, i + 1, in);  // do not keep x
  if (in.size() < slots) {
    auto with = in;
    with.insert(x);
    best = std::max(best, OptimalHits(seq, slots, i + 1, with));
  } else {
    for (int y : in) {
      auto with = in;
      with.erase(y);
      with.insert(x);
      best = std::max(best, OptimalHits(seq, slots, i + 1, with));
    }
  }
  return best;
}

int CacheHits(const std::vector<int>& seq, size_t slots, bool declare) {
  ObjectCache c(slots * kBlob);
  std::vector<std::string> order;
  for (int x : seq) order.push_back("o" + std::to_string(x));
  if (declare) c.DeclareOrder(order);
  std::vector<AlignedBuffer> released;
  int hits = 0;
  for (const std::string& o : order) {
    auto b = c.Take(o, 1, &released);
    hits += b.has_value();
    // The object is used, then "committed" back (same version for the
    // test: the cache only compares versions).
    AlignedBuffer buf = b ? std::move(*b) : Blob();
    c.Offer(o, 1, &buf, /*dirty=*/false, &released);
    EXPECT_LE(c.stats().cached_bytes, slots * kBlob);
  }
  return hits;
}

TEST(ObjectCacheTest, DeclaredOrderGivesTheOptimalHitCount) {
  std::mt19937 rng(3);
  for (int trial = 0; trial < 40; ++trial) {
    std::vector<int> seq;
    for (int i = 0; i < 11; ++i) seq.push_back(static_cast<int>(rng() % 5));
    size_t slots = 1 + rng() % 3;
    EXPECT_EQ(CacheHits(seq, slots, true), OptimalHits(seq, slots, 0, {}))
        << "trial " << trial;
  }
}

TEST(ObjectCacheTest, AlternatingOrderHitsWhatLruMisses) {
  // Four subgroups, room for two: forward, backward, forward...
  std::vector<int> seq;
  for (int step = 0; step < 6; ++step)
    for (int k = 0; k < 4; ++k) seq.push_back(step % 2 ? 3 - k : k);
  int belady = CacheHits(seq, 2, true);
  int lru = CacheHits(seq, 2, false);
  EXPECT_EQ(belady, 10);  // the two updated last are the first two next
  EXPECT_EQ(lru, 10);     // LRU keeps the same two with this order...
  // ...but not when the order does not alternate: LRU then always misses,
  // Belady keeps one blob (slots - 1 hits per step after the first).
  std::vector<int> fwd;
  for (int step = 0; step < 3; ++step)
    for (int k = 0; k < 4; ++k) fwd.push_back(k);
  EXPECT_EQ(CacheHits(fwd, 2, false), 0);
  EXPECT_EQ(CacheHits(fwd, 2, true), OptimalHits(fwd, 2, 0, {}));
  EXPECT_GT(CacheHits(fwd, 2, true), 0);
}

TEST(ObjectCacheTest, BudgetVersionsAndInvalidation) {
  ObjectCache c(2 * kBlob);
  std::vector<AlignedBuffer> released;
  auto offer = [&](const std::string& o, uint64_t v, AlignedBuffer b,
                   bool dirty = false) {
    return c.Offer(o, v, &b, dirty, &released);
  };
  EXPECT_TRUE(offer("a", 1, Blob()));
  EXPECT_TRUE(offer("b", 1, Blob()));
  EXPECT_TRUE(released.empty());
  EXPECT_TRUE(offer("a", 2, Blob()));  // replaces a@1
  EXPECT_EQ(released.size(), 1u);
  EXPECT_FALSE(c.Take("a", 1, &released).has_value());  // stale: dropped
  EXPECT_FALSE(c.Contains("a", 2));
  EXPECT_TRUE(c.Contains("b", 1));
  EXPECT_FALSE(offer("big", 1, AlignedBuffer(3 * kBlob, false)));  // too big
  EXPECT_FALSE(c.Contains("big", 1));
  EXPECT_EQ(c.stats().refused, 1u);
  c.SetBudget(0, &released);
  EXPECT_EQ(c.stats().cached_bytes, 0u);
  EXPECT_EQ(c.stats().entries, 0u);
}

TEST(ObjectCacheTest, DirtyEntriesAreNeverEvictedOrHandedOut) {
  ObjectCache c(2 * kBlob);
  std::vector<AlignedBuffer> released;
  auto offer = [&](const std::string& o, uint64_t v, bool dirty, char fill) {
    AlignedBuffer b = Blob();
    std::memset(b.data(), fill, kBlob);
    return c.Offer(o, v, &b, dirty, &released);
  };
  EXPECT_TRUE(offer("a", 1, true, 'a'));
  EXPECT_TRUE(offer("b", 1, true, 'b'));
  // Full of dirty entries: a clean or dirty newcomer is refused, nothing
  // dirty goes.
  EXPECT_FALSE(offer("c", 1, false, 'c'));
  EXPECT_FALSE(offer("c", 1, true, 'c'));
  EXPECT_EQ(c.stats().dirty_entries, 2u);
  // Not handed out: Take misses, CopyDirty copies and the entry stays.
  EXPECT_FALSE(c.Take("a", 1, &released).has_value());
  std::string out(kBlob, '\0');
  EXPECT_TRUE(c.CopyDirty("a", 1, out.data(), kBlob));
  EXPECT_EQ(out, std::string(kBlob, 'a'));
  EXPECT_TRUE(c.Contains("a", 1));
  // A newer dirty version replaces the older: a write saved.
  EXPECT_TRUE(offer("a", 2, true, 'A'));
  EXPECT_EQ(c.stats().writes_saved, 1u);
  // An older or equal version never replaces a dirty one.
  EXPECT_FALSE(offer("a", 2, false, 'x'));
  // Write-back: copy, then mark clean; then it can be evicted.
  auto dirty = c.DirtyEntries();
  ASSERT_EQ(dirty.size(), 2u);
  EXPECT_TRUE(c.CopyForWriteBack("a", 2, out.data(), kBlob));
  EXPECT_EQ(out, std::string(kBlob, 'A'));
  c.MarkClean("a", 2);
  EXPECT_EQ(c.stats().dirty_entries, 1u);
  EXPECT_TRUE(offer("c", 1, false, 'c'));  // evicts the clean a@2
  EXPECT_FALSE(c.Contains("a", 2));
  EXPECT_TRUE(c.Contains("b", 1));
}

TEST(ObjectCacheTest, ALentDirtyEntryIsOutUntilReplacedOrPutBack) {
  ObjectCache c(2 * kBlob);
  std::vector<AlignedBuffer> released;
  AlignedBuffer b = Blob();
  std::memset(b.data(), 'a', kBlob);
  ASSERT_TRUE(c.Offer("a", 1, &b, /*dirty=*/true, &released));
  auto lent = c.LendDirty("a", 1);
  ASSERT_TRUE(lent.has_value());
  EXPECT_EQ(lent->data()[0], 'a');
  // Out: nobody else reads it, it still counts in the budget, it is lent
  // once.
  EXPECT_TRUE(c.IsOut("a", 1));
  std::string out(kBlob, '\0');
  EXPECT_FALSE(c.CopyDirty("a", 1, out.data(), kBlob));
  EXPECT_FALSE(c.CopyForWriteBack("a", 1, out.data(), kBlob));
  EXPECT_FALSE(c.LendDirty("a", 1).has_value());
  EXPECT_FALSE(c.Take("a", 1, &released).has_value());
  EXPECT_EQ(c.stats().cached_bytes, kBlob);
  EXPECT_EQ(c.stats().dirty_entries, 1u);
  // Back unchanged: readable again.
  EXPECT_FALSE(c.PutBack("a", 2, &*lent)) << "another version";
  ASSERT_TRUE(c.PutBack("a", 1, &*lent));
  EXPECT_FALSE(c.IsOut("a", 1));
  EXPECT_TRUE(c.CopyDirty("a", 1, out.data(), kBlob));
  EXPECT_EQ(out, std::string(kBlob, 'a'));
  // Lent, then a newer version replaces it: the lent buffer has no home.
  lent = c.LendDirty("a", 1);
  ASSERT_TRUE(lent.has_value());
  AlignedBuffer n = Blob();
  std::memset(n.data(), 'A', kBlob);
  ASSERT_TRUE(c.Offer("a", 2, &n, /*dirty=*/true, &released));
  EXPECT_FALSE(c.IsOut("a", 2));
  EXPECT_FALSE(c.PutBack("a", 1, &*lent));
  EXPECT_TRUE(c.CopyDirty("a", 2, out.data(), kBlob));
  EXPECT_EQ(out, std::string(kBlob, 'A'));
  EXPECT_EQ(c.stats().cached_bytes, kBlob);
}

// Through the store.
StoreOptions CachedOptions(const TempDir& dir, uint64_t cache) {
  StoreOptions o = TestStoreOptions(dir, {0.5, 0.5});
  o.cache_bytes = cache;
  return o;
}

absl::Status CommitNew(ObjectStore* s, const std::string& obj, uint64_t v) {
  auto l = s->Checkout(obj).get();
  if (!l.ok()) return l.status();
  FillFor(l->get(), v);
  Lease lease = std::move(*l);
  return s->Commit(std::move(lease), v).get();
}

uint64_t BytesRead(ObjectStore* s) {
  uint64_t n = 0;
  for (auto& c : s->PathTraffic()) n += c.bytes_read;
  return n;
}

TEST(StoreCacheTest, AHitIsTheCommittedVersionWithNoIo) {
  TempDir dir;
  auto s = ObjectStore::Open(CachedOptions(dir, 8 << 20));
  ASSERT_TRUE(s.ok()) << s.status();
  ASSERT_TRUE((*s)->Declare("a", TestLayout(100000)).ok());  // 1.2 MB
  for (uint64_t v = 1; v <= 3; ++v) {
    ASSERT_TRUE(CommitNew(s->get(), "a", v).ok());
    uint64_t before = BytesRead(s->get());
    auto l = (*s)->Checkout("a").get();
    ASSERT_TRUE(l.ok());
    EXPECT_EQ((*l)->version(), v);
    EXPECT_TRUE(Matches(**l, v));
    if (v > 1) {
      EXPECT_EQ(BytesRead(s->get()), before) << "a hit read the disk";
    }
  }
  CacheStats cs = (*s)->Stats().cache;
  EXPECT_EQ(cs.budget_bytes, 8u << 20);
  EXPECT_GE(cs.hits, 2u);
  // What the disk holds is the same version: a read-only view (no cache)
  // and verify agree.
  auto ro_opts = CachedOptions(dir, 8 << 20);
  ro_opts.read_only = true;
  auto ro = ObjectStore::Open(ro_opts);
  ASSERT_TRUE(ro.ok()) << ro.status();
  EXPECT_EQ((*ro)->Stats().cache.budget_bytes, 0u);
  auto d = (*ro)->Checkout("a").get();
  ASSERT_TRUE(d.ok());
  EXPECT_TRUE(Matches(**d, 3));
}

TEST(StoreCacheTest, AnUpdateBorrowsTheDirtyVersionAndNothingElseReadsIt) {
  TempDir dir;
  StoreOptions o = CachedOptions(dir, 8 << 20);
  o.durability = Durability::kTag;
  auto s = ObjectStore::Open(o);
  ASSERT_TRUE(s.ok()) << s.status();
  ASSERT_TRUE((*s)->Declare("a", TestLayout(100000)).ok());
  ASSERT_TRUE(CommitNew(s->get(), "a", 1).ok());  // dirty: only in DRAM
  ASSERT_TRUE((*s)->Tag("one").ok());
  ASSERT_TRUE(CommitNew(s->get(), "a", 2).ok());
  {
    auto lent = (*s)->Checkout("a", /*for_update=*/true).get();
    ASSERT_TRUE(lent.ok()) << lent.status();
    EXPECT_TRUE(Matches(**lent, 2));
    // While it is out: other checkouts and write-back say why they cannot.
    auto other = (*s)->Checkout("a").get();
    EXPECT_EQ(other.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_NE(other.status().message().find("checked out for an update"),
              std::string::npos) << other.status();
    absl::Status wb = (*s)->WriteBack();
    EXPECT_EQ(wb.code(), absl::StatusCode::kFailedPrecondition) << wb;
  }  // dropped without a commit: back, unchanged
  auto again = (*s)->Checkout("a").get();
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_TRUE(Matches(**again, 2));
  again->reset();
  // Borrowed, changed and committed: the newer version, no copy made.
  {
    auto lent = (*s)->Checkout("a", true).get();
    ASSERT_TRUE(lent.ok());
    FillFor(lent->get(), 3);
    Lease l = std::move(*lent);
    ASSERT_TRUE((*s)->Commit(std::move(l), 3).get().ok());
  }
  auto three = (*s)->Checkout("a").get();
  ASSERT_TRUE(three.ok());
  EXPECT_TRUE(Matches(**three, 3));
  three->reset();
  // A failed commit of a borrowed version loses it (its buffer may hold the
  // newer bytes): reads say so until a tag is restored.
  {
    auto lent = (*s)->Checkout("a", true).get();
    ASSERT_TRUE(lent.ok());
    FillFor(lent->get(), 9);
    Lease l = std::move(*lent);
    EXPECT_FALSE((*s)->Commit(std::move(l), 2).get().ok()) << "steps go back";
  }
  EXPECT_EQ((*s)->Checkout("a").get().status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_FALSE((*s)->Tag("lost").ok());
  ASSERT_TRUE((*s)->Restore("one").ok());
  auto one = (*s)->Checkout("a").get();
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_TRUE(Matches(**one, 1));
  one->reset();
  // A borrowed lease outliving its store is only freed.
  auto late = (*s)->Checkout("a", true).get();
  ASSERT_TRUE(late.ok());
  s->reset();
  late->reset();
}

TEST(StoreCacheTest, RestoreHeldLeasesAndDiskFaultsNeverServeStaleBytes) {
  TempDir dir;
  FaultInjectionFileSystem fsys;
  StoreOptions o = CachedOptions(dir, 8 << 20);
  o.fs = &fsys;
  auto s = ObjectStore::Open(o);
  ASSERT_TRUE(s.ok());
  ASSERT_TRUE((*s)->Declare("a", TestLayout(50000)).ok());
  ASSERT_TRUE(CommitNew(s->get(), "a", 1).ok());
  ASSERT_TRUE((*s)->Tag("t1").ok());
  ASSERT_TRUE(CommitNew(s->get(), "a", 2).ok());
  EXPECT_TRUE((*s)->cache_stats().entries == 1);
  // Restore: the head goes back to 1; the cached 2 must not be served.
  ASSERT_TRUE((*s)->Restore("t1").ok());
  auto l = (*s)->Checkout("a").get();
  ASSERT_TRUE(l.ok());
  EXPECT_EQ((*l)->version(), 1u);
  EXPECT_TRUE(Matches(**l, 1));
  // A lease the caller still holds at commit is not taken into the cache
  // (the caller could still write into it).
  FillFor(l->get(), 3);
  ASSERT_TRUE((*s)->Commit(*l, 3).get().ok());
  FillFor(l->get(), 99);  // scribbles after the commit
  l->reset();
  auto again = (*s)->Checkout("a").get();
  ASSERT_TRUE(again.ok());
  EXPECT_EQ((*again)->version(), 3u);
  EXPECT_TRUE(Matches(**again, 3));
  again->reset();
  // A disk that fails every read: a hit needs no read, a miss reports it.
  ASSERT_TRUE(CommitNew(s->get(), "a", 4).ok());
  fsys.FailWhile(FaultInjectionFileSystem::Op::kRead, EIO, "");
  auto hit = (*s)->Checkout("a").get();
  ASSERT_TRUE(hit.ok()) << hit.status();
  EXPECT_TRUE(Matches(**hit, 4));
  hit->reset();  // dropped without a commit: the entry is gone
  auto miss = (*s)->Checkout("a").get();
  EXPECT_FALSE(miss.ok());
  fsys.ClearFaults();
  auto back = (*s)->Checkout("a").get();
  ASSERT_TRUE(back.ok());
  EXPECT_TRUE(Matches(**back, 4));
}

TEST(StoreCacheTest, PercentOfStateAndBadBudgets) {
  TempDir dir;
  StoreOptions o = TestStoreOptions(dir, {0.5, 0.5});
  ASSERT_TRUE(ParseCacheBudget("25%", &o.cache_bytes, &o.cache_percent).ok());
  EXPECT_EQ(o.cache_percent, 25);
  auto s = ObjectStore::Open(o);
  ASSERT_TRUE(s.ok());
  ASSERT_TRUE((*s)->Declare("a", TestLayout(100000)).ok());
  ASSERT_TRUE((*s)->Declare("b", TestLayout(100000)).ok());
  EXPECT_EQ((*s)->cache_stats().budget_bytes,
            2 * TestLayout(100000).total_bytes() / 4);
  uint64_t b = 0;
  double p = 0;
  EXPECT_FALSE(ParseCacheBudget("120%", &b, &p).ok());
  EXPECT_FALSE(ParseCacheBudget("-5%", &b, &p).ok());
  EXPECT_FALSE(ParseCacheBudget("lots", &b, &p).ok());
  EXPECT_FALSE(ParseCacheBudget("nan%", &b, &p).ok());
  EXPECT_TRUE(ParseCacheBudget("512M", &b, &p).ok());
  EXPECT_EQ(b, 512u << 20);
  auto bad = ParseStoreOptions("cache = \"half\"\n", "/");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("cache"), std::string::npos);
  auto good = ParseStoreOptions(
      "cache = \"10%\"\n[[path]]\nroot = \"/tmp\"\n", "/");
  ASSERT_TRUE(good.ok()) << good.status();
  EXPECT_EQ(good->cache_percent, 10);
}

// Spill-over with the tier on: a full path's share goes to the other path,
// and what the cache hands out is still the committed version.
TEST(StoreCacheTest, SpillOverWithTheCacheOn) {
  TempDir dir;
  StoreOptions o = CachedOptions(dir, 4 << 20);
  o.paths[1].path.segment_bytes = 1 << 20;
  o.paths[1].path.capacity = 2 << 20;  // two segments: fills quickly
  o.durability = Durability::kTag;     // write-back too
  auto s = ObjectStore::Open(o);
  ASSERT_TRUE(s.ok()) << s.status();
  for (int i = 0; i < 6; ++i)
    ASSERT_TRUE((*s)->Declare("s" + std::to_string(i), TestLayout(100000)).ok());
  for (uint64_t v = 1; v <= 3; ++v)
    for (int i = 0; i < 6; ++i)
      ASSERT_TRUE(CommitNew(s->get(), "s" + std::to_string(i), v).ok())
          << "s" << i << " v" << v;
  ASSERT_TRUE((*s)->Tag("all").ok());  // writes the dirty ones back
  StoreStats st = (*s)->Stats();
  EXPECT_LE(st.paths[1].usage.used, 2u << 20);
  EXPECT_GT(st.paths[0].usage.used, st.paths[1].usage.used);
  for (int i = 0; i < 6; ++i) {
    auto l = (*s)->Checkout("s" + std::to_string(i)).get();
    ASSERT_TRUE(l.ok());
    EXPECT_EQ((*l)->step(), 3u);
    EXPECT_TRUE(Matches(**l, 3));
  }
  ExpectStoreVerifies(s->get());
}

uint64_t RssBytes() {
  std::ifstream in("/proc/self/statm");
  uint64_t pages = 0, rss = 0;
  in >> pages >> rss;
  return rss * static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
}

// The cache is the only large allocation: passes over a state four times
// its budget keep the resident set within budget + buffer pool + the blobs
// in flight + a fixed overhead (RocksDB, allocator).
TEST(StoreCacheTest, ResidentMemoryStaysWithinTheBudget) {
  TempDir dir;
  StoreOptions o = TestStoreOptions(dir, {0.5, 0.5});
  o.paths[0].path.segment_bytes = o.paths[1].path.segment_bytes = 64 << 20;
  const uint64_t cache = 24 << 20, pool = 8 << 20;
  o.cache_bytes = cache;
  o.buffer_pool_bytes = pool;
  auto s = ObjectStore::Open(o);
  ASSERT_TRUE(s.ok()) << s.status();
  const int kObjects = 40;
  const uint64_t blob = TestLayout(200000).total_bytes();  // 2.4 MB
  for (int i = 0; i < kObjects; ++i)
    ASSERT_TRUE((*s)->Declare("o" + std::to_string(i), TestLayout(200000)).ok());
  std::vector<std::string> order;  // declared, so the cache keeps some
  for (int pass = 1; pass <= 3; ++pass)
    for (int i = 0; i < kObjects; ++i) order.push_back("o" + std::to_string(i));
  (*s)->DeclareAccessOrder(order);
  uint64_t base = RssBytes(), peak = base;
  for (int pass = 1; pass <= 3; ++pass) {
    for (int i = 0; i < kObjects; ++i) {
      std::string name = "o" + std::to_string(i);
      ASSERT_TRUE(CommitNew(s->get(), name, pass).ok());
      peak = std::max(peak, RssBytes());
    }
  }
  CacheStats cs = (*s)->cache_stats();
  EXPECT_LE(cs.cached_bytes, cache);
  EXPECT_GT(cs.hits, 0u);
  const uint64_t overhead = 24 << 20;
  EXPECT_LE(peak - base, cache + pool + 2 * blob + overhead)
      << "state " << kObjects * blob << " bytes, cache " << cache;
}

}  // namespace
}  // namespace mlpo
