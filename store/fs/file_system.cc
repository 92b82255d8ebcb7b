#include "store/fs/file_system.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>

#include <cerrno>
#include <filesystem>
#include <vector>

#include "absl/strings/str_cat.h"
#include "rocksdb/env.h"
#include "store/fs/file_util.h"
#include "store/fs/private_rocks_fs.h"
#include "store/io/io_engine.h"
#include "base/path_errno.h"
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

bool FileSystem::Exists(const std::string& path) { return Stat(path).ok(); }

absl::StatusOr<uint64_t> FileSystem::LinkCount(int fd,
                                               const std::string& path) {
  struct stat st;
  if (::fstat(fd, &st) != 0)
    return ErrnoStatus(errno, absl::StrCat("stat ", path));
  return static_cast<uint64_t>(st.st_nlink);
}

absl::Status FileSystem::CheckSoleLink(int fd, const std::string& path,
                                       absl::string_view what) {
  MLPO_ASSIGN_OR_RETURN(uint64_t links, LinkCount(fd, path));
  if (links <= 1) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      what, " ", path, " has ", links, " links (a hard-linked copy of the "
      "store shares it); writing it would change the copy too. Nothing was "
      "changed. `mlpo unshare` gives the store files of its own"));
}

absl::Status FileSystem::CopyFile(
    const std::string& from, const std::string& to,
    const std::function<void(uint64_t)>& progress) {
  int in = ::open(from.c_str(), O_RDONLY | O_CLOEXEC);
  if (in < 0) return PathErrnoStatus(errno, "open", from);
  int out = ::open(to.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC,
                   kPrivateFileMode);
  if (out < 0) {
    int err = errno;
    ::close(in);
    return PathErrnoStatus(err, "create", to);
  }
  absl::Status st;
  uint64_t done = 0;
  bool plain = false;  // read/write where copy_file_range cannot
  std::vector<char> buf;
  constexpr size_t kChunk = size_t{64} << 20;
  while (st.ok()) {
    ssize_t n;
    if (!plain) {
      n = ::copy_file_range(in, nullptr, out, nullptr, kChunk, 0);
      if (n < 0 && (errno == EXDEV || errno == ENOSYS || errno == EINVAL ||
                    errno == EOPNOTSUPP) && done == 0) {
        plain = true;
        buf.resize(size_t{4} << 20);
        continue;
      }
    } else {
      n = ::read(in, buf.data(), buf.size());
      if (n > 0) {
        for (ssize_t w = 0; w < n;) {
          ssize_t k = ::write(out, buf.data() + w, n - w);
          if (k < 0 && errno == EINTR) continue;
          if (k <= 0) {
            st = ErrnoStatus(k < 0 ? errno : EIO, absl::StrCat("write ", to));
            break;
          }
          w += k;
        }
      }
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) st = ErrnoStatus(errno, absl::StrCat("copy ", from, " to ", to));
    if (!st.ok() || n <= 0) break;
    done += static_cast<uint64_t>(n);
    if (progress) progress(done);
  }
  if (st.ok() && ::fdatasync(out) != 0)
    st = ErrnoStatus(errno, absl::StrCat("fdatasync ", to));
  ::close(in);
  if (::close(out) != 0 && st.ok())
    st = ErrnoStatus(errno, absl::StrCat("close ", to));
  return st;
}

bool FileSystem::IsDirectory(const std::string& path) {
  auto i = Stat(path);
  return i.ok() && i->is_dir;
}

