// FileSystem: every file-system call the store makes for its own files goes
// through this interface (LevelDB's Env, RocksDB's FileSystem), so a test can
// inject faults below the store without a real disk misbehaving. The POSIX
// implementation is the default; FaultInjectionFileSystem
// (store/fs/fault_injection_fs.h) fails chosen calls and simulates power
// loss.
//
// What goes through it: segment files (open, preallocate, fdatasync),
// directory syncs, renames and the store's small metadata files, and every
// file of the RocksDB index (RocksEnv()). The transfers of extents go
// through the I/O engine (io_uring) on the descriptors opened here.
//
// Thread-safe.
// Layer store/fs: may include base/ and store/io (to open files for the
// engine) only.
#ifndef MLPO_STORE_FS_FILE_SYSTEM_H_
#define MLPO_STORE_FS_FILE_SYSTEM_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "store/io/io_engine.h"

namespace rocksdb {
class Env;
}

namespace mlpo {

class FileSystem {
 public:
  virtual ~FileSystem() = default;

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

  // <file>.tmp written and synced, renamed over `file`, directory synced: a
  // crash leaves the old or the new content, never a torn one.
  absl::Status WriteFileAtomic(const std::string& file, absl::string_view data);
};

// The process-wide POSIX file system.
FileSystem* DefaultFileSystem();

}  // namespace mlpo

#endif  // MLPO_STORE_FS_FILE_SYSTEM_H_
