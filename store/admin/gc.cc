#include "store/admin/gc.h"

#include <set>

#include "base/status_macros.h"

namespace mlpo {

absl::StatusOr<uint64_t> Gc(StoreMaintenance& store) {
  MLPO_RETURN_IF_ERROR(store.CheckWritable("gc"));
  // Every record is a candidate; the store keeps those still referenced
  // (checked under its lock, so a tag made meanwhile keeps its versions).
  std::set<VersionKey> all;
  for (const RecordOf& r : store.AllVersions())
    all.insert({r.object, r.rec.version});
  return store.DeleteVersions(all);
}

}  // namespace mlpo
