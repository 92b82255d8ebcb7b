// Gc (`mlpo gc`): deletes the version records no head or tag references
// any more (a dropped tag's; with the default retention a restore frees
// the old heads' versions itself) and frees their extents.
//
// Layer store/admin: may include store/ and below.
#ifndef MLPO_STORE_ADMIN_GC_H_
#define MLPO_STORE_ADMIN_GC_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "store/store_maintenance.h"

namespace mlpo {

// Returns the bytes freed. A version pinned by a reader meanwhile keeps its
// extents until the read ends; its record goes now. FailedPrecondition on
// a store opened read-only.
absl::StatusOr<uint64_t> Gc(StoreMaintenance& store);

}  // namespace mlpo

#endif  // MLPO_STORE_ADMIN_GC_H_
