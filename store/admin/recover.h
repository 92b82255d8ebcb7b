// Recover (`mlpo recover`): makes a damaged store openable again
// (RepairIndex: roll back, rebuild from a backup, forget a lost
// path, or discard), then reads every head and every tag back and says
// which are intact.
//
// Layer store/admin: may include store/ and below.
#ifndef MLPO_STORE_ADMIN_RECOVER_H_
#define MLPO_STORE_ADMIN_RECOVER_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "store/store_options.h"
#include "store/store_view.h"

namespace mlpo {

// What RepairIndex and Recover found and did.
struct RecoverReport {
  std::string meta_dir;
  // The index had lost acknowledged writes and was rolled back to its last
  // consistent point: index writes (acknowledged - recovered) are gone.
  bool rolled_back = false;
  uint64_t acknowledged_sequence = 0, recovered_sequence = 0;
  // The index was rebuilt from the backup in this directory (taken at the
  // last tag: heads are as they were then, later commits are gone); what
  // was there before is kept in damaged_index_kept.
  std::string rebuilt_from, damaged_index_kept;
  // The store's data was discarded (only with `discard`).
  bool discarded = false;
  // The index was what a creation killed half-way leaves, and no data was
  // stored: its leftovers were removed; the next open creates the store.
  bool creation_cut_short = false;
  uint64_t discarded_files = 0, discarded_bytes = 0;
  // With a lost path (`mlpo recover --lost-path`): versions whose first
  // copy was there and whose replica survives now read from the replica
  // (promoted); replicas that were there are forgotten; versions with no
  // copy elsewhere are gone, with the heads ("object@version") and the
  // tags (whole: never restored in part) that held them.
  int lost_path = -1;
  uint64_t promoted = 0, replicas_dropped = 0;
  std::vector<std::string> lost_heads;
  std::vector<std::pair<std::string, uint64_t>> lost_tags;  // tag, objects
  // After recovery (filled by admin Recover): the heads and every tag,
  // read back and checked.
  uint64_t objects = 0;
  std::vector<BadExtent> bad_heads;
  struct TagState {
    std::string name;
    uint64_t objects = 0, bad_extents = 0;
  };
  std::vector<TagState> tags;
};

// The index half of `mlpo recover` (Recover, below, reads everything
// back after it): an index behind its seal is rolled
// back to its last consistent point; an index that is gone or cannot be
// opened, or whose rollback lost tags, is rebuilt from the index backup
// taken at the last tag. Without a backup, a lost index cannot be
// re-indexed from its segments: FailedPrecondition, unless `discard`,
// which deletes the store's segments, descriptors, backups and index so
// that the next open starts afresh. Takes the writer lock.
// `lost_path` >= 0: that path's data is gone (a failed node-local device,
// replaced and mounted empty at the same root): the index forgets it, as
// RecoverReport says, and the path starts empty under a new identity.
// Refused while the path still holds the store's segment files.
absl::StatusOr<RecoverReport> RepairIndex(const StoreOptions& options,
                                          bool discard, int lost_path = -1);

// As RepairIndex, then (unless the store was discarded) the
// store is opened and its heads and tags verified into the report's
// `objects`, `bad_heads` and `tags`.
absl::StatusOr<RecoverReport> Recover(const StoreOptions& options,
                                      bool discard, int lost_path = -1);

}  // namespace mlpo

#endif  // MLPO_STORE_ADMIN_RECOVER_H_
