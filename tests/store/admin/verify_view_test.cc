// store/admin over the narrow view alone: Verify and CheckExtentMap run on
// a StoreView that is not a store (records and reads in memory), so their
// decisions are tested without a disk, and the view is all they need.
#include "store/admin/verify.h"

#include <map>
#include <set>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/test_util.h"

namespace mlpo {
namespace {

// Extents whose checksum is kBad read back bad.
constexpr uint64_t kBad = 0xbad;

class FakeView final : public StoreView {
 public:
  explicit FakeView(const std::string& dir) {
    options_.meta_dir = dir + "/meta";
    PathOptions po;
    po.root = dir;
    po.segment_bytes = 1 << 20;
    auto p = StoragePath::Open(po, "s/rank-0", /*create=*/true);
    EXPECT_TRUE(p.ok()) << p.status();
    path_ = std::move(*p);
  }
  const StoreOptions& options() const override { return options_; }
  FileSystem* fs() const override { return DefaultFileSystem(); }
  size_t num_paths() const override { return 1; }
  const StoragePath& path_at(size_t) const override { return *path_; }
  std::vector<RecordOf> AllVersions() const override { return records_; }
  absl::StatusOr<std::vector<RecordOf>> PinVersions(const std::string& tag,
                                                    bool and_tags) override {
    if (!tag.empty() && tag != "t")
      return absl::NotFoundError("no tag named " + tag);
    for (auto& r : records_) ++pins_[{r.object, r.rec.version}];
    return records_;
  }
  void UnpinVersion(const std::string& object, uint64_t version) override {
    --pins_[{object, version}];
  }
  void ReadCopy(const std::string& object, const VersionRecord& rec,
                char* buf, std::vector<BadExtent>* bad) override {
    ++reads_;
    // As the store's read: a replica stands in for a bad first copy.
    auto bad_in = [&](const std::vector<ExtentRef>& l) {
      std::vector<BadExtent> out;
      for (const ExtentRef& e : l)
        if (e.checksum == kBad)
          out.push_back(DescribeExtent(object, rec.version, e, "checksum",
                                       absl::StatusCode::kDataLoss));
      return out;
    };
    std::vector<BadExtent> first = bad_in(rec.extents);
    if (!first.empty() && !rec.replica.empty() && bad_in(rec.replica).empty())
      return;
    bad->insert(bad->end(), first.begin(), first.end());
  }
  BadExtent DescribeExtent(const std::string& object, uint64_t version,
                           const ExtentRef& e, const std::string& error,
                           absl::StatusCode code) const override {
    BadExtent b;
    b.object = object;
    b.version = version;
    b.path = path_->root();
    b.file_offset = e.offset;
    b.length = e.length;
    b.error = error;
    b.code = code;
    return b;
  }
  // Not used by Verify; as the store's: each version's bad extents.
  std::map<VersionKey, std::vector<BadExtent>> CheckVersions(
      const std::set<VersionKey>& keys,
      std::function<void(uint64_t, uint64_t)>) override {
    std::map<VersionKey, std::vector<BadExtent>> out;
    for (auto& r : records_)
      if (keys.count({r.object, r.rec.version})) {
        std::vector<BadExtent> bad;
        ReadCopy(r.object, r.rec, nullptr, &bad);
        if (!bad.empty()) out[{r.object, r.rec.version}] = bad;
      }
    return out;
  }
  std::vector<ObjectInfo> List() const override { return {}; }
  std::map<std::string, std::map<std::string, uint64_t>> Tags()
      const override {
    return {};
  }
  absl::StatusOr<VersionRecord> GetVersion(const std::string&,
                                           uint64_t) const override {
    return absl::NotFoundError("none");
  }
  const std::string& store_uuid() const override { return uuid_; }
  StoreStats Stats() const override { return {}; }
  absl::StatusOr<std::string> GetAttribute(const std::string&) const override {
    return absl::NotFoundError("none");
  }

  void Add(const std::string& object, uint64_t version,
           std::vector<ExtentRef> first, std::vector<ExtentRef> replica = {}) {
    RecordOf r;
    r.object = object;
    r.rec.version = version;
    r.rec.step = version;
    for (auto& e : first) r.rec.blob_bytes += e.length;
    r.rec.extents = std::move(first);
    r.rec.replica = std::move(replica);
    records_.push_back(std::move(r));
  }
  int pins(const std::string& o, uint64_t v) { return pins_[{o, v}]; }
  int reads() const { return reads_; }

