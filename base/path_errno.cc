#include "base/path_errno.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/status_macros.h"

namespace mlpo {

namespace {

// The sentence on ownership ("" when nothing on `path` can be examined).
std::string DescribeOwnerOf(const std::string& path) {
  // The path itself when it exists (a file we may not open); otherwise the
  // nearest ancestor we can examine: the directory that does not let us in.
  std::string at = path;
  struct stat st;
  while (::lstat(at.c_str(), &st) != 0) {
    size_t slash = at.find_last_of('/');
    if (slash == std::string::npos || slash == 0) return "";
    at.resize(slash);
  }
  uid_t me = ::geteuid();
  if (st.st_uid == me) {
    return absl::StrFormat(
        "%s is this user's (uid %d) but mode %04o does not let it in",
        at, me, st.st_mode & 07777);
  }
  return absl::StrFormat(
      "%s belongs to another user (uid %d, mode %04o) and this process runs "
      "as uid %d: a command run as that user (root?) left it. `ls -l` it "
      "and give the store's files back to their owner (`chown -R` the "
      "store's directories); nothing was changed",
      at, st.st_uid, st.st_mode & 07777, me);
}

}  // namespace

absl::Status PathErrnoStatus(int err, absl::string_view verb,
                             const std::string& path) {
  absl::Status s = ErrnoStatus(err, absl::StrCat(verb, " ", path));
  if (err != EACCES && err != EPERM) return s;
  std::string owner = DescribeOwnerOf(path);
  if (owner.empty()) return s;
  return absl::PermissionDeniedError(absl::StrCat(s.message(), "; ", owner));
}

}  // namespace mlpo
