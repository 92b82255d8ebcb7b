// ObjectStore::CopyTagTo: a tag's second copy on a chosen path (see
// object_store.h).
#include <atomic>
#include <future>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/status_macros.h"
#include "nlohmann/json.hpp"
#include "store/checksum/checksum.h"
#include "store/object_store.h"

namespace mlpo {

namespace {

bool AllOn(const std::vector<ExtentRef>& list, int path) {
  if (list.empty()) return false;
  for (const ExtentRef& e : list)
    if (static_cast<int>(e.path) != path) return false;
  return true;
}

}  // namespace

absl::StatusOr<CopyReport> ObjectStore::CopyTagTo(
    const std::string& tag, int path,
    std::function<void(uint64_t, uint64_t)> progress) {
  MLPO_RETURN_IF_ERROR(CheckWritable("tag --copy-to"));
  if (path < 0 || static_cast<size_t>(path) >= paths_.size())
    return absl::InvalidArgumentError(absl::StrCat(
        "copy of tag ", tag, ": path ", path, " does not exist; the store has ",
        paths_.size(), " (0..", paths_.size() - 1, ")"));
  StoragePath* target = paths_[path].get();
  const std::string where =
      absl::StrCat("copy of tag ", tag, " to ", target->root());
  if (placement_->degraded(path))
    return absl::FailedPreconditionError(
        absl::StrCat(where, ": the path failed earlier (degraded mode); "
                            "reopen the store once it is repaired"));
  CopyReport rep;
  rep.tag = tag;
  rep.path_root = target->root();
  struct Item {
    std::string object;
    VersionRecord rec;
    std::vector<ExtentRef> copy;  // written on `path`
  };
  std::vector<Item> todo;
  {
    MutexLock l(&mu_);
    auto t = tags_.find(tag);
    if (t == tags_.end())
      return absl::NotFoundError(absl::StrCat("no tag named ", tag));
    for (auto& [obj, v] : t->second) {
      VersionState& vs = versions_[{obj, v}];
      if (vs.rec.extents.empty()) continue;  // nothing stored
      if (AllOn(vs.rec.extents, path) || AllOn(vs.rec.replica, path)) {
        ++rep.already;
        continue;
      }
      ++vs.pins;  // kept (not freed) while copied
      todo.push_back({obj, vs.rec, {}});
    }
  }
  auto unpin_all = [&] {
    for (Item& it : todo) Unpin({it.object, it.rec.version});
  };
  auto free_copies = [&] {
    for (Item& it : todo) FreeExtents(it.copy);
  };
  uint64_t total = 0;
  for (Item& it : todo) total += it.rec.blob_bytes;
  const absl::Time t0 = absl::Now();
  absl::Status st;
  for (Item& it : todo) {
    AlignedBuffer buf = pool_->Get(it.rec.blob_bytes);
    std::vector<BadExtent> bad;
    ReadCopy(it.object, it.rec, buf.data(), &bad);  // verified
    if (!bad.empty()) {
      st = BadExtentStatus(bad.front());
      pool_->Put(std::move(buf));
      break;
    }
    auto ranges = target->Allocate(it.rec.blob_bytes);
    if (!ranges.ok()) {
      st = ranges.status();
      pool_->Put(std::move(buf));
      break;
    }
    uint64_t blob_off = 0;
    for (const Range& r : *ranges)
      for (uint64_t o = 0; o < r.length; o += options_.extent_bytes) {
        ExtentRef e;
        e.path = static_cast<uint32_t>(path);
        e.offset = r.offset + o;
        e.length = std::min(options_.extent_bytes, r.length - o);
        e.blob_offset = blob_off;
        e.checksum = Checksum(buf.data() + blob_off, e.length);
        blob_off += e.length;
        it.copy.push_back(e);
      }
    // Every extent in flight at once; wait for the last.
    struct Wait {
      std::atomic<int> left;
      Mutex mu;
      absl::Status error;
      std::promise<void> done;
    } w;
    w.left = static_cast<int>(it.copy.size());
    for (const ExtentRef& e : it.copy)
      target->Write({e.offset, e.length}, buf.data() + e.blob_offset,
                    [&w](const absl::Status& s) {
                      if (!s.ok()) {
                        MutexLock l(&w.mu);
                        if (w.error.ok()) w.error = s;
                      }
                      if (w.left.fetch_sub(1) == 1) w.done.set_value();
                    });
    w.done.get_future().wait();
    pool_->Put(std::move(buf));
    {
      MutexLock l(&w.mu);
      st = w.error;
    }
    if (!st.ok()) break;
    rep.bytes += it.rec.blob_bytes;
    if (progress) progress(rep.bytes, total);
  }
  if (st.ok()) st = target->Sync();
  if (!st.ok()) {
    free_copies();
    unpin_all();
    return Annotate(st, where + " (nothing recorded; the tag is as it was)");
  }
  // One index write records every copy.
  std::vector<ExtentRef> to_free;
  {
    MutexLock l(&mu_);
    MetaIndex::Batch b = meta_->NewBatch();
    std::vector<Item*> live;
    for (Item& it : todo) {
      auto v = versions_.find({it.object, it.rec.version});
      if (v == versions_.end() || v->second.deleted) continue;  // dropped
      VersionRecord r = v->second.rec;
      r.replica = it.copy;
      b.PutVersion(it.object, r);
      live.push_back(&it);
    }
    if (!b.empty()) st = meta_->Apply(&b, true);
    if (st.ok()) {
      for (Item* it : live) {
        VersionRecord& r = versions_[{it->object, it->rec.version}].rec;
        to_free.insert(to_free.end(), r.replica.begin(), r.replica.end());
        r.replica = std::move(it->copy);  // now the record's, freed with it
        it->copy.clear();
        ++rep.copied;
      }
    }
  }
  if (st.ok()) {
    free_copies();  // of versions dropped meanwhile
  }
  // A failed index write may still have reached the disk: the copies stay
  // allocated until the reopen rebuilds free space from the index (which
  // is poisoned meanwhile, so nothing else is written).
  unpin_all();
  if (!st.ok())
    return Annotate(st, where + " (the index write failed: the copy is "
                               "recorded or not as the index says after a "
                               "reopen)");
  FreeExtents(to_free);  // replicas replaced
  BackupIndex();  // backups on every path know the copy
  rep.seconds = absl::ToDoubleSeconds(absl::Now() - t0);
  if (target->options().write_cap > 0) {
    rep.path_write_bps = static_cast<double>(target->options().write_cap);
    rep.bandwidth_source = "write_cap";
  } else {
    MutexLock l(&mu_);
    auto bw = attributes_.find(kBandwidthAttribute);
    if (bw != attributes_.end()) {
      try {
        auto j = nlohmann::json::parse(bw->second);
        if (static_cast<size_t>(path) < j.size()) {
          rep.path_write_bps = j[path].at("write_bps").get<double>();
          rep.bandwidth_source = "profile";
        }
      } catch (const std::exception&) {
        // No usable figure: the rate is reported alone.
      }
    }
  }
  return rep;
}

}  // namespace mlpo
