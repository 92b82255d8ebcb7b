#include "store/admin/recover.h"

#include "base/status_macros.h"
#include "store/admin/verify.h"
#include "store/object_store.h"

namespace mlpo {

absl::StatusOr<RecoverReport> Recover(const StoreOptions& options,
                                      bool discard, int lost_path) {
  MLPO_ASSIGN_OR_RETURN(RecoverReport rep,
                        RepairIndex(options, discard, lost_path));
  // Nothing to read back: the store was discarded, or its creation was
  // cut short and its leftovers are gone (the next open creates it).
  if (rep.discarded || rep.creation_cut_short) return rep;
  StoreOptions o = options;
  o.create_if_missing = false;
  MLPO_ASSIGN_OR_RETURN(auto store, ObjectStore::Open(o));
  MLPO_ASSIGN_OR_RETURN(VerifyReport heads, Verify(*store));
  rep.objects = heads.objects;
  rep.bad_heads = heads.bad;
  for (auto& [name, objs] : store->Tags()) {
    MLPO_ASSIGN_OR_RETURN(VerifyReport t, Verify(*store, name));
    rep.tags.push_back({name, t.objects, t.bad.size()});
  }
  return rep;
}

}  // namespace mlpo
