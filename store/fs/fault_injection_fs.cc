#include "store/fs/fault_injection_fs.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <iterator>
#include <random>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "rocksdb/env.h"
#include "store/fs/fault_injection_rocks.h"
#include "store/fs/file_util.h"
#include "base/status_macros.h"

namespace mlpo {
namespace fs = std::filesystem;
namespace {

std::string DirOf(const std::string& path) {
  std::string d = fs::path(path).parent_path().string();
  return d.empty() ? "." : d;
}

bool ReadAll(const std::string& path, std::string* out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  std::stringstream ss;
  ss << in.rdbuf();
  *out = ss.str();
  return true;
}

// The calls CutPowerAfter counts: those that change what is on disk.
bool ChangesDisk(FaultInjectionFileSystem::Op op) {
  using Op = FaultInjectionFileSystem::Op;
  switch (op) {
    case Op::kPreallocate:
    case Op::kSync:
    case Op::kSyncDir:
    case Op::kRename:
    case Op::kWriteFile:
    case Op::kWrite:
    case Op::kMkdir:
    case Op::kUnlink:
    case Op::kLink:
      return true;
    default:
      return false;
  }
}

}  // namespace

FaultInjectionFileSystem::FaultInjectionFileSystem() {
  env_ = NewFaultInjectionRocksEnv(this);
}

FaultInjectionFileSystem::~FaultInjectionFileSystem() = default;

void FaultInjectionFileSystem::FailNth(Op op, int n, int err) {
  MutexLock l(&mu_);
  faults_[op] = {n, err};
}

void FaultInjectionFileSystem::SetPreallocateBudget(uint64_t bytes) {
  MutexLock l(&mu_);
  budget_ = bytes;
}

void FaultInjectionFileSystem::CutPower() {
  MutexLock l(&mu_);
  cut_ = true;
}

void FaultInjectionFileSystem::CutPowerAfter(int n) {
  MutexLock l(&mu_);
  cut_after_ = n;
}

bool FaultInjectionFileSystem::power_cut() const {
  MutexLock l(&mu_);
  return cut_;
}

int FaultInjectionFileSystem::injected() const {
  MutexLock l(&mu_);
  return injected_;
}

void FaultInjectionFileSystem::FailWhile(Op op, int err,
                                         const std::string& prefix) {
  MutexLock l(&mu_);
  standing_.push_back({op, err, prefix});
}

void FaultInjectionFileSystem::ShortenNext(Op op, size_t bytes) {
  MutexLock l(&mu_);
  shorten_[op] = bytes;
}

void FaultInjectionFileSystem::ClearFaults() {
  MutexLock l(&mu_);
  faults_.clear();
  standing_.clear();
  shorten_.clear();
}

IoCompletionFilter FaultInjectionFileSystem::CompletionFilter() {
  return [this](IoOp io, const std::string& file, uint64_t, size_t len,
                int res) -> int {
    Op op = io == IoOp::kRead ? Op::kRead : Op::kWrite;
    absl::Status st = Check(op, file);
    if (!st.ok()) return power_cut() ? -EIO : -ErrnoOf(st);
    MutexLock l(&mu_);
    auto s = shorten_.find(op);
    if (s != shorten_.end() && res > 0 && s->second < len) {
      int done = static_cast<int>(s->second);
      shorten_.erase(s);
      ++injected_;
      return std::min(done, res);
    }
    return res;
  };
}

absl::Status FaultInjectionFileSystem::Check(Op op, const std::string& file) {
  MutexLock l(&mu_);
  if (!cut_ && cut_after_ >= 0 && ChangesDisk(op) && cut_after_-- == 0)
    cut_ = true;
  if (cut_) return absl::InternalError("power lost (fault injection)");
  for (const Standing& f : standing_)
    if (f.op == op && file.rfind(f.prefix, 0) == 0) {
      ++injected_;
      last_errno_ = f.err;
      return ErrnoStatus(f.err, "injected fault");
    }
  auto it = faults_.find(op);
  if (it == faults_.end() || it->second.left <= 0) return absl::OkStatus();
  if (--it->second.left > 0) return absl::OkStatus();
  ++injected_;
  last_errno_ = it->second.err;
  return ErrnoStatus(it->second.err, "injected fault");
}

void FaultInjectionFileSystem::TrackLocked(const std::string& path,
                                           bool created) {
  if (created) {
    files_[path] = File{};
    EntryOp op;
    op.to = path;
    AddPending(DirOf(path), std::move(op));
    return;
  }
  if (files_.count(path)) return;
  // A file that was there before: what it holds now is durable.
  File f;
  std::string content;
  if (ReadAll(path, &content)) f.synced = std::move(content);
  files_[path] = std::move(f);
}

void FaultInjectionFileSystem::Track(const std::string& path, bool created) {
  MutexLock l(&mu_);
  TrackLocked(path, created);
}

void FaultInjectionFileSystem::Snapshot(const std::string& path) {
  std::string content;
  if (!ReadAll(path, &content)) return;
  MutexLock l(&mu_);
  files_[path].synced = std::move(content);
}

void FaultInjectionFileSystem::DirSynced(const std::string& dir) {
  MutexLock l(&mu_);
  pending_.erase(dir);
}

void FaultInjectionFileSystem::Renamed(const std::string& from,
                                       const std::string& to) {
  std::error_code ec;
  bool dir = fs::is_directory(to, ec);
  MutexLock l(&mu_);
  EntryOp op;
  op.rename = true;
  op.dir = dir;
  op.from = from;
  op.to = to;
  if (dir) {
    RekeyLocked(from, to);
    AddPending(DirOf(to), std::move(op));
    return;
  }
  auto t = files_.find(to);
  if (t != files_.end()) {
    op.displaced = t->second;
  } else {
    // Not tracked: it was there before (durable), or the rename moved the
    // file over it just now and it is gone; what it was cannot be read
    // after the fact, so it was snapshotted in BeforeRename.
    auto b = before_rename_.find(to);
    if (b != before_rename_.end()) op.displaced = b->second;
  }
  before_rename_.erase(to);
  auto f = files_.find(from);
  files_[to] = f != files_.end() ? f->second : File{};
  if (f != files_.end()) files_.erase(f);
  AddPending(DirOf(to), std::move(op));
}

void FaultInjectionFileSystem::BeforeRename(const std::string& to) {
  std::string content;
  bool there = ReadAll(to, &content);
  MutexLock l(&mu_);
  if (files_.count(to) || !there) return;
  File f;
  f.synced = std::move(content);
  before_rename_[to] = std::move(f);
}

void FaultInjectionFileSystem::BeforeDelete(const std::string& path) {
  std::string content;
  bool there = ReadAll(path, &content);
  MutexLock l(&mu_);
  File f;
  auto it = files_.find(path);
  if (it != files_.end()) {
    f = it->second;  // what a reboot would find: its last synced content
  } else if (there) {
    f.synced = std::move(content);  // untracked: it was durable as it is
  }
  before_delete_[path] = std::move(f);
}

void FaultInjectionFileSystem::Deleted(const std::string& path) {
  MutexLock l(&mu_);
  EntryOp op;
  op.deleted = true;
  op.to = path;
  auto b = before_delete_.find(path);
  if (b != before_delete_.end()) {
    op.displaced = b->second;
    before_delete_.erase(b);
  }
  files_.erase(path);
  AddPending(DirOf(path), std::move(op));
}

void FaultInjectionFileSystem::AddPending(const std::string& dir, EntryOp op) {
  op.seq = next_seq_++;
  pending_[dir].push_back(std::move(op));
}

namespace {
bool Under(const std::string& path, const std::string& dir) {
  return path.size() > dir.size() && path.compare(0, dir.size(), dir) == 0 &&
         path[dir.size()] == '/';
}
template <typename Map>
void Rekey(Map* m, const std::string& from, const std::string& to) {
  Map moved;
  for (auto it = m->begin(); it != m->end();) {
    if (it->first == from || Under(it->first, from)) {
      moved[to + it->first.substr(from.size())] = std::move(it->second);
      it = m->erase(it);
    } else {
      ++it;
    }
  }
  for (auto& [k, v] : moved) (*m)[k] = std::move(v);
}
}  // namespace

void FaultInjectionFileSystem::RekeyLocked(const std::string& from,
                                           const std::string& to) {
  Rekey(&files_, from, to);
  Rekey(&pending_, from, to);
}

absl::StatusOr<FileInfo> FaultInjectionFileSystem::Stat(
    const std::string& path) {
  MLPO_RETURN_IF_ERROR(Annotate(Check(Op::kStat, path), "stat " + path));
  return DefaultFileSystem()->Stat(path);
}

absl::Status FaultInjectionFileSystem::CreateDirs(const std::string& dir) {
  MLPO_RETURN_IF_ERROR(
      Annotate(Check(Op::kMkdir, dir), "create directory " + dir));
  return DefaultFileSystem()->CreateDirs(dir);
}

absl::StatusOr<std::vector<std::string>> FaultInjectionFileSystem::ListDir(
    const std::string& dir) {
  MLPO_RETURN_IF_ERROR(Annotate(Check(Op::kList, dir), "list " + dir));
  return DefaultFileSystem()->ListDir(dir);
}

absl::Status FaultInjectionFileSystem::Unlink(const std::string& path) {
  MLPO_RETURN_IF_ERROR(Annotate(Check(Op::kUnlink, path), "remove " + path));
  std::string p = AbsolutePath(path);
  BeforeDelete(p);
  MLPO_RETURN_IF_ERROR(DefaultFileSystem()->Unlink(path));
  Deleted(p);
  return absl::OkStatus();
}

absl::Status FaultInjectionFileSystem::RemoveTree(const std::string& path) {
  MLPO_RETURN_IF_ERROR(Annotate(Check(Op::kUnlink, path), "remove " + path));
  MLPO_RETURN_IF_ERROR(DefaultFileSystem()->RemoveTree(path));
  std::string p = AbsolutePath(path);
  MutexLock l(&mu_);
  for (auto it = files_.begin(); it != files_.end();)
    it = it->first == p || Under(it->first, p) ? files_.erase(it) : ++it;
  for (auto it = pending_.begin(); it != pending_.end();)
    it = it->first == p || Under(it->first, p) ? pending_.erase(it) : ++it;
  return absl::OkStatus();
}

absl::Status FaultInjectionFileSystem::Link(const std::string& from,
                                            const std::string& to) {
  MLPO_RETURN_IF_ERROR(Annotate(Check(Op::kLink, to), "link " + to));
  std::string content;
  bool there = ReadAll(from, &content);
  MLPO_RETURN_IF_ERROR(DefaultFileSystem()->Link(from, to));
  MutexLock l(&mu_);
  std::string f = AbsolutePath(from), t = AbsolutePath(to);
  TrackLocked(t, /*created=*/true);
  auto it = files_.find(f);
  if (it != files_.end()) {
    files_[t] = it->second;
  } else if (there) {
    files_[t].synced = std::move(content);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> FaultInjectionFileSystem::ReadFile(
    const std::string& path, size_t max_bytes) {
  MLPO_RETURN_IF_ERROR(Annotate(Check(Op::kReadFile, path), "read " + path));
  return DefaultFileSystem()->ReadFile(path, max_bytes);
}

absl::StatusOr<int> FaultInjectionFileSystem::OpenLockFile(
    const std::string& path, bool create) {
  if (create) MLPO_RETURN_IF_ERROR(Annotate(Check(Op::kOpen, path),
                                            "open " + path));
  std::error_code ec;
  bool existed = fs::exists(path, ec);
  MLPO_ASSIGN_OR_RETURN(int fd,
                        DefaultFileSystem()->OpenLockFile(path, create));
  if (create) Track(AbsolutePath(path), !existed);
  return fd;
}

absl::StatusOr<bool> FaultInjectionFileSystem::TryLock(int fd,
                                                       const std::string& path,
                                                       bool exclusive) {
  MLPO_RETURN_IF_ERROR(Annotate(Check(Op::kLock, path), "lock " + path));
  return DefaultFileSystem()->TryLock(fd, path, exclusive);
}

void FaultInjectionFileSystem::Unlock(int fd) {
  DefaultFileSystem()->Unlock(fd);
}

absl::Status FaultInjectionFileSystem::WriteAt(int fd, const std::string& path,
                                               absl::string_view data,
                                               uint64_t offset) {
  MLPO_RETURN_IF_ERROR(Annotate(Check(Op::kWriteFile, path), "write " + path));
  return DefaultFileSystem()->WriteAt(fd, path, data, offset);
}

absl::StatusOr<int> FaultInjectionFileSystem::OpenForIo(
    const std::string& path, bool create, bool want_direct, bool* direct,
    bool read_only) {
  if (!read_only) MLPO_RETURN_IF_ERROR(Check(Op::kOpen));
  std::error_code ec;
  bool existed = fs::exists(path, ec);
  MLPO_ASSIGN_OR_RETURN(int fd, DefaultFileSystem()->OpenForIo(
                                    path, create, want_direct, direct, read_only));
  if (!read_only) Track(AbsolutePath(path), !existed);
  return fd;
}

absl::Status FaultInjectionFileSystem::Preallocate(int fd,
                                                   const std::string& path,
                                                   uint64_t len) {
  MLPO_RETURN_IF_ERROR(Check(Op::kPreallocate));
  {
    MutexLock l(&mu_);
    if (preallocated_ + len > budget_) {
      ++injected_;
      return ErrnoStatus(ENOSPC, absl::StrCat("preallocate ", path,
                                              " (injected: disk full)"));
    }
    preallocated_ += len;
  }
  return DefaultFileSystem()->Preallocate(fd, path, len);
}

int FaultInjectionFileSystem::ErrnoOf(const absl::Status&) {
  MutexLock l(&mu_);
  return last_errno_ ? last_errno_ : EIO;
}

absl::Status FaultInjectionFileSystem::Fdatasync(int fd,
                                                 const std::string& path) {
  MLPO_RETURN_IF_ERROR(Annotate(Check(Op::kSync, path), "fdatasync " + path));
  MLPO_RETURN_IF_ERROR(DefaultFileSystem()->Fdatasync(fd, path));
  Snapshot(AbsolutePath(path));
  return absl::OkStatus();
}

absl::Status FaultInjectionFileSystem::SyncDir(const std::string& dir) {
  MLPO_RETURN_IF_ERROR(Annotate(Check(Op::kSyncDir, dir), "fsync " + dir));
  MLPO_RETURN_IF_ERROR(DefaultFileSystem()->SyncDir(dir));
  DirSynced(AbsolutePath(dir));
  return absl::OkStatus();
}

absl::Status FaultInjectionFileSystem::CopyFile(
    const std::string& from, const std::string& to,
    const std::function<void(uint64_t)>& progress) {
  MLPO_RETURN_IF_ERROR(Annotate(Check(Op::kWriteFile, to), "copy to " + to));
  std::error_code ec;
  bool existed = fs::exists(to, ec);
  MLPO_RETURN_IF_ERROR(FileSystem::CopyFile(from, to, progress));
  // Synced by FileSystem::CopyFile: its content is what a reboot finds.
  std::string content;
  if (!ReadAll(to, &content))
    return absl::InternalError("fault injection: cannot read back " + to);
  MutexLock l(&mu_);
  std::string p = AbsolutePath(to);
  TrackLocked(p, !existed);
  files_[p].synced = std::move(content);
  return absl::OkStatus();
}

absl::Status FaultInjectionFileSystem::Rename(const std::string& from,
                                              const std::string& to) {
  MLPO_RETURN_IF_ERROR(Annotate(Check(Op::kRename, from), "rename " + from));
  BeforeRename(AbsolutePath(to));
  MLPO_RETURN_IF_ERROR(DefaultFileSystem()->Rename(from, to));
  Renamed(AbsolutePath(from), AbsolutePath(to));
  return absl::OkStatus();
}

absl::Status FaultInjectionFileSystem::WriteFileSynced(const std::string& path,
                                                       absl::string_view data) {
  MLPO_RETURN_IF_ERROR(Annotate(Check(Op::kWriteFile, path), "write " + path));
  std::error_code ec;
  bool existed = fs::exists(path, ec);
  MLPO_RETURN_IF_ERROR(DefaultFileSystem()->WriteFileSynced(path, data));
  MutexLock l(&mu_);
  std::string p = AbsolutePath(path);
  TrackLocked(p, !existed);
  files_[p].synced = std::string(data);
  return absl::OkStatus();
}

rocksdb::Env* FaultInjectionFileSystem::RocksEnv() { return env_.get(); }

void FaultInjectionFileSystem::SetTornWrites(uint64_t seed) {
  MutexLock l(&mu_);
  torn_seed_ = seed;
}

uint64_t FaultInjectionFileSystem::torn_blocks() const {
  MutexLock l(&mu_);
  return torn_blocks_;
}

absl::Status FaultInjectionFileSystem::RestoreToLastSync() {
  MutexLock l(&mu_);
  std::error_code ec;
  // Directory entries that never became durable, undone newest first
  // across all directories, so each is undone on the tree it was made in.
  std::vector<EntryOp*> undo;
  for (auto& [dir, ops] : pending_)
    for (EntryOp& op : ops) undo.push_back(&op);
  std::sort(undo.begin(), undo.end(),
            [](const EntryOp* a, const EntryOp* b) { return a->seq > b->seq; });
  for (EntryOp* it : undo) {
    if (it->deleted) {
      // The deletion never became durable: the file comes back.
      if (it->displaced) files_[it->to] = *it->displaced;
      continue;
    }
    if (!it->rename) {
      fs::remove(it->to, ec);
      files_.erase(it->to);
      continue;
    }
    if (it->dir) {
      if (fs::exists(it->to, ec)) fs::rename(it->to, it->from, ec);
      RekeyLocked(it->to, it->from);
      continue;
    }
    if (fs::exists(it->to, ec)) fs::rename(it->to, it->from, ec);
    files_[it->from] = files_[it->to];
    if (it->displaced) {
      files_[it->to] = *it->displaced;
    } else {
      files_.erase(it->to);
    }
  }
  pending_.clear();
  // Every file as of its last sync (never synced: empty). Files whose
  // directory went away (moved or removed outside this file system, like
  // the index backups' directories) are left alone.
  for (auto& [path, f] : files_) {
    if (!fs::is_directory(DirOf(path), ec)) continue;
    std::string d = f.synced ? *f.synced : std::string();
    if (torn_seed_ != 0 && fs::path(path).filename().string().rfind("seg-", 0) == 0) {
      // Part of what was in flight reached the platters: whole 4 KiB
      // blocks, each kept or not at random.
      std::ifstream in(path, std::ios::binary);
      std::string now((std::istreambuf_iterator<char>(in)),
                      std::istreambuf_iterator<char>());
      std::mt19937_64 rng(torn_seed_ ^ std::hash<std::string>()(path));
      const size_t kBlock = 4096;
      for (size_t off = 0; off < now.size(); off += kBlock) {
        size_t n = std::min(kBlock, now.size() - off);
        bool differs = off + n > d.size() ||
                       std::memcmp(now.data() + off, d.data() + off, n) != 0;
        if (!differs || rng() % 2 == 0) continue;
        if (d.size() < off + n) d.resize(off + n, '\0');
        std::memcpy(d.data() + off, now.data() + off, n);
        ++torn_blocks_;
      }
    }
    int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC,
                    kPrivateFileMode);
    if (fd < 0) return ErrnoStatus(errno, "restore " + path);
    size_t done = 0;
    while (done < d.size()) {
      ssize_t n = ::write(fd, d.data() + done, d.size() - done);
      if (n <= 0) {
        ::close(fd);
        return ErrnoStatus(errno, "restore " + path);
      }
      done += static_cast<size_t>(n);
    }
    ::fsync(fd);
    ::close(fd);
  }
  cut_ = false;
  faults_.clear();
  return absl::OkStatus();
}

}  // namespace mlpo
