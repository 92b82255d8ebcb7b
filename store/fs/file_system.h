// FileSystem: every file-system call the store makes for its own files goes
// through this interface (LevelDB's Env, RocksDB's FileSystem), so a test can
// inject faults below the store without a real disk misbehaving. The POSIX
// implementation is the default; FaultInjectionFileSystem
// (store/fs/fault_injection_fs.h) fails chosen calls and simulates power
// loss.
//
// What goes through it: segment files (open, preallocate, fdatasync),
// directory creation, listing and syncs, stat, renames, links and unlinks,
// the store's small metadata files (descriptors, identity files, the index
// seal, the writer lock and slot files with their flocks), index backups, and
// every file of the RocksDB index (RocksEnv()). The transfers of extents go
// through the I/O engine (io_uring) on the descriptors opened here. Users'
// config files (StoreOptions loaders) and the tools' own output are not the
// store's files and are read directly.
//
// Thread-safe.
// Layer store/fs: may include base/ and store/io (to open files for the
// engine) only.
#ifndef MLPO_STORE_FS_FILE_SYSTEM_H_
#define MLPO_STORE_FS_FILE_SYSTEM_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "store/io/io_engine.h"

namespace rocksdb {
class Env;
}

namespace mlpo {

struct FileInfo {
  bool is_dir = false;
  bool is_regular = false;
  uint64_t size = 0;
  uint64_t dev = 0, ino = 0;  // identity: the same file seen through links
  uint64_t links = 1;         // directory entries naming it (hard links)
};

class FileSystem {
 public:
  virtual ~FileSystem() = default;

  // NotFound when `path` does not exist (following symlinks).
  virtual absl::StatusOr<FileInfo> Stat(const std::string& path) = 0;
  // mkdir -p: each directory it creates gets mode 0700 and is durable on
  // return (its parent is synced). Existing ones are left as they are; a
  // non-directory in the way is FailedPrecondition.
  virtual absl::Status CreateDirs(const std::string& dir) = 0;
  // The names in `dir` (no "." or ".."), sorted.
  virtual absl::StatusOr<std::vector<std::string>> ListDir(
      const std::string& dir) = 0;
  // Removes a file. Durable once its directory is synced.
  virtual absl::Status Unlink(const std::string& path) = 0;
  // rm -rf `path` (missing is fine). For the index backups' staging
  // directories and `recover --discard`; durable on return.
  virtual absl::Status RemoveTree(const std::string& path) = 0;
  // A hard link `to` for `from`; AlreadyExists when `to` exists (so the first
  // of several racing creators wins). Durable once `to`'s directory is synced.
  virtual absl::Status Link(const std::string& from, const std::string& to) = 0;
  // Reads a regular file of at most `max_bytes` (a device, FIFO or larger
  // file is InvalidArgument naming it; a missing file NotFound).
  virtual absl::StatusOr<std::string> ReadFile(const std::string& path,
                                               size_t max_bytes) = 0;
  // Opens (creating 0600 when `create`) a file used for flock: the writer
  // lock and the paths' I/O slots. The caller owns the descriptor.
  virtual absl::StatusOr<int> OpenLockFile(const std::string& path,
                                           bool create) = 0;
  // flock(LOCK_NB): true when taken, false when another holder has it.
  virtual absl::StatusOr<bool> TryLock(int fd, const std::string& path,
                                       bool exclusive) = 0;
  virtual void Unlock(int fd) = 0;
  // Writes `data` at `offset` of an open file (not synced).
  virtual absl::Status WriteAt(int fd, const std::string& path,
                               absl::string_view data, uint64_t offset) = 0;

  // Opens `path` for the I/O engine: O_DIRECT when `want_direct` and the
  // filesystem allows it (reported in *direct), owner-only when created,
  // O_RDONLY when `read_only`. The caller owns the descriptor.
  virtual absl::StatusOr<int> OpenForIo(const std::string& path, bool create,
                                        bool want_direct, bool* direct,
                                        bool read_only) = 0;
  // Allocates [0, len) of an open file (posix_fallocate).
  virtual absl::Status Preallocate(int fd, const std::string& path,
                                   uint64_t len) = 0;
  // Makes everything written to `fd` durable.
  virtual absl::Status Fdatasync(int fd, const std::string& path) = 0;
  // How many directory entries name the open file `fd` (0: it was deleted
  // while open, so nothing written to it will be found again).
  virtual absl::StatusOr<uint64_t> LinkCount(int fd, const std::string& path);
  // OK when the open file `fd` (the store's `what`, e.g. "segment file")
  // has no other directory entry; FailedPrecondition naming it when it has
  // (a hard-linked copy of the store shares it, and a write in place would
  // change that copy too).
  absl::Status CheckSoleLink(int fd, const std::string& path,
                             absl::string_view what);
  // Creates or truncates `to` (0600) with the bytes of `from` and
  // fdatasyncs it; `progress`, when given, gets the bytes copied so far
  // after each chunk. (copy_file_range: a file system that can share
  // extents copy-on-write may do so.)
  virtual absl::Status CopyFile(
      const std::string& from, const std::string& to,
      const std::function<void(uint64_t)>& progress = nullptr);
  // Makes the entries created or renamed in `dir` durable.
  virtual absl::Status SyncDir(const std::string& dir) = 0;
  virtual absl::Status Rename(const std::string& from,
                              const std::string& to) = 0;
  // Creates or truncates `path` (0600), writes `data` and fdatasyncs it.
  virtual absl::Status WriteFileSynced(const std::string& path,
                                       absl::string_view data) = 0;
  // The Env RocksDB uses for the index's files.
  virtual rocksdb::Env* RocksEnv() = 0;
  // What the I/O engines of paths on this file system pass every transfer's
  // result through (empty: nothing). The fault-injecting file system fails
  // or shortens chosen reads and writes here.
  virtual IoCompletionFilter CompletionFilter() { return nullptr; }

  // Stat() said so (any error, e.g. EACCES, counts as no).
  bool Exists(const std::string& path);
  bool IsDirectory(const std::string& path);

  // <file>.tmp written and synced, renamed over `file`, directory synced: a
  // crash leaves the old or the new content, never a torn one.
  absl::Status WriteFileAtomic(const std::string& file, absl::string_view data);
};

// The process-wide POSIX file system.
FileSystem* DefaultFileSystem();

}  // namespace mlpo

#endif  // MLPO_STORE_FS_FILE_SYSTEM_H_
