// The store's files outside its index, shared by ObjectStore's open and by
// the tools that work on a store that is not open (store/admin/: repair,
// relocate): the writer lock in the index directory, the check that every
// root is a distinct directory, and the STORE descriptor on every path.
//
// Layer store/: may include base/ and store's own folders.
#ifndef MLPO_STORE_STORE_FILES_H_
#define MLPO_STORE_STORE_FILES_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "store/fs/file_system.h"
#include "store/store_options.h"

namespace mlpo {

// Where the index keeps its backups, in every path's store directory.
inline constexpr char kIndexBackupDir[] = "meta-backup";

// One writer per store: an exclusive flock on <meta_dir>/MLPO-LOCK, which
// also records the holder's pid for the message a second writer gets.
// Released when the object goes (or is assigned over). Move-only.
class WriterLock {
 public:
  WriterLock() = default;
  // FailedPrecondition naming the holder's pid when another process holds
  // it (a pid in the file that is not running is not named as the holder);
  // the file system's error when the lock file cannot be made.
  static absl::StatusOr<WriterLock> Acquire(const std::string& meta_dir,
                                            FileSystem* fs);
  // The pid holding the writer lock of the store in `meta_dir`, -1 when it
  // is held by a process that left no pid (or whose pid in the file is not
  // running: not an mlpo writer), or 0 when it is free.
  static int HolderPid(const std::string& meta_dir, FileSystem* fs = nullptr);

  WriterLock(WriterLock&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  WriterLock& operator=(WriterLock&& o) noexcept;
  WriterLock(const WriterLock&) = delete;
  WriterLock& operator=(const WriterLock&) = delete;
  ~WriterLock() { Release(); }

  bool held() const { return fd_ >= 0; }
  void Release();

 private:
  explicit WriterLock(int fd) : fd_(fd) {}
  int fd_ = -1;
};

// Every root of `o` exists and is a directory, and no two are one directory
// (listed twice, or through a link or a bind mount): NotFound or
// InvalidArgument naming the path otherwise. Nothing is written.
absl::Status CheckStoreRoots(const StoreOptions& o, FileSystem* fs);

// Writes the STORE descriptor of store `uuid` into its directory on every
// path of `o` (atomically; one that already says the same is left alone).
absl::Status WriteStoreDescriptors(const StoreOptions& o,
                                   const std::string& uuid, FileSystem* fs);

// "store N rank R (index DIR)", for messages.
std::string StoreWhere(const StoreOptions& o);

// The file system `o` names, or the default one.
inline FileSystem* StoreFileSystem(const StoreOptions& o) {
  return o.fs ? o.fs : DefaultFileSystem();
}

}  // namespace mlpo

#endif  // MLPO_STORE_STORE_FILES_H_
