#include "store/admin/copy.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/aligned_buffer.h"
#include "base/status_macros.h"
#include "nlohmann/json.hpp"
#include "store/object_store.h"  // kBandwidthAttribute

namespace mlpo {
namespace {

bool AllOn(const std::vector<ExtentRef>& list, int path) {
  if (list.empty()) return false;
  for (const ExtentRef& e : list)
    if (static_cast<int>(e.path) != path) return false;
  return true;
}

// The path's write rate: its cap, else what `mlpo profile --store` stored.
void PathWriteRate(const StoreMaintenance& store, int path, CopyReport* rep) {
  uint64_t cap = store.path_at(path).options().write_cap;
  if (cap > 0) {
    rep->path_write_bps = static_cast<double>(cap);
    rep->bandwidth_source = "write_cap";
    return;
  }
  auto bw = store.GetAttribute(kBandwidthAttribute);
  if (!bw.ok()) return;
  try {
    auto j = nlohmann::json::parse(*bw);
    if (static_cast<size_t>(path) < j.size()) {
      rep->path_write_bps = j[path].at("write_bps").get<double>();
      rep->bandwidth_source = "profile";
    }
  } catch (const std::exception&) {
    // No usable figure: the rate is reported alone.
  }
}

}  // namespace

absl::StatusOr<CopyReport> CopyTagTo(
    StoreMaintenance& store, const std::string& tag, int path,
    std::function<void(uint64_t, uint64_t)> progress) {
  MLPO_RETURN_IF_ERROR(store.CheckWritable("tag --copy-to"));
  const size_t n = store.num_paths();
  if (path < 0 || static_cast<size_t>(path) >= n)
    return absl::InvalidArgumentError(absl::StrCat(
        "copy of tag ", tag, ": path ", path, " does not exist; the store has ",
        n, " (0..", n - 1, ")"));
  const std::string& root = store.path_at(path).root();
  const std::string where = absl::StrCat("copy of tag ", tag, " to ", root);
  if (store.PathDegraded(path))
    return absl::FailedPreconditionError(
        absl::StrCat(where, ": the path failed earlier (degraded mode); "
                            "reopen the store once it is repaired"));
  CopyReport rep;
  rep.tag = tag;
  rep.path_root = root;
  // Every version of the tag stays allocated while it is copied.
  MLPO_ASSIGN_OR_RETURN(std::vector<RecordOf> pinned,
                        store.PinVersions(tag, /*and_tags=*/false));
  std::vector<RecordOf> todo;
  for (RecordOf& r : pinned) {
    bool skip = r.rec.extents.empty();  // nothing stored
    if (!skip && (AllOn(r.rec.extents, path) || AllOn(r.rec.replica, path))) {
      ++rep.already;
      skip = true;
    }
    if (skip)
      store.UnpinVersion(r.object, r.rec.version);
    else
      todo.push_back(std::move(r));
  }
  std::vector<ReplicaCopy> copies;
  auto unpin_all = [&] {
    for (const RecordOf& r : todo) store.UnpinVersion(r.object, r.rec.version);
  };
  uint64_t total = 0;
  for (const RecordOf& r : todo) total += r.rec.blob_bytes;
  const absl::Time t0 = absl::Now();
  absl::Status st;
  for (const RecordOf& r : todo) {
    AlignedBuffer buf(r.rec.blob_bytes);
    std::vector<BadExtent> bad;
    store.ReadCopy(r.object, r.rec, buf.data(), &bad);  // verified
    if (!bad.empty()) {
      st = BadExtentStatus(bad.front());
      break;
    }
    auto written = store.WriteUnrecorded(path, buf.data(), r.rec.blob_bytes);
    if (!written.ok()) {
      st = written.status();
      break;
    }
    copies.push_back({{r.object, r.rec.version}, std::move(*written)});
    rep.bytes += r.rec.blob_bytes;
    if (progress) progress(rep.bytes, total);
  }
  if (st.ok()) st = store.SyncPath(path);
  if (!st.ok()) {
    for (const ReplicaCopy& c : copies) store.FreeUnrecorded(c.extents);
    unpin_all();
    return Annotate(st, where + " (nothing recorded; the tag is as it was)");
  }
  // One index write records every copy.
  auto recorded = store.RecordReplicas(std::move(copies));
  unpin_all();
  if (!recorded.ok())
    return Annotate(recorded.status(),
                    where + " (the index write failed: the copy is recorded "
                            "or not as the index says after a reopen)");
  rep.copied = *recorded;
  store.BackupIndex();  // backups on every path know the copy
  rep.seconds = absl::ToDoubleSeconds(absl::Now() - t0);
  PathWriteRate(store, path, &rep);
  return rep;
}

}  // namespace mlpo
