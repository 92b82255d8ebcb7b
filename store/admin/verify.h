// Verify and the extent-map check (`mlpo verify [--deep]`): maintenance
// that reads a store through StoreView and changes nothing.
//
// Layer store/admin: may include store/ and below; nothing in store/
// includes it.
#ifndef MLPO_STORE_ADMIN_VERIFY_H_
#define MLPO_STORE_ADMIN_VERIFY_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "store/store_view.h"

namespace mlpo {

struct VerifyReport {
  uint64_t objects = 0, extents = 0, bytes = 0;
  uint64_t replicas = 0;  // versions with a second copy (tag --copy-to)
  std::vector<BadExtent> bad;
  // Extents of a first copy that failed while the version's replica read
  // back whole: the version is readable, from the replica only.
  std::vector<BadExtent> covered;
  // Read-only opens only: extents that failed while a writer replaced their
  // version (the index, re-read after the failure, no longer has it as the
  // head or in the tag). Not corruption.
  std::vector<BadExtent> superseded;
  // Segment files that are gone, or shorter than their segment size (a
  // read-only open looks past them; `deep` reads every version any head or
  // tag holds, so that each one they cost is named).
  std::vector<std::string> missing_segments, short_segments;
  // The live index's files failing their block checksums (RocksDB's
  // VerifyChecksum: blocks no lookup happened to read, too). Data loss.
  std::vector<std::string> index_problems;
  // `deep`: each path's index backup (meta-backup) that does not open or
  // fails its checksums. Nothing lost while the index holds, but the copy
  // `mlpo recover` would rebuild it from is bad (exit 3, like a replica).
  std::vector<std::string> backup_problems;
};

// Reads every extent of every head (or of `tag`) and checks its checksum.
// `progress(done_bytes, total_bytes)` is called as it goes. `deep` first
// runs CheckExtentMap, then reads every version any head or tag holds, so
// that every bad extent is named. A version whose first copy fails while
// its replica reads back whole is `covered`, not bad. On a read-only view
// beside a writer, a version the writer replaced while it was read is
// `superseded`, not bad (the index is read again to tell).
absl::StatusOr<VerifyReport> Verify(
    StoreView& store, const std::string& tag = "",
    std::function<void(uint64_t, uint64_t)> progress = nullptr,
    bool deep = false);

// Files and directories of the store (each path's store directory and
// .mlpo, the index, its backups) owned by another user than the store's
// first path directory, each with the `chown` that gives it back: a command
// run as root left them, and the job cannot write them (its open or a step
// fails "Permission denied"). Nothing is lost. A walk of the store's
// directories, apart from Verify (which recover runs once per tag).
std::vector<std::string> ForeignOwnedFiles(const StoreView& store);

// The live index itself, every block (RocksDB's VerifyChecksum: a flipped
// byte in a block no lookup reads, too), through a read-only open; a
// failure counts only three times over (beside a writer a compaction may
// delete a file under the reader). DataLoss or the open's error.
absl::Status CheckLiveIndex(const StoreView& store);

// The index checked against the data, without reading extents: every
// extent of every version record (heads, tags, and records awaiting gc)
// lies inside one segment file that exists and is long enough, a record's
// extents tile its blob exactly, and no two records' extents overlap. Each
// problem is a BadExtent (DataLoss, error "index: ...").
std::vector<BadExtent> CheckExtentMap(const StoreView& store);

}  // namespace mlpo

#endif  // MLPO_STORE_ADMIN_VERIFY_H_
