#include "store/fs/file_system.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "rocksdb/env.h"
#include "store/fs/file_util.h"
#include "store/io/io_engine.h"
#include "base/status_macros.h"

namespace mlpo {

absl::Status FileSystem::WriteFileAtomic(const std::string& file,
                                         absl::string_view data) {
  std::string tmp = file + ".tmp";
  MLPO_RETURN_IF_ERROR(WriteFileSynced(tmp, data));
  MLPO_RETURN_IF_ERROR(Rename(tmp, file));
  std::string dir = std::filesystem::path(file).parent_path().string();
  return SyncDir(dir.empty() ? "." : dir);
}

namespace {

class PosixFileSystem final : public FileSystem {
 public:
  absl::StatusOr<int> OpenForIo(const std::string& path, bool create,
                                bool want_direct, bool* direct,
                                bool read_only) override {
    return mlpo::OpenForIo(path, create, want_direct, direct, read_only);
  }
  absl::Status Preallocate(int fd, const std::string& path,
                           uint64_t len) override {
    int r = ::posix_fallocate(fd, 0, static_cast<off_t>(len));
    if (r != 0)
      return ErrnoStatus(r, absl::StrCat("preallocate ", path, " (", len,
                                         " bytes)"));
    return absl::OkStatus();
  }
  absl::Status Fdatasync(int fd, const std::string& path) override {
    if (::fdatasync(fd) != 0)
      return ErrnoStatus(errno, absl::StrCat("fdatasync ", path));
    return absl::OkStatus();
  }
  absl::Status SyncDir(const std::string& dir) override {
    return mlpo::SyncDir(dir);
  }
  absl::Status Rename(const std::string& from, const std::string& to) override {
    if (::rename(from.c_str(), to.c_str()) != 0)
      return ErrnoStatus(errno, absl::StrCat("rename ", from, " to ", to));
    return absl::OkStatus();
  }
  absl::Status WriteFileSynced(const std::string& path,
                               absl::string_view data) override {
    int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC,
                    kPrivateFileMode);
    if (fd < 0) return ErrnoStatus(errno, absl::StrCat("create ", path));
    size_t done = 0;
    while (done < data.size()) {
      ssize_t n = ::write(fd, data.data() + done, data.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        int err = n < 0 ? errno : EIO;
        ::close(fd);
        ::unlink(path.c_str());
        return ErrnoStatus(err, absl::StrCat("write ", path));
      }
      done += static_cast<size_t>(n);
    }
    absl::Status st = Fdatasync(fd, path);
    ::close(fd);
    if (!st.ok()) ::unlink(path.c_str());
    return st;
  }
  rocksdb::Env* RocksEnv() override { return rocksdb::Env::Default(); }
};

}  // namespace

FileSystem* DefaultFileSystem() {
  static PosixFileSystem* fs = new PosixFileSystem();
  return fs;
}

}  // namespace mlpo
