// ObjectStore's StoreMaintenance writes (see store/store_maintenance.h):
// what store/admin/'s tag copy and gc change in the store.
#include <algorithm>
#include <atomic>
#include <future>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "store/checksum/checksum.h"
#include "store/object_store.h"

namespace mlpo {

absl::StatusOr<std::vector<ExtentRef>> ObjectStore::WriteUnrecorded(
    size_t path, const char* buf, uint64_t bytes) {
  MLPO_RETURN_IF_ERROR(CheckWritable("write a copy"));
  if (path >= paths_.size())
    return absl::InvalidArgumentError(absl::StrCat(
        Where(), ": path ", path, " does not exist; the store has ",
        paths_.size()));
  StoragePath* target = paths_[path].get();
  MLPO_ASSIGN_OR_RETURN(std::vector<Range> ranges, target->Allocate(bytes));
  std::vector<ExtentRef> out;
  uint64_t blob_off = 0;
  for (const Range& r : ranges)
    for (uint64_t o = 0; o < r.length; o += options_.extent_bytes) {
      ExtentRef e;
      e.path = static_cast<uint32_t>(path);
      e.offset = r.offset + o;
      e.length = std::min(options_.extent_bytes, r.length - o);
      e.blob_offset = blob_off;
      e.checksum = Checksum(buf + blob_off, e.length);
      blob_off += e.length;
      out.push_back(e);
    }
  // Every extent in flight at once; wait for the last.
  struct Wait {
    std::atomic<int> left;
    Mutex mu;
    absl::Status error;
    std::promise<void> done;
  } w;
  w.left = static_cast<int>(out.size());
  std::future<void> all = w.done.get_future();
  for (const ExtentRef& e : out)
    target->Write({e.offset, e.length}, buf + e.blob_offset,
                  [&w](const absl::Status& s) {
                    if (!s.ok()) {
                      MutexLock l(&w.mu);
                      if (w.error.ok()) w.error = s;
                    }
                    if (w.left.fetch_sub(1) == 1) w.done.set_value();
                  });
  if (!out.empty()) all.wait();
  absl::Status st;
  {
    MutexLock l(&w.mu);
    st = w.error;
  }
  if (!st.ok()) {
    FreeExtents(out);
    return st;
  }
  return out;
}

absl::Status ObjectStore::SyncPath(size_t path) {
  if (path >= paths_.size())
    return absl::InvalidArgumentError(
        absl::StrCat(Where(), ": path ", path, " does not exist"));
  return paths_[path]->Sync();
}

absl::StatusOr<uint64_t> ObjectStore::RecordReplicas(
    std::vector<ReplicaCopy> copies) {
  MLPO_RETURN_IF_ERROR(CheckWritable("record replicas"));
  std::vector<ExtentRef> to_free;  // replaced replicas, dropped versions' copies
  uint64_t recorded = 0;
  {
    MutexLock l(&mu_);
    MetaIndex::Batch b = meta_->NewBatch();
    std::vector<ReplicaCopy*> live;
    for (ReplicaCopy& c : copies) {
      auto v = versions_.find(c.version);
      if (v == versions_.end() || v->second.deleted) continue;  // dropped
      VersionRecord r = v->second.rec;
      r.replica = c.extents;
      b.PutVersion(c.version.first, r);
      live.push_back(&c);
    }
    if (!b.empty()) MLPO_RETURN_IF_ERROR(meta_->Apply(&b, true));
    for (ReplicaCopy* c : live) {
      VersionRecord& r = versions_[c->version].rec;
      to_free.insert(to_free.end(), r.replica.begin(), r.replica.end());
      r.replica = std::move(c->extents);  // now the record's, freed with it
      c->extents.clear();
      ++recorded;
    }
  }
  for (const ReplicaCopy& c : copies)  // versions dropped meanwhile
    to_free.insert(to_free.end(), c.extents.begin(), c.extents.end());
  FreeExtents(to_free);
  return recorded;
}

absl::StatusOr<uint64_t> ObjectStore::DeleteVersions(
    const std::set<VersionKey>& versions) {
  MLPO_RETURN_IF_ERROR(CheckWritable("gc"));
  std::vector<ExtentRef> to_free;
  uint64_t freed = 0;
  {
    MutexLock l(&mu_);
    MetaIndex::Batch b = meta_->NewBatch();
    std::vector<VKey> garbage;
    for (const VKey& k : versions) {
      auto v = versions_.find(k);
      if (v == versions_.end() || v->second.refs != 0 || v->second.deleted)
        continue;
      b.DeleteVersion(k.first, k.second);
      garbage.push_back(k);
    }
    if (garbage.empty()) return 0;
    MLPO_RETURN_IF_ERROR(meta_->Apply(&b, true, /*maintenance=*/true));
    for (auto& k : garbage) {
      VersionState& vs = versions_[k];
      vs.deleted = true;
      if (vs.pins > 0) continue;  // freed by the last Unpin
      std::vector<ExtentRef> all = vs.rec.AllExtents();
      for (auto& e : all) freed += e.length;
      to_free.insert(to_free.end(), all.begin(), all.end());
      versions_.erase(k);
    }
  }
  FreeExtents(to_free);
  return freed;
}

}  // namespace mlpo
