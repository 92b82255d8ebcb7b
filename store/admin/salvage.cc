#include "store/admin/salvage.h"

#include <set>
#include <string>
#include <utility>
#include <vector>

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
  std::set<VersionKey> keys;
  for (const ObjectInfo& i : view.List())
    if (i.has_head) keys.insert({i.name, i.head});
  for (auto& [t, objs] : view.Tags())
    for (auto& [obj, v] : objs) keys.insert({obj, v});
  std::set<VersionKey> bad;
  for (auto& [k, found] : view.CheckVersions(keys, progress)) {
    bad.insert(k);
    rep.bad.insert(rep.bad.end(), found.begin(), found.end());
  }
  rep.versions_checked = keys.size();

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
