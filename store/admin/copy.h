// CopyTagTo (`mlpo tag NAME --copy-to PATH`): a tag's whole second copy on
// a chosen path (a replica in each version record), so that the tag
// survives the loss of the data on the other paths (a node's NVMe).
//
// Layer store/admin: may include store/ and below.
#ifndef MLPO_STORE_ADMIN_COPY_H_
#define MLPO_STORE_ADMIN_COPY_H_

#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/statusor.h"
#include "store/store_maintenance.h"

namespace mlpo {

// What CopyTagTo did.
struct CopyReport {
  std::string tag, path_root;
  uint64_t copied = 0;   // versions given a copy on the path now
  uint64_t already = 0;  // versions that had a whole copy there already
  uint64_t bytes = 0;    // bytes written
  double seconds = 0;
  // The path's write bandwidth: its write cap, else what `mlpo profile
  // --store` measured; 0 when neither is known.
  double path_write_bps = 0;
  std::string bandwidth_source;  // "write_cap", "profile" or ""
};

// Gives every version in `tag` a whole second copy on path `path`: reads
// fall back to it when an extent of the first copy fails, `mlpo verify`
// checks both, and `mlpo recover --lost-path` promotes it. Versions whose
// first copy (or replica) is wholly on `path` already are skipped; a
// replica elsewhere is replaced. Blobs are read verified, written, the path
// synced, then recorded in one index write: a failure or a crash before
// that leaves the tag as it was (the new extents are free again). The
// index backups are refreshed. `progress(done_bytes, total_bytes)`.
// NotFound for an unknown tag; InvalidArgument for a path the store does
// not have; FailedPrecondition for a degraded path or a read-only store.
absl::StatusOr<CopyReport> CopyTagTo(
    StoreMaintenance& store, const std::string& tag, int path,
    std::function<void(uint64_t, uint64_t)> progress = nullptr);

}  // namespace mlpo

#endif  // MLPO_STORE_ADMIN_COPY_H_
