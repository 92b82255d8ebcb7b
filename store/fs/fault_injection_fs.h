// FaultInjectionFileSystem: a FileSystem for tests that fails chosen calls
// and simulates power loss, for the store's own files and RocksDB's alike.
//
//  - FailNth(op, n, err): the n-th call of `op` from now fails with errno
//    `err` (EIO, ENOSPC, EACCES, ENOENT, ...), once.
//  - FailWhile(op, err, prefix): every such call on a file under `prefix`
//    fails until ClearFaults(); ShortenNext(kRead|kWrite, n): the next
//    transfer completes short, as the kernel may.
//  - SetPreallocateBudget(b): segment preallocation past `b` bytes in all
//    fails with ENOSPC (a disk that fills up).
//  - CutPower(): from now every call that would change durable state fails
//    with EIO, as if the machine had stopped: nothing written after this
//    instant can become durable. RestoreToLastSync() then makes the files
//    what a reboot would find: every file as of its last successful
//    fdatasync (a file never synced is empty), and every file created or
//    renamed since its directory's last sync gone or renamed back (files and
//    directories alike), and every file deleted since then back as it was
//    durable. Directories made by CreateDirs and trees removed by RemoveTree
//    are durable on return (the POSIX file system syncs their parent).
//  - CutPowerAfter(n): the power goes after n more calls that change what
//    is on disk (writes, syncs, renames, creates, unlinks, links, copies):
//    the next one fails, as every call after CutPower() does. A loop over
//    n cuts a procedure at each of its steps in turn.
//  - SetTornWrites(seed): RestoreToLastSync then keeps, in segment files,
//    a random half of the 4 KiB blocks written since the last sync: the
//    disk persisted part of what was in flight (torn extents).
//
// Content is tracked per file by copying it at each successful sync, so it
// suits small test stores (a few MiB of segments), not benchmarks.
//
// Thread-safe.
#ifndef MLPO_STORE_FS_FAULT_INJECTION_FS_H_
#define MLPO_STORE_FS_FAULT_INJECTION_FS_H_

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "base/mutex.h"
#include "store/fs/file_system.h"

namespace mlpo {

class FaultInjectionFileSystem final : public FileSystem {
 public:
  enum class Op {
    kOpen,         // OpenForIo, RocksDB's new files
    kPreallocate,
    kSync,         // fdatasync of a segment or metadata file, RocksDB syncs
    kSyncDir,
    kRename,
    kWriteFile,    // WriteFileSynced, CopyFile (its target), RocksDB appends
    kRead,         // an extent read's completion (the I/O engine)
    kWrite,        // an extent write's completion (the I/O engine)
    kStat,
    kMkdir,
    kList,
    kUnlink,       // Unlink, RemoveTree, RocksDB deletions
    kLink,
    kLock,         // TryLock (the writer lock, I/O slots)
    kReadFile,     // ReadFile: descriptors, identity files, the seal
  };
  FaultInjectionFileSystem();
  ~FaultInjectionFileSystem() override;

  void FailNth(Op op, int n, int err);
  // Every call of `op` on a file whose path starts with `prefix` fails with
  // `err` until ClearFaults() (e.g. one path's disk is full).
  void FailWhile(Op op, int err, const std::string& prefix);
  // The next transfer (kRead or kWrite) completes with only `bytes` done;
  // the engine must carry on from there.
  void ShortenNext(Op op, size_t bytes);
  void ClearFaults();
  void SetPreallocateBudget(uint64_t bytes);
  void CutPower();
  void CutPowerAfter(int n);
  void SetTornWrites(uint64_t seed);
  // Call with every store on this file system closed.
  absl::Status RestoreToLastSync();
  uint64_t torn_blocks() const;  // unsynced blocks kept by torn restores
  bool power_cut() const;
  int injected() const;  // faults injected so far (FailNth, budget)

