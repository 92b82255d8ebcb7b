#include "base/status_macros.h"

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace mlpo {

absl::Status ErrnoStatus(int err, absl::string_view context) {
  std::string msg =
      absl::StrCat(context, ": ", std::strerror(err), " (errno ", err, ")");
  switch (err) {
    case ENOENT:
    case ENOTDIR:
      return absl::NotFoundError(msg);
    case ENOSPC:
    case EDQUOT:
    case ENOMEM:
      return absl::ResourceExhaustedError(msg);
    case EEXIST:
      return absl::AlreadyExistsError(msg);
    case EINVAL:
    case EBADF:
      return absl::InvalidArgumentError(msg);
    case EACCES:
    case EPERM:
    case EROFS:
      return absl::PermissionDeniedError(msg);
    case EAGAIN:
    case EINTR:
    case EBUSY:
      return absl::UnavailableError(msg);
    case ENOSYS:
    case EOPNOTSUPP:
      return absl::UnimplementedError(msg);
    default:
      return absl::InternalError(msg);
  }
}

absl::Status Annotate(const absl::Status& s, absl::string_view context) {
  if (s.ok()) return s;
  absl::Status out(s.code(), absl::StrCat(context, ": ", s.message()));
  s.ForEachPayload([&out](absl::string_view url, const absl::Cord& p) {
    out.SetPayload(url, p);  // (a reason, status_reason.h, stays)
  });
  return out;
}

}  // namespace mlpo
