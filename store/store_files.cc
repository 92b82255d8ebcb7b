#include "store/store_files.h"

#include <signal.h>
#include <unistd.h>

#include <cerrno>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/size_units.h"
#include "base/status_macros.h"
#include "base/status_reason.h"
#include "store/meta/meta_index.h"  // kSealCopyFile
#include "store/store_survey.h"

namespace mlpo {
namespace {

constexpr char kUnsharePrefix[] = "unshare-";

// The pid the lock file names (the last mlpo writer; 0 when none) and
// whether it still runs: something else (a backup tool, flock(1)) may hold
// the lock now, and a pid that has exited is not named as the holder.
struct NamedPid {
  int pid = 0;
  bool running = false;
};
NamedPid ReadNamedPid(int fd) {
  char buf[64] = {0};
  NamedPid out;
  if (::pread(fd, buf, sizeof(buf) - 1, 0) > 0) out.pid = std::atoi(buf);
  out.running = out.pid > 0 && (::kill(out.pid, 0) == 0 || errno == EPERM);
  return out;
}

}  // namespace

WriterLock& WriterLock::operator=(WriterLock&& o) noexcept {
  if (this != &o) {
    Release();
    fd_ = o.fd_;
    o.fd_ = -1;
  }
  return *this;
}

void WriterLock::Release() {
  if (fd_ >= 0) ::close(fd_);  // closing the descriptor drops the flock
  fd_ = -1;
}

absl::StatusOr<WriterLock> WriterLock::Acquire(const std::string& meta_dir,
                                               FileSystem* fs) {
  std::string file = absl::StrCat(meta_dir, "/", kLockFile);
  MLPO_ASSIGN_OR_RETURN(int fd, fs->OpenLockFile(file, /*create=*/true));
  WriterLock lock(fd);
  auto got = fs->TryLock(fd, file, /*exclusive=*/true);
  if (!got.ok()) return got.status();
  if (!*got) {
    const NamedPid named = ReadNamedPid(fd);
    std::string holder = "another process";
    if (named.pid > 0 && named.running)
      holder = absl::StrCat("pid ", named.pid);
    else if (named.pid > 0)
      holder = absl::StrCat("another process (not pid ", named.pid,
                            ", the last mlpo writer, which has exited)");
    // A hard-linked copy (`cp -al`) shares the lock file: the holder may
    // have the other store open, not this one.
    auto links = fs->LinkCount(fd, file);
    const bool shared = links.ok() && *links > 1;
    return WithReason(absl::FailedPreconditionError(absl::StrCat(
        "store ", meta_dir, " is already open by ", holder,
        " (one writer per store: a job or a command that changes the "
        "store waits for it to close it; inspect, tags and verify work "
        "beside it)",
        shared ? absl::StrCat(
                     ", or has another copy of it open: the lock file ", file,
                     " is shared through hard links (", *links,
                     " links: a `cp -al` copy). Once that process has "
                     "exited, `mlpo relocate` (on the copy) or `mlpo "
                     "unshare` gives this store files of its own")
               : "")),
        kReasonStoreHeld,
        named.pid > 0 && named.running ? absl::StrCat(named.pid) : "");
  }
  // Who holds it, for the message above; padded so no older pid's digits
  // outlive it. Not into a lock file shared through hard links (a `cp -al`
  // copy): that would write into the other store's file, and the open
  // that took this lock is refused for the sharing anyway.
  auto links = fs->LinkCount(fd, file);
  if (links.ok() && *links > 1) return lock;
  std::string me = absl::StrCat(getpid(), "\n");
  me.resize(32, ' ');
  MLPO_RETURN_IF_ERROR(fs->WriteAt(fd, file, me, 0));
  return lock;
}

int WriterLock::HolderPid(const std::string& meta_dir, FileSystem* fs) {
  if (fs == nullptr) fs = DefaultFileSystem();
  std::string file = absl::StrCat(meta_dir, "/", kLockFile);
  auto opened = fs->OpenLockFile(file, /*create=*/false);
  if (!opened.ok()) return 0;
  int fd = *opened;
  int pid = 0;
  auto got = fs->TryLock(fd, file, /*exclusive=*/false);
  if (got.ok() && !*got) {
    const NamedPid named = ReadNamedPid(fd);
    pid = named.pid > 0 && named.running ? named.pid : -1;  // -1: unknown
  }
  ::close(fd);
  return pid;
}

absl::Status CheckStoreRoots(const StoreOptions& o, FileSystem* fs) {
  std::vector<std::pair<uint64_t, uint64_t>> ids;
  for (size_t i = 0; i < o.paths.size(); ++i) {
    const std::string& root = o.paths[i].path.root;
    auto st = fs->Stat(root);
    if (st.ok() && !st->is_dir)
      return absl::NotFoundError(absl::StrCat(
          "store ", o.name, ": path[", i, "] ", root,
          " is not a directory"));
    if (!st.ok())
      return absl::NotFoundError(absl::StrCat(
          "store ", o.name, ": path[", i, "] ", root,
          " does not exist: it is gone (removed, renamed, or its file system "
          "not mounted?). Nothing was changed. Mount it back, or point the "
          "config at where the directory is now. Only if its disk was "
          "replaced and its data is gone: make the directory and run `mlpo "
          "recover --lost-path ", i, " STORE` (the versions with no copy "
          "elsewhere are lost)"));
    for (size_t j = 0; j < ids.size(); ++j)
      if (ids[j] == std::make_pair(st->dev, st->ino))
        return absl::InvalidArgumentError(absl::StrCat(
            "store ", o.name, ": path[", j, "] ", o.paths[j].path.root,
            " and path[", i, "] ", root,
            " are the same directory (a link or bind mount?); each path must "
            "be a distinct directory"));
    ids.emplace_back(st->dev, st->ino);
  }
  return absl::OkStatus();
}

absl::Status WriteStoreDescriptors(const StoreOptions& o,
                                   const std::string& uuid, FileSystem* fs) {
  std::string text = StoreDescriptorJson(o, uuid) + "\n";
  for (auto& pc : o.paths) {
    std::string dir = absl::StrCat(pc.path.root, "/", StoreNamespace(o));
    auto old = fs->ReadFile(dir + "/STORE", kMaxConfigBytes);
    if (old.ok() && *old == text) continue;
    MLPO_RETURN_IF_ERROR(fs->WriteFileAtomic(dir + "/STORE", text));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<SharedFile>> SharedStoreFiles(
    const StoreOptions& o, FileSystem* fs) {
  std::vector<std::string> files;
  // Every file written in place: the seal, the locks, RocksDB's info log
  // (appended to by each open), and each path's seal copy (written in place
  // after every step under durability "step").
  for (const char* name : {"MLPO-SEAL", "MLPO-LOCK", "LOCK", "LOG"})
    files.push_back(absl::StrCat(o.meta_dir, "/", name));
  std::vector<std::string> seal_copies;
  for (auto& pc : o.paths) {
    const std::string dir =
        absl::StrCat(pc.path.root, "/", StoreNamespace(o));
    auto names = fs->ListDir(dir);
    if (absl::IsNotFound(names.status())) continue;
    if (!names.ok()) return names.status();
    for (const std::string& n : *names)
      if (n.size() == 10 && n.rfind("seg-", 0) == 0)
        files.push_back(absl::StrCat(dir, "/", n));
    seal_copies.push_back(absl::StrCat(dir, "/", kSealCopyFile));
  }
  files.insert(files.end(), seal_copies.begin(), seal_copies.end());
  std::vector<SharedFile> shared;
  for (const std::string& f : files) {
    auto st = fs->Stat(f);
    if (absl::IsNotFound(st.status())) continue;
    if (!st.ok()) return st.status();
    if (st->is_regular && st->links > 1)
      shared.push_back({f, st->links, st->size});
  }
  return shared;
}

absl::Status SharedFilesError(const StoreOptions& o,
                              const std::vector<SharedFile>& shared) {
  uint64_t bytes = 0;
  for (const SharedFile& f : shared) bytes += f.size;
  std::string dir = o.paths.empty()
                        ? o.meta_dir
                        : absl::StrCat(o.paths[0].path.root, "/",
                                       StoreNamespace(o));
  return absl::FailedPreconditionError(absl::StrCat(
      StoreWhere(o), ": ", shared.size(), " of the store's files ",
      shared.size() == 1 ? "is" : "are",
      " shared with another directory through hard links (",
      shared[0].path, " has ", shared[0].links, " links",
      shared.size() > 1 ? ", ..." : "",
      "): a copy made with `cp -al`, `cp -l` or `rsync --link-dest`. The "
      "store writes these files in place, so using it would change that "
      "copy too. Nothing was changed. `mlpo unshare ", dir,
      "` gives this store files of its own (it copies the shared ",
      FormatBytes(static_cast<double>(bytes)),
      "); `mlpo relocate` does it for a copy; or delete the other copy"));
}

absl::Status UnshareFile(FileSystem* fs, const std::string& file,
                         const std::function<void(uint64_t)>& progress) {
  const std::filesystem::path p(file);
  const std::string dir = p.parent_path().empty() ? "." : p.parent_path();
  const std::string tmp =
      absl::StrCat(dir, "/", kUnsharePrefix, p.filename().string(), ".tmp");
  absl::Status st = fs->CopyFile(file, tmp, progress);
  if (st.ok()) st = fs->Rename(tmp, file);
  if (!st.ok()) {
    fs->Unlink(tmp).IgnoreError();  // the error that matters is `st`
    return Annotate(st, absl::StrCat("unshare ", file));
  }
  return fs->SyncDir(dir);
}

absl::Status RemoveUnshareTemporaries(FileSystem* fs, const std::string& dir) {
  auto names = fs->ListDir(dir);
  if (absl::IsNotFound(names.status())) return absl::OkStatus();
  if (!names.ok()) return names.status();
  bool any = false;
  for (const std::string& n : *names)
    if (n.rfind(kUnsharePrefix, 0) == 0 && n.size() > 4 &&
        n.compare(n.size() - 4, 4, ".tmp") == 0) {
      MLPO_RETURN_IF_ERROR(fs->Unlink(absl::StrCat(dir, "/", n)));
      any = true;
    }
  return any ? fs->SyncDir(dir) : absl::OkStatus();
}

std::string StoreWhere(const StoreOptions& o) {
  return absl::StrCat("store ", o.name, " rank ", o.rank, " (index ",
                      o.meta_dir, ")");
}

}  // namespace mlpo
