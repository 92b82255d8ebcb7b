// ObjectStore::Salvage (`mlpo recover --salvage`): after data was lost (a
// deleted or truncated segment file, extents that fail their checksum),
// keep every tag and head that still reads back whole and drop the rest.
#include <set>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "store/object_store.h"

namespace mlpo {

absl::StatusOr<SalvageReport> ObjectStore::Salvage(
    const StoreOptions& options,
    std::function<void(uint64_t, uint64_t)> progress) {
  StoreOptions o = options;
  o.salvage = true;
  o.read_only = false;
  o.cache_bytes = 0;  // nothing dirty in DRAM: every decision is on disk
  o.cache_percent = 0;
  o.create_if_missing = false;
  MLPO_ASSIGN_OR_RETURN(std::unique_ptr<ObjectStore> s, Open(o));
  SalvageReport rep;

  // Every version a head or a tag holds, read and checked once.
  std::set<VKey> keys;
  {
    MutexLock l(&s->mu_);
    for (auto& [obj, st] : s->objects_)
      if (st.has_head) keys.insert({obj, st.head});
    for (auto& [t, objs] : s->tags_)
      for (auto& [obj, v] : objs) keys.insert({obj, v});
  }
  std::set<VKey> bad;
  for (auto& [k, found] : s->CheckVersions(keys, progress)) {
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
      MLPO_RETURN_IF_ERROR(s->DropTagImpl(t));
      rep.dropped_tags.push_back(t);
    }
  }
  {
    MutexLock l(&s->mu_);
    MetaIndex::Batch b = s->meta_->NewBatch();
    std::map<VKey, int> dec;
    for (auto& [obj, st] : s->objects_) {
      if (!st.has_head) continue;
      if (!bad.count({obj, st.head})) {
        ++rep.kept_heads;
        continue;
      }
      b.DeleteHead(obj);
      dec[{obj, st.head}] += 1;
      rep.dropped_heads.push_back(obj);
    }
    if (!dec.empty()) {
      std::vector<ExtentRef> none;
      MLPO_RETURN_IF_ERROR(s->ApplyRefChanges(&b, dec, /*free_now=*/false,
                                              /*sync=*/true, &none));
      for (const std::string& obj : rep.dropped_heads) {
        ObjectState& st = s->objects_[obj];
        st.has_head = false;
        st.head = st.head_step = 0;
      }
    }
  }
  // Room for new extents everywhere: the files come back (empty, or to
  // their full size); only dropped versions lay in what they lost.
  for (auto& p : s->paths_) {
    for (auto& f : p->MissingSegments()) rep.repaired_segments.push_back(f);
    for (auto& f : p->ShortSegments()) rep.repaired_segments.push_back(f);
    MLPO_RETURN_IF_ERROR(p->RepairSegments());
  }
  s->BackupIndex();
  return rep;
}

}  // namespace mlpo
