// StoreMaintenance: the few writes maintenance makes, beside the reads of
// StoreView. store/admin/'s gc and tag copy (a tag's replica on another
// path) are written over it; ObjectStore implements it, privately (reached
// through a StoreMaintenance& only), so a training step never sees these.
//
// Each write keeps the store's invariants itself: extents written here are
// nobody's until RecordReplicas puts them in the index in one durable
// write (a crash before leaves them free space again); DeleteVersions
// re-checks under the store's lock that nothing references a version
// before its record goes. A tool over this interface can leave a store
// with less free space until it is reopened, never with a lost version.
//
// Thread-safety: as the implementation's (ObjectStore: thread-safe).
// Layer store/: may include base/ and store's own folders.
#ifndef MLPO_STORE_STORE_MAINTENANCE_H_
#define MLPO_STORE_STORE_MAINTENANCE_H_

#include <cstdint>
#include <set>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "store/meta/layout.h"
#include "store/store_view.h"

namespace mlpo {

// A version and the extents of a whole second copy of it.
struct ReplicaCopy {
  VersionKey version;
  std::vector<ExtentRef> extents;
};

class StoreMaintenance : public StoreView {
 public:
  // FailedPrecondition naming `what` when the store is open read-only.
  virtual absl::Status CheckWritable(absl::string_view what) const = 0;
  // Whether path `i` failed earlier in this open (degraded mode): nothing
  // more is written there until the store is reopened.
  virtual bool PathDegraded(size_t i) const = 0;

  // Writes `bytes` of `buf` to newly allocated extents on path `path`, each
  // with its checksum, and waits for the writes (not synced: SyncPath).
  // The extents are unrecorded: nothing references them until
  // RecordReplicas; FreeUnrecorded gives them back. ResourceExhausted when
  // the path is full; the path's I/O error otherwise (nothing stays
  // allocated after an error).
  virtual absl::StatusOr<std::vector<ExtentRef>> WriteUnrecorded(
      size_t path, const char* buf, uint64_t bytes) = 0;
  virtual absl::Status SyncPath(size_t path) = 0;
  virtual void FreeUnrecorded(const std::vector<ExtentRef>& extents) = 0;

  // Makes each copy the replica of its version, in one durable index write.
  // A version whose record went meanwhile is skipped and its copy freed; a
  // replica replaced is freed. Returns how many were recorded. On an error
  // nothing changes in memory and the copies stay allocated (the index
  // write may still have reached the disk: a reopen rebuilds free space
  // from what the index says).
  virtual absl::StatusOr<uint64_t> RecordReplicas(
      std::vector<ReplicaCopy> copies) = 0;

  // Deletes, in one durable index write, the record of each of `versions`
  // that no head, dirty version or tag references, and frees its extents
  // (a pinned version's when it is unpinned); referenced ones are left.
  // Returns the bytes freed.
  virtual absl::StatusOr<uint64_t> DeleteVersions(
      const std::set<VersionKey>& versions) = 0;

  // Copies the index into every path's store directory (meta-backup), so
  // that a lost index can be rebuilt with what maintenance recorded. A
  // failure is reported on stderr.
  virtual void BackupIndex() = 0;
};

}  // namespace mlpo

#endif  // MLPO_STORE_STORE_MAINTENANCE_H_
