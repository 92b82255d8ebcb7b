// Unshare (`mlpo unshare`): a store some of whose files other directories
// name too, through hard links (a copy made with `cp -al`, `cp -l` or
// `rsync --link-dest`), gets files of its own. The store writes its
// segments and its index seal in place, so while they are shared every
// write would change the other copy as well; a writable open refuses such
// a store (SharedStoreFiles in store/store_files.h) until this has run on
// one of the two. Relocate runs it on a copy. Works on a store that is not
// open.
//
// Layer store/admin: may include store/ and below.
#ifndef MLPO_STORE_ADMIN_UNSHARE_H_
#define MLPO_STORE_ADMIN_UNSHARE_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "store/fs/file_system.h"
#include "store/store_options.h"

namespace mlpo {

struct UnshareReport {
  std::vector<std::string> files;  // given an inode of their own
  uint64_t bytes = 0;              // copied to do it
};

// After each chunk copied: the file, its number (from 0) of `files`, and
// the bytes copied so far of `total`.
using UnshareProgress =
    std::function<void(const std::string& file, size_t i, size_t files,
                        uint64_t done, uint64_t total)>;

// Copies each shared file of the store `options` names (its roots and
// index as recorded: a moved or copied store is refused, relocate is for
// it) to a private file that replaces it; the other directory keeps the
// original inode. Takes the writer lock. Needs the shared bytes free on
// each file system; a full disk or any error leaves every file as it was or
// unshared, never torn, and running it again finishes the work.
absl::StatusOr<UnshareReport> Unshare(const StoreOptions& options,
                                      const UnshareProgress& progress);

// The same with the writer lock already held (by Relocate) and the roots
// not checked against the index: `o` names the store's files where they
// are now.
absl::StatusOr<UnshareReport> UnshareLocked(const StoreOptions& o,
                                            FileSystem* fs,
                                            const UnshareProgress& progress);

}  // namespace mlpo

#endif  // MLPO_STORE_ADMIN_UNSHARE_H_