namespace {

absl::Status PosixCreateDirs(const std::string& dir) {
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
    MLPO_RETURN_IF_ERROR(PosixCreateDirs(parent));
  if (::mkdir(dir.c_str(), kPrivateDirMode) != 0) {
    if (errno == EEXIST) return absl::OkStatus();  // a racing creator
    return PathErrnoStatus(errno, "create directory", dir);
  }
  // The new entry must survive a power loss like the files put in it.
  return mlpo::SyncDir(parent.empty() ? "." : parent);
}

absl::StatusOr<std::string> PosixReadFile(const std::string& file,
                                          size_t max_bytes) {
  int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return PathErrnoStatus(errno, "open", file);
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

class PosixFileSystem final : public FileSystem {
 public:
  absl::StatusOr<FileInfo> Stat(const std::string& path) override {
    struct stat st;
    if (::stat(path.c_str(), &st) != 0)
      return PathErrnoStatus(errno, "stat", path);
    FileInfo i;
    i.is_dir = S_ISDIR(st.st_mode);
    i.is_regular = S_ISREG(st.st_mode);
    i.size = static_cast<uint64_t>(st.st_size);
    i.dev = static_cast<uint64_t>(st.st_dev);
    i.ino = static_cast<uint64_t>(st.st_ino);
    i.links = static_cast<uint64_t>(st.st_nlink);
    return i;
  }
  absl::Status CreateDirs(const std::string& dir) override {
    return PosixCreateDirs(dir);
  }
  absl::StatusOr<std::vector<std::string>> ListDir(
      const std::string& dir) override {
    DIR* d = ::opendir(dir.c_str());
    if (d == nullptr) return ErrnoStatus(errno, absl::StrCat("list ", dir));
    std::vector<std::string> names;
    errno = 0;
    while (struct dirent* e = ::readdir(d)) {
      std::string n = e->d_name;
      if (n != "." && n != "..") names.push_back(std::move(n));
    }
    int err = errno;
    ::closedir(d);
    if (err != 0) return ErrnoStatus(err, absl::StrCat("list ", dir));
    std::sort(names.begin(), names.end());
    return names;
  }
  absl::Status Unlink(const std::string& path) override {
    if (::unlink(path.c_str()) != 0)
      return ErrnoStatus(errno, absl::StrCat("remove ", path));
    return absl::OkStatus();
  }
  absl::Status RemoveTree(const std::string& path) override {
    std::error_code ec;
    uintmax_t n = std::filesystem::remove_all(path, ec);
    if (ec) return ErrnoStatus(ec.value(), absl::StrCat("remove ", path));
    if (n == 0) return absl::OkStatus();
    std::string dir = std::filesystem::path(path).parent_path().string();
    return mlpo::SyncDir(dir.empty() ? "." : dir);
  }
  absl::Status Link(const std::string& from, const std::string& to) override {
    if (::link(from.c_str(), to.c_str()) != 0) {
      if (errno == EEXIST)
        return absl::AlreadyExistsError(absl::StrCat(to, " exists"));
      return ErrnoStatus(errno, absl::StrCat("link ", from, " to ", to));
    }
    return absl::OkStatus();
  }
  absl::StatusOr<std::string> ReadFile(const std::string& path,
                                       size_t max_bytes) override {
    return PosixReadFile(path, max_bytes);
  }
  absl::StatusOr<int> OpenLockFile(const std::string& path,
                                   bool create) override {
    int fd = create ? ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC,
                             kPrivateFileMode)
                    : ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return PathErrnoStatus(errno, "open", path);
    return fd;
  }
  absl::StatusOr<bool> TryLock(int fd, const std::string& path,
                               bool exclusive) override {
    if (::flock(fd, (exclusive ? LOCK_EX : LOCK_SH) | LOCK_NB) == 0)
      return true;
    if (errno == EWOULDBLOCK) return false;
    return ErrnoStatus(errno, absl::StrCat("lock ", path));
  }
  void Unlock(int fd) override { ::flock(fd, LOCK_UN); }
  absl::Status WriteAt(int fd, const std::string& path, absl::string_view data,
                       uint64_t offset) override {
    size_t done = 0;
    while (done < data.size()) {
      ssize_t n = ::pwrite(fd, data.data() + done, data.size() - done,
                           static_cast<off_t>(offset + done));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return ErrnoStatus(n < 0 ? errno : EIO,
                                     absl::StrCat("write ", path));
      done += static_cast<size_t>(n);
    }
    return absl::OkStatus();
  }
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
    if (fd < 0) return PathErrnoStatus(errno, "create", path);
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
  rocksdb::Env* RocksEnv() override { return PrivateRocksEnv(); }
};

}  // namespace

FileSystem* DefaultFileSystem() {
  static PosixFileSystem* fs = new PosixFileSystem();
  return fs;
}

}  // namespace mlpo
