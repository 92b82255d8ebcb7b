#include "store/fs/file_util.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "base/path_errno.h"
#include "base/status_macros.h"
#include "store/fs/file_system.h"

namespace mlpo {

std::string AbsolutePath(const std::string& p) {
  return std::filesystem::absolute(p).lexically_normal().string();
}

absl::Status SyncDir(const std::string& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return PathErrnoStatus(errno, "open directory", dir);
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
  return DefaultFileSystem()->ReadFile(file, max_bytes);
}

}  // namespace mlpo
