// Relocate (`mlpo relocate`): a moved or copied store becomes a store at
// its new place. The index and the descriptors record absolute roots (so
// that a tool opened on any of a store's directories finds the others);
// after a `mv`, `cp -a` or `cp -al` they name the old place, and opening
// is refused until the records are rewritten here. Works on a store that
// is not open.
//
// Layer store/admin: may include store/ and below.
#ifndef MLPO_STORE_ADMIN_RELOCATE_H_
#define MLPO_STORE_ADMIN_RELOCATE_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "store/admin/unshare.h"
#include "store/store_options.h"

namespace mlpo {

// What Relocate did.
struct RelocateReport {
  std::string old_uuid, new_uuid;  // equal unless given a new identity
  std::vector<std::string> old_roots, new_roots;
  std::string old_meta_dir, new_meta_dir;
  std::vector<bool> new_path_identity;  // per path: a new .mlpo/uuid
  // Files a hard-linked copy (`cp -al`) shared with the original, given an
  // inode of their own (Unshare), and the bytes copied to do it.
  std::vector<std::string> unshared_files;
  uint64_t unshared_bytes = 0;
};

// Makes a moved or copied store a store at its new place. `options`
// names the new roots and index (meta_dir), in the store's path order.
// Each new root must hold the store's directory with a descriptor of this
// store. The index's path records and every descriptor are rewritten to
// the new roots; when `new_identity` (a copy: the original is still
// there), the store gets a new uuid (index, descriptors, seal) and each
// root whose identity file is the original's a new one, so the copy and
// the original never mistake each other's directories. The index backups
// are refreshed. Files shared with another directory through hard links
// (a `cp -al` copy) are unshared first (store/admin/unshare.h; `progress`
// follows the copying). Takes the writer lock of the new index; the
// original is never opened or changed.
// The identities a kCopiedFromAttribute value lists, oldest first (the
// format Relocate writes: space-separated).
std::vector<std::string> CopiedFrom(absl::string_view attribute);

absl::StatusOr<RelocateReport> Relocate(
    const StoreOptions& options, bool new_identity,
    const UnshareProgress& progress = nullptr);

}  // namespace mlpo

#endif  // MLPO_STORE_ADMIN_RELOCATE_H_
