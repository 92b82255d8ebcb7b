#include "store/fs/file_util.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "store/fs/file_system.h"

namespace mlpo {

absl::Status MakePrivateDirs(const std::string& dir) {
  if (dir.empty()) return absl::InvalidArgumentError("empty directory name");
  struct stat st;
  if (::stat(dir.c_str(), &st) == 0) {
    if (S_ISDIR(st.st_mode)) return absl::OkStatus();
    return absl::FailedPreconditionError(
        absl::StrCat(dir, " exists and is not a directory"));
  }
  std::filesystem::path p(dir);
  std::string parent = p.lexically_normal().parent_path().string();
  if (!parent.empty() && parent != dir && parent != "/")
    MLPO_RETURN_IF_ERROR(MakePrivateDirs(parent));
  if (::mkdir(dir.c_str(), kPrivateDirMode) != 0 && errno != EEXIST)
    return ErrnoStatus(errno, absl::StrCat("create directory ", dir));
  return absl::OkStatus();
}

absl::Status SyncDir(const std::string& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus(errno, absl::StrCat("open directory ", dir));
  int r = ::fsync(fd);
  int err = errno;
  ::close(fd);
  if (r != 0) return ErrnoStatus(err, absl::StrCat("fsync directory ", dir));
  return absl::OkStatus();
}

absl::Status WriteFileAtomic(const std::string& file, absl::string_view data) {
  return DefaultFileSystem()->WriteFileAtomic(file, data);
}

absl::StatusOr<std::string> ReadSmallFile(const std::string& file,
                                          size_t max_bytes) {
  int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return ErrnoStatus(errno, absl::StrCat("open ", file));
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    return ErrnoStatus(err, absl::StrCat("stat ", file));
  }
  if (!S_ISREG(st.st_mode) || static_cast<uint64_t>(st.st_size) > max_bytes) {
    ::close(fd);
    return absl::InvalidArgumentError(absl::StrCat(
        file, " is ",
        S_ISREG(st.st_mode) ? absl::StrCat("larger than ", max_bytes, " bytes")
                            : std::string("not a regular file"),
        ": not a store config or descriptor"));
  }
  std::string out;
  char buf[65536];
  while (out.size() <= max_bytes) {
    ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int err = errno;
      ::close(fd);
      return ErrnoStatus(err, absl::StrCat("read ", file));
    }
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  if (out.size() > max_bytes)
    return absl::InvalidArgumentError(
        absl::StrCat(file, " grew past ", max_bytes, " bytes while read"));
  return out;
}

}  // namespace mlpo
