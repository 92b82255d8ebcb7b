// ObjectStore: the one read path. Every read of a version -- a checkout,
// ReadVersion, Verify, Restore's and Salvage's checks -- goes through
// ReadRecord (striped reads on every path, each extent verified on the
// hashing thread, a replica standing in for a bad first copy) and reports a
// bad extent through Describe / BadExtentStatus.
#include <atomic>
#include <future>

#include "absl/strings/str_cat.h"
#include "store/object_store.h"

#include <algorithm>

namespace mlpo {

BadExtent ObjectStore::DescribeExtent(const std::string& object, uint64_t version,
                                const ExtentRef& e, const std::string& error,
                                absl::StatusCode code) const {
  BadExtent b;
  b.object = object;
  b.version = version;
  const StoragePath* p = paths_[e.path].get();
  b.path = p->root();
  b.file = p->SegmentFile(e.offset);
  b.file_offset = p->SegmentOffset(e.offset);
  b.length = e.length;
  b.error = error;
  b.code = code;
  return b;
}

namespace {
// Empty when the read of `e` into `dst` succeeded and its checksum holds;
// otherwise what went wrong.
struct ExtentCheck {
  std::string error;  // empty: the extent is good
  absl::StatusCode code = absl::StatusCode::kOk;
};
ExtentCheck CheckExtent(const ExtentRef& e, const char* dst,
                        const absl::Status& read) {
  if (!read.ok()) return {std::string(read.message()), read.code()};
  uint64_t got = Checksum(dst, e.length);
  if (got == e.checksum) return {};
  return {absl::StrCat("checksum mismatch (stored ", absl::Hex(e.checksum),
                       ", read ", absl::Hex(got), ")"),
          absl::StatusCode::kDataLoss};
}

}  // namespace

uint64_t ObjectStore::NewestVersion(const std::string& object) const {
  MutexLock l(&mu_);
  auto it = objects_.find(object);
  if (it == objects_.end()) return 0;
  const uint64_t newer = std::max(it->second.pending, it->second.dirty);
  if (newer != 0) return newer;
  return it->second.has_head ? it->second.head : 0;
}

bool ObjectStore::Resident(const std::string& object) const {
  uint64_t v = NewestVersion(object);
  return cache_ != nullptr && v != 0 && cache_->Contains(object, v);
}

absl::Status BadExtentStatus(const BadExtent& b) {
  std::string msg = absl::StrCat("object ", b.object, " step ", b.step,
                                 " (version ", b.version, "): path ", b.path, " file ", b.file,
                                 " offset ", b.file_offset, " length ",
                                 b.length, ": ", b.error,
                                 "; `mlpo verify --deep STORE` names every "
                                 "damaged version, `mlpo recover --salvage "
                                 "STORE` keeps every tag and head that "
                                 "still reads");
  return absl::Status(b.code == absl::StatusCode::kOk
                          ? absl::StatusCode::kInternal
                          : b.code,
                      msg);
}

void ObjectStore::ReadRecord(const std::string& object,
                             const VersionRecord& rec, char* buf,
                             std::function<void(std::vector<BadExtent>)> done) {
  // Striped reads on every path at once; each extent is verified on the
  // hashing thread (not on a ring) as it lands; the last one reports.
  struct Pending {
    std::atomic<int> left;
    Mutex mu;
    std::vector<BadExtent> bad;
    std::function<void(std::vector<BadExtent>)> done;
  };
  if (!rec.replica.empty()) {
    // A failed extent of the first copy: the whole blob again from the
    // replica (`mlpo tag --copy-to`); only when both fail is it bad.
    VersionRecord second = rec;
    second.extents = rec.replica;
    second.replica.clear();
    VersionRecord first = rec;
    first.replica.clear();
    ReadRecord(object, first, buf,
               [this, object, second, buf,
                done = std::move(done)](std::vector<BadExtent> bad) mutable {
                 if (bad.empty()) return done({});
                 ReadRecord(object, second, buf,
                            [first_bad = std::move(bad),
                             done = std::move(done)](
                                std::vector<BadExtent> bad2) mutable {
                              if (bad2.empty()) return done({});
                              first_bad.insert(first_bad.end(), bad2.begin(),
                                               bad2.end());
                              done(std::move(first_bad));
                            });
               });
    return;
  }
  auto pending = std::make_shared<Pending>();
  pending->left = static_cast<int>(rec.extents.size());
  pending->done = std::move(done);
  if (rec.extents.empty()) {
    pending->done({});
    return;
  }
  for (const ExtentRef& e : rec.extents) {
    char* dst = buf + e.blob_offset;
    paths_[e.path]->Read(
        {e.offset, e.length}, dst,
        [this, e, dst, object, pending, v = rec.version,
         step = rec.step](const absl::Status& s) {
          hasher_->Post([this, e, dst, object, pending, v, step, s] {
            ExtentCheck c = CheckExtent(e, dst, s);
            if (!c.error.empty()) {
              BadExtent b = DescribeExtent(object, v, e, c.error, c.code);
              b.step = step;
              MutexLock l(&pending->mu);
              pending->bad.push_back(std::move(b));
            }
            if (pending->left.fetch_sub(1) != 1) return;
            std::vector<BadExtent> bad;
            {
              MutexLock l(&pending->mu);
              bad.swap(pending->bad);
            }
            pending->done(std::move(bad));
          });
        });
  }
}

void ObjectStore::ReadCopy(const std::string& object,
                              const VersionRecord& rec, char* buf,
                              std::vector<BadExtent>* bad) {
  std::promise<std::vector<BadExtent>> p;
  auto f = p.get_future();
  ReadRecord(object, rec, buf,
             [&p](std::vector<BadExtent> b) { p.set_value(std::move(b)); });
  std::vector<BadExtent> found = f.get();
  bad->insert(bad->end(), found.begin(), found.end());
}

std::map<ObjectStore::VKey, std::vector<BadExtent>> ObjectStore::CheckVersions(
    const std::set<VKey>& keys,
    std::function<void(uint64_t, uint64_t)> progress) {
  std::vector<std::pair<VKey, VersionRecord>> todo;
  {
    MutexLock l(&mu_);
    for (const VKey& k : keys) {
      VersionState& vs = versions_[k];
      ++vs.pins;
      todo.emplace_back(k, vs.rec);
    }
  }
  uint64_t total = 0, done = 0;
  for (auto& [k, rec] : todo) total += rec.blob_bytes;
  std::map<VKey, std::vector<BadExtent>> bad;
  for (auto& [k, rec] : todo) {
    AlignedBuffer buf = pool_->Get(rec.blob_bytes);
    std::vector<BadExtent> found;
    ReadCopy(k.first, rec, buf.data(), &found);  // replica fallback
    pool_->Put(std::move(buf));
    Unpin(k);
    if (!found.empty()) bad[k] = std::move(found);
    done += rec.blob_bytes;
    if (progress) progress(done, total);
  }
  return bad;
}

// StoreView: what store/admin reads through (ReadCopy, DescribeExtent
// and CheckVersions are the read path's own, above).

std::vector<RecordOf> ObjectStore::AllVersions() const {
  std::vector<RecordOf> out;
  MutexLock l(&mu_);
  out.reserve(versions_.size());
  for (auto& [key, vs] : versions_) out.push_back({key.first, vs.rec});
  return out;
}

absl::StatusOr<std::vector<RecordOf>> ObjectStore::PinVersions(
    const std::string& tag, bool and_tags) {
  MutexLock l(&mu_);
  std::set<VKey> keys;
  if (tag.empty()) {
    for (auto& [obj, st] : objects_)
      if (st.has_head) keys.insert({obj, st.head});
    if (and_tags)
      for (auto& [t, objs] : tags_)
        for (auto& [obj, v] : objs) keys.insert({obj, v});
  } else {
    auto t = tags_.find(tag);
    if (t == tags_.end())
      return absl::NotFoundError(absl::StrCat("no tag named ", tag));
    for (auto& [obj, v] : t->second) keys.insert({obj, v});
  }
  std::vector<RecordOf> out;
  for (auto& k : keys) {
    VersionState& vs = versions_[k];
    ++vs.pins;
    out.push_back({k.first, vs.rec});
  }
  return out;
}

void ObjectStore::UnpinVersion(const std::string& object, uint64_t version) {
  Unpin({object, version});
}

}  // namespace mlpo