  absl::StatusOr<FileInfo> Stat(const std::string& path) override;
  absl::Status CreateDirs(const std::string& dir) override;
  absl::StatusOr<std::vector<std::string>> ListDir(
      const std::string& dir) override;
  absl::Status Unlink(const std::string& path) override;
  absl::Status RemoveTree(const std::string& path) override;
  absl::Status Link(const std::string& from, const std::string& to) override;
  absl::StatusOr<std::string> ReadFile(const std::string& path,
                                       size_t max_bytes) override;
  absl::StatusOr<int> OpenLockFile(const std::string& path,
                                   bool create) override;
  absl::StatusOr<bool> TryLock(int fd, const std::string& path,
                               bool exclusive) override;
  void Unlock(int fd) override;
  absl::Status WriteAt(int fd, const std::string& path, absl::string_view data,
                       uint64_t offset) override;
  absl::StatusOr<int> OpenForIo(const std::string& path, bool create,
                                bool want_direct, bool* direct,
                                bool read_only) override;
  absl::Status Preallocate(int fd, const std::string& path,
                           uint64_t len) override;
  absl::Status Fdatasync(int fd, const std::string& path) override;
  absl::Status SyncDir(const std::string& dir) override;
  absl::Status Rename(const std::string& from, const std::string& to) override;
  // Faulted as kWriteFile on `to` (a full disk); tracked for power loss as
  // WriteFileSynced is (the copy is synced when it returns).
  absl::Status CopyFile(
      const std::string& from, const std::string& to,
      const std::function<void(uint64_t)>& progress) override;
  absl::Status WriteFileSynced(const std::string& path,
                               absl::string_view data) override;
  rocksdb::Env* RocksEnv() override;
  IoCompletionFilter CompletionFilter() override;

  // For the RocksDB wrapper (fault_injection_fs.cc). `file` is matched
  // against FailWhile prefixes.
  absl::Status Check(Op op, const std::string& file = "")
      ABSL_LOCKS_EXCLUDED(mu_);
  void Track(const std::string& path, bool created) ABSL_LOCKS_EXCLUDED(mu_);
  void Snapshot(const std::string& path) ABSL_LOCKS_EXCLUDED(mu_);
  void DirSynced(const std::string& dir) ABSL_LOCKS_EXCLUDED(mu_);
  void Renamed(const std::string& from, const std::string& to)
      ABSL_LOCKS_EXCLUDED(mu_);
  // A deletion by RocksDB: durable only once its directory is synced.
  void BeforeDelete(const std::string& path) ABSL_LOCKS_EXCLUDED(mu_);
  void Deleted(const std::string& path) ABSL_LOCKS_EXCLUDED(mu_);
  // Remembers what a file that is about to be replaced by a rename holds.
  void BeforeRename(const std::string& to) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct File {
    std::optional<std::string> synced;  // content at the last sync
  };
  struct EntryOp {
    uint64_t seq = 0;  // order of all entry changes, for undoing them
    bool rename = false, deleted = false, dir = false;
    std::string from, to;           // create: `to` only
    std::optional<File> displaced;  // what `to` was before a rename
  };
  int ErrnoOf(const absl::Status& s) ABSL_LOCKS_EXCLUDED(mu_);
  void TrackLocked(const std::string& path, bool created)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void AddPending(const std::string& dir, EntryOp op)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Moves the bookkeeping of everything under `from`/ to `to`/ (a directory
  // renamed).
  void RekeyLocked(const std::string& from, const std::string& to)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  mutable Mutex mu_;
  std::map<std::string, File> files_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::vector<EntryOp>> pending_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, File> before_rename_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, File> before_delete_ ABSL_GUARDED_BY(mu_);
  uint64_t next_seq_ ABSL_GUARDED_BY(mu_) = 0;
  struct Fault {
    int left = 0, err = 0;
  };
  std::map<Op, Fault> faults_ ABSL_GUARDED_BY(mu_);
  struct Standing {
    Op op;
    int err;
    std::string prefix;
  };
  std::vector<Standing> standing_ ABSL_GUARDED_BY(mu_);
  std::map<Op, size_t> shorten_ ABSL_GUARDED_BY(mu_);
  uint64_t torn_seed_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t torn_blocks_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t budget_ ABSL_GUARDED_BY(mu_) = UINT64_MAX;
  uint64_t preallocated_ ABSL_GUARDED_BY(mu_) = 0;
  bool cut_ ABSL_GUARDED_BY(mu_) = false;
  int cut_after_ ABSL_GUARDED_BY(mu_) = -1;  // CutPowerAfter; -1: none
  int injected_ ABSL_GUARDED_BY(mu_) = 0;
  int last_errno_ ABSL_GUARDED_BY(mu_) = 0;
  std::unique_ptr<rocksdb::Env> env_;
};

}  // namespace mlpo

#endif  // MLPO_STORE_FS_FAULT_INJECTION_FS_H_