 private:
  StoreOptions options_;
  std::unique_ptr<StoragePath> path_;
  std::vector<RecordOf> records_;
  std::map<std::pair<std::string, uint64_t>, int> pins_;
  std::string uuid_ = "fake";
  int reads_ = 0;
};

ExtentRef Ext(uint64_t offset, uint64_t length, uint64_t blob_offset,
              uint64_t checksum = 1) {
  ExtentRef e;
  e.offset = offset;
  e.length = length;
  e.blob_offset = blob_offset;
  e.checksum = checksum;
  return e;
}

TEST(VerifyOverAViewTest, EachCopyIsJudgedOnItsOwnAndEveryPinIsReturned) {
  TempDir dir;
  FakeView v(dir.path());
  v.Add("good", 1, {Ext(0, 4096, 0)});
  v.Add("covered", 2, {Ext(4096, 4096, 0, kBad)}, {Ext(8192, 4096, 0)});
  v.Add("lost", 3, {Ext(12288, 4096, 0, kBad)}, {Ext(16384, 4096, 0, kBad)});
  std::vector<std::pair<uint64_t, uint64_t>> progress;
  auto rep = Verify(v, "", [&](uint64_t d, uint64_t t) {
    progress.push_back({d, t});
  });
  ASSERT_TRUE(rep.ok()) << rep.status();
  EXPECT_EQ(rep->objects, 3u);
  EXPECT_EQ(rep->replicas, 2u);
  EXPECT_EQ(rep->bytes, 3u * 4096);
  // "covered": its first copy is bad, its replica whole: named, not lost.
  ASSERT_EQ(rep->covered.size(), 1u);
  EXPECT_EQ(rep->covered[0].object, "covered");
  // "lost": both copies bad, each named (the replica's with "replica: ").
  ASSERT_EQ(rep->bad.size(), 2u);
  std::multiset<std::string> errors;
  for (auto& b : rep->bad) {
    EXPECT_EQ(b.object, "lost");
    errors.insert(b.error);
  }
  EXPECT_EQ(errors, (std::multiset<std::string>{"checksum",
                                                "replica: checksum"}));
  // Every version pinned for the read is unpinned, once.
  for (auto [o, ver] : {std::pair<std::string, uint64_t>{"good", 1},
                        {"covered", 2}, {"lost", 3}})
    EXPECT_EQ(v.pins(o, ver), 0) << o;
  ASSERT_EQ(progress.size(), 3u);
  EXPECT_EQ(progress.back(), (std::pair<uint64_t, uint64_t>{3 * 4096, 3 * 4096}));
  // A tag the view does not know: its error, and nothing read.
  int reads = v.reads();
  auto none = Verify(v, "nope");
  EXPECT_EQ(none.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(v.reads(), reads);
}

TEST(VerifyOverAViewTest, TheExtentMapCheckNamesEachBrokenRecord) {
  TempDir dir;
  FakeView v(dir.path());
  // No segment file exists yet: every extent is past the end of its file.
  v.Add("a", 1, {Ext(0, 4096, 0)});
  auto bad = CheckExtentMap(v);
  ASSERT_EQ(bad.size(), 1u);
  EXPECT_NE(bad[0].error.find("missing or truncated"), std::string::npos)
      << bad[0].error;
  // Overlap, a gap in the blob and a segment boundary crossed, with
  // nothing on disk needed to see them (plus the missing file again).
  TempDir dir2;
  FakeView w(dir2.path());
  w.Add("x", 1, {Ext(0, 8192, 0)});
  w.Add("y", 2, {Ext(4096, 4096, 0)});                     // overlaps x
  w.Add("z", 3, {Ext(65536, 4096, 0), Ext(73728, 4096, 8192)});  // a gap
  w.Add("s", 4, {Ext((1 << 20) - 4096, 8192, 0)});        // crosses
  std::set<std::string> kinds;
  for (const BadExtent& b : CheckExtentMap(w)) {
    EXPECT_EQ(b.error.rfind("index: ", 0), 0u) << b.error;
    if (b.error.find("overlaps") != std::string::npos) kinds.insert("overlap:" + b.object);
    if (b.error.find("tile") != std::string::npos) kinds.insert("tile:" + b.object);
    if (b.error.find("boundary") != std::string::npos) kinds.insert("boundary:" + b.object);
  }
  EXPECT_TRUE(kinds.count("overlap:y")) << "overlap not found";
  EXPECT_TRUE(kinds.count("tile:z"));
  EXPECT_TRUE(kinds.count("boundary:s"));
  EXPECT_FALSE(kinds.count("tile:x"));
}

}  // namespace
}  // namespace mlpo
