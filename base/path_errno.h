// base/path_errno.h -- the Status of a failed system call on a path, with
// the owner of what refused it when the cause is a permission.
//
// A bare "open X: Permission denied" leaves an operator to find out who
// owns what; the usual cause on a store is a command run as root that left
// a root-owned file behind. PathErrnoStatus() says whose the refusing file
// or directory is, its mode, and who runs this process, and names the way
// out (give it back with chown). Other errnos map as ErrnoStatus() does.
// Thread-safe: only lstat(2) and geteuid(2).
#ifndef MLPO_BASE_PATH_ERRNO_H_
#define MLPO_BASE_PATH_ERRNO_H_

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace mlpo {

// `err` is the errno of `verb` (e.g. "open") on `path`; the message reads
// "<verb> <path>: <strerror> (errno N)" and, for EACCES/EPERM, what owns
// the nearest existing file or directory on the path and how to give it
// back.
absl::Status PathErrnoStatus(int err, absl::string_view verb,
                             const std::string& path);

}  // namespace mlpo

#endif  // MLPO_BASE_PATH_ERRNO_H_
