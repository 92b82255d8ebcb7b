// The store's files outside its index, shared by ObjectStore's open and by
// the tools that work on a store that is not open (store/admin/: repair,
// relocate): the writer lock in the index directory, the check that every
// root is a distinct directory, and the STORE descriptor on every path.
//
// Layer store/: may include base/ and store's own folders.
#ifndef MLPO_STORE_STORE_FILES_H_
#define MLPO_STORE_STORE_FILES_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

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

// A store file that other directory entries name too: a hard link, as
// `cp -al`, `cp -l` or `rsync --link-dest` make.
struct SharedFile {
  std::string path;
  uint64_t links = 0, size = 0;
};

// The files of the store `o` that it writes or locks in place (the index
// seal, the writer lock and the index's lock in the index directory, and
// every segment file) that have more than one link: a write to any of them
// would change the other directory's copy too. (The index's other files
// are never written in place, and the descriptors and identity files are
// replaced whole, so a link to them is harmless.)
absl::StatusOr<std::vector<SharedFile>> SharedStoreFiles(const StoreOptions& o,
                                                         FileSystem* fs);

// The refusal of a writable open over `shared` (not empty): what is shared
// and why that is refused, that nothing was changed, and the command that
// gives the store files of its own.
absl::Status SharedFilesError(const StoreOptions& o,
                              const std::vector<SharedFile>& shared);

// Gives `file` an inode of its own: copies it to "unshare-<name>.tmp"
// beside it, syncs that, renames it over `file` and syncs the directory. A
// crash leaves the shared file or the private copy, with the same bytes
// either way, and perhaps the temporary (RemoveUnshareTemporaries).
// `progress` gets the bytes copied so far.
absl::Status UnshareFile(FileSystem* fs, const std::string& file,
                         const std::function<void(uint64_t)>& progress);
// Removes the temporaries an UnshareFile cut short left in `dir`.
absl::Status RemoveUnshareTemporaries(FileSystem* fs, const std::string& dir);

// "store N rank R (index DIR)", for messages.
std::string StoreWhere(const StoreOptions& o);

// The file system `o` names, or the default one.
inline FileSystem* StoreFileSystem(const StoreOptions& o) {
  return o.fs ? o.fs : DefaultFileSystem();
}

}  // namespace mlpo

#endif  // MLPO_STORE_STORE_FILES_H_
