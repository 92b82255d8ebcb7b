#include "store/admin/salvage.h"

#include <set>
#include <string>
#include <utility>
#include <vector>

#include "base/aligned_buffer.h"
#include "base/status_macros.h"

namespace mlpo {

absl::StatusOr<SalvageReport> Salvage(
    const StoreOptions& options,
    std::function<void(uint64_t, uint64_t)> progress) {
  StoreOptions o = options;
  o.salvage = true;
  o.read_only = false;
  o.cache_bytes = 0;  // nothing dirty in DRAM: every decision is on disk
  o.cache_percent = 0;
  o.create_if_missing = false;
  MLPO_ASSIGN_OR_RETURN(std::unique_ptr<ObjectStore> s, ObjectStore::Open(o));
  StoreView& view = *s;
  SalvageReport rep;

  // Every version a head or a tag holds, read and checked once (a replica
  // stands in for a bad first copy).
  MLPO_ASSIGN_OR_RETURN(std::vector<RecordOf> todo,
                        view.PinVersions("", /*and_tags=*/true));
  uint64_t total = 0, done = 0;
  for (const RecordOf& r : todo) total += r.rec.blob_bytes;
  std::set<std::pair<std::string, uint64_t>> bad;
  for (const RecordOf& r : todo) {
    AlignedBuffer buf(r.rec.blob_bytes);
    std::vector<BadExtent> found;
    view.ReadCopy(r.object, r.rec, buf.data(), &found);
    view.UnpinVersion(r.object, r.rec.version);
    if (!found.empty()) {
      bad.insert({r.object, r.rec.version});
      rep.bad.insert(rep.bad.end(), found.begin(), found.end());
    }
    done += r.rec.blob_bytes;
    if (progress) progress(done, total);
  }
  rep.versions_checked = todo.size();

  // Tags whole; heads one by one. Records stay (for gc): nothing that
  // still reads is touched.
  for (auto& [t, objs] : s->Tags()) {
    bool intact = true;
    for (auto& [obj, v] : objs) intact &= !bad.count({obj, v});
    if (intact) {
      rep.kept_tags.push_back(t);
    } else {
      MLPO_RETURN_IF_ERROR(s->DropTag(t));
      rep.dropped_tags.push_back(t);
    }
  }
  std::set<std::string> drop;
  for (const ObjectInfo& i : s->List()) {
    if (!i.has_head) continue;
    if (bad.count({i.name, i.head})) {
      drop.insert(i.name);
      rep.dropped_heads.push_back(i.name);
    } else {
      ++rep.kept_heads;
    }
  }
  MLPO_RETURN_IF_ERROR(s->DropHeads(drop));
  // Room for new extents everywhere: the files come back (empty, or to
  // their full size); only dropped versions lay in what they lost.
  for (size_t p = 0; p < s->num_paths(); ++p) {
    StoragePath* path = s->path(p);
    for (auto& f : path->MissingSegments()) rep.repaired_segments.push_back(f);
    for (auto& f : path->ShortSegments()) rep.repaired_segments.push_back(f);
    MLPO_RETURN_IF_ERROR(path->RepairSegments());
  }
  s->BackupIndex();
  return rep;
}

}  // namespace mlpo
