// Recover (`mlpo recover`): makes a damaged store openable again
// (ObjectStore::RepairIndex: roll back, rebuild from a backup, forget a lost
// path, or discard), then reads every head and every tag back and says
// which are intact.
//
// Layer store/admin: may include store/ and below.
#ifndef MLPO_STORE_ADMIN_RECOVER_H_
#define MLPO_STORE_ADMIN_RECOVER_H_

#include "absl/status/statusor.h"
#include "store/object_store.h"

namespace mlpo {

// As ObjectStore::RepairIndex, then (unless the store was discarded) the
// store is opened and its heads and tags verified into the report's
// `objects`, `bad_heads` and `tags`.
absl::StatusOr<RecoverReport> Recover(const StoreOptions& options,
                                      bool discard, int lost_path = -1);

}  // namespace mlpo

#endif  // MLPO_STORE_ADMIN_RECOVER_H_
