#include "store/meta/meta_index.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <filesystem>

#include "absl/strings/match.h"
#include "base/status_reason.h"
#include "rocksdb/utilities/checkpoint.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "store/checksum/checksum.h"
#include "store/fs/file_util.h"
#include "store/fs/private_rocks_fs.h"
#include "base/status_macros.h"

namespace mlpo {
namespace {

// The index file whose absence makes RocksDB's open fail, when one is
// missing: CURRENT, or the MANIFEST that CURRENT names. RocksDB reports it
// as an I/O error (a writer) or "try again" (a reader, which takes it for
// a writer's switch to a new MANIFEST); read after the failure, CURRENT
// names a file that is there in a live writer's switch, so only real loss
// is named.
std::string MissingIndexFile(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path current = fs::path(dir) / "CURRENT";
  if (!fs::exists(current, ec)) return ec ? "" : current.string();
  auto text = ReadSmallFile(current.string(), 4096);
  if (!text.ok()) return "";
  std::string name = *text;
  while (!name.empty() && (name.back() == '\n' || name.back() == '\r'))
    name.pop_back();
  if (name.empty() || name.find('/') != std::string::npos) return "";
  const fs::path manifest = fs::path(dir) / name;
  if (!fs::exists(manifest, ec) && !ec) return manifest.string();
  return "";
}

constexpr size_t kSealSlot = 512;

bool IsNoSpace(const rocksdb::Status& s) {
  return s.IsNoSpace() ||
         absl::StrContains(s.ToString(), "No space left on device");
}

// Gives the reserve's blocks back to the file system; true when there was
// one to give.
bool ReleaseReserve(const std::string& dir) {
  std::string file = absl::StrCat(dir, "/", kIndexReserveFile);
  return ::unlink(file.c_str()) == 0;
}

// Takes kIndexReserveBytes for the reserve if it is missing (best effort:
// on a disk with less free than that, there is none until a later open).
void MakeReserve(const std::string& dir) {
  std::string file = absl::StrCat(dir, "/", kIndexReserveFile);
  struct stat st;
  if (::stat(file.c_str(), &st) == 0 &&
      static_cast<uint64_t>(st.st_size) >= kIndexReserveBytes)
    return;
  std::string tmp = file + ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC,
                  kPrivateFileMode);
  if (fd < 0) return;
  // Blocks really taken: fallocate, or zeros where it is not supported.
  bool ok = ::posix_fallocate(fd, 0, kIndexReserveBytes) == 0;
  if (!ok) {
    std::string zeros(64 << 10, '\0');
    ok = true;
    for (uint64_t at = 0; ok && at < kIndexReserveBytes; at += zeros.size())
      ok = ::pwrite(fd, zeros.data(), zeros.size(), static_cast<off_t>(at)) ==
           static_cast<ssize_t>(zeros.size());
  }
  ok = ok && ::fdatasync(fd) == 0;
  ::close(fd);
  if (!ok || ::rename(tmp.c_str(), file.c_str()) != 0) ::unlink(tmp.c_str());
}

enum Cf { kObjects = 1, kVersions, kHeads, kTags, kPaths, kMeta };
const char* const kCfNames[] = {"default", "objects", "versions", "heads",
                                "tags",    "paths",   "meta"};

std::string BE64(uint64_t v) {
  std::string s(8, '\0');
  for (int i = 7; i >= 0; --i) {
    s[i] = static_cast<char>(v & 0xff);
    v >>= 8;
  }
  return s;
}
uint64_t FromBE64(absl::string_view s) {
  uint64_t v = 0;
  for (size_t i = 0; i < 8 && i < s.size(); ++i)
    v = (v << 8) | static_cast<unsigned char>(s[i]);
  return v;
}
std::string Pair(const std::string& a, absl::string_view b) {
  return absl::StrCat(a, absl::string_view("\0", 1), b);
}
absl::Status RocksStatus(const rocksdb::Status& s, absl::string_view what) {
  if (s.ok()) return absl::OkStatus();
  std::string msg = absl::StrCat(what, ": ", s.ToString());
  if (s.IsNoSpace()) return absl::ResourceExhaustedError(msg);
  if (s.IsCorruption()) return absl::DataLossError(msg);
  // RocksDB says EACCES only in words: a file of the index another user
  // owns (a command run as root) is the user's to fix, not an internal
  // error.
  // (Any code: an unreadable CURRENT comes as InvalidArgument, "options
  // incompatible with filesystem: IO error ... Permission denied".)
  if (absl::StrContains(s.ToString(), "Permission denied"))
    return absl::PermissionDeniedError(absl::StrCat(
        msg, " (a file of the index belongs to another user: `ls -l` the "
        "index directory; run as its owner, or give the files back with "
        "chown)"));
  if (s.IsIOError()) return absl::InternalError(msg);
  if (s.IsBusy() || s.IsTryAgain()) return absl::UnavailableError(msg);
  return absl::InternalError(msg);
}

}  // namespace

namespace {

std::string SealSlot(const std::string& uuid, uint64_t seq) {
  std::string body = absl::StrCat("MLPOSEAL1 ", uuid, " ", seq);
  std::string slot = absl::StrCat(
      body, " ", absl::StrFormat("%016x", Checksum(body.data(), body.size())),
      "\n");
  slot.resize(kSealSlot, '\0');
  return slot;
}

absl::StatusOr<uint64_t> ReadSealFile(const std::string& file, FileSystem* fs,
                                      const std::string& uuid) {
  if (fs == nullptr) fs = DefaultFileSystem();
  auto text = fs->ReadFile(file, 2 * kSealSlot);
  if (absl::IsNotFound(text.status())) return 0;
  if (!text.ok()) return text.status();
  uint64_t best = 0;
  for (size_t off = 0; off < text->size(); off += kSealSlot) {
    absl::string_view slot = absl::string_view(*text).substr(off, kSealSlot);
    size_t nl = slot.find('\n');
    if (nl == absl::string_view::npos) continue;
    std::vector<std::string> f = absl::StrSplit(slot.substr(0, nl), ' ');
    if (f.size() != 4 || f[0] != "MLPOSEAL1") continue;
    std::string body = absl::StrCat(f[0], " ", f[1], " ", f[2]);
    if (absl::StrFormat("%016x", Checksum(body.data(), body.size())) != f[3])
      continue;  // a torn or damaged slot: the other one counts
    uint64_t seq = 0;
    if (!absl::SimpleAtoi(f[2], &seq)) continue;
    if (!uuid.empty() && f[1] != uuid)
      return absl::FailedPreconditionError(absl::StrCat(
          "index seal ", file, " belongs to store ", f[1],
          ", not to this index's store ", uuid,
          ": was another store's index copied here?"));
    best = std::max(best, seq);
  }
  return best;
}

}  // namespace

absl::StatusOr<uint64_t> ReadSeal(const std::string& dir, FileSystem* fs,
                                  const std::string& uuid) {
  return ReadSealFile(absl::StrCat(dir, "/", kSealFile), fs, uuid);
}

uint64_t ReadSealCopies(const std::vector<std::string>& dirs, FileSystem* fs,
                        const std::string& uuid) {
  uint64_t best = 0;
  for (const std::string& d : dirs) {
    auto seq = ReadSealFile(absl::StrCat(d, "/", kSealCopyFile), fs, uuid);
    if (seq.ok()) best = std::max(best, *seq);
  }
  return best;
}

absl::Status WriteSealCopy(const std::string& dir, FileSystem* fs,
                           const std::string& uuid, uint64_t sequence) {
  if (fs == nullptr) fs = DefaultFileSystem();
  return fs->WriteFileAtomic(absl::StrCat(dir, "/", kSealCopyFile),
                             SealSlot(uuid, sequence));
}

absl::Status WriteSealCopyInPlace(const std::string& dir, FileSystem* fs,
                                  const std::string& uuid, uint64_t sequence,
                                  uint64_t turn) {
  if (fs == nullptr) fs = DefaultFileSystem();
  const std::string file = absl::StrCat(dir, "/", kSealCopyFile);
  MLPO_ASSIGN_OR_RETURN(int fd, fs->OpenLockFile(file, /*create=*/true));
  absl::Status st = fs->CheckSoleLink(fd, file, "index seal copy");
  if (st.ok())
    st = fs->WriteAt(fd, file, SealSlot(uuid, sequence),
                     (turn % 2) * kSealSlot);
  ::close(fd);
  return st;
}

void RemoveSealCopies(const std::vector<std::string>& dirs, FileSystem* fs) {
  if (fs == nullptr) fs = DefaultFileSystem();
  for (const std::string& d : dirs) {
    std::string f = absl::StrCat(d, "/", kSealCopyFile);
    if (fs->Exists(f)) (void)fs->Unlink(f);
  }
}

namespace {

// A reader killed before it closed leaves its secondary instance's
// directory ("mlpo-reader-<pid>-XXXXXX"): removed by the next reader once
// that pid is gone. Best effort.
void RemoveDeadReaders(const std::string& base) {
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(base, ec)) {
    std::string name = e.path().filename().string();
    if (name.rfind("mlpo-reader-", 0) != 0) continue;
    std::string rest = name.substr(12);
    int pid = 0;
    if (!absl::SimpleAtoi(rest.substr(0, rest.find('-')), &pid) || pid <= 0)
      continue;
    if (::kill(pid, 0) == 0 || errno != ESRCH) continue;  // alive, or unsure
    std::error_code ignored;
    std::filesystem::remove_all(e.path(), ignored);
  }
}

}  // namespace

// Long (about 125 lines): RocksDB's options, each with the reason it is
// set so written beside it, then the open's failures told apart (damage,
// permission, a creation cut short); the options are one struct built in
// one place on purpose.
absl::StatusOr<std::unique_ptr<MetaIndex>> MetaIndex::Open(
    const std::string& dir, Mode mode, FileSystem* fs) {
  if (fs == nullptr) fs = DefaultFileSystem();
  rocksdb::DBOptions opts;
  opts.env = fs->RocksEnv();
  opts.create_if_missing = mode == Mode::kCreate;
  opts.error_if_exists = mode == Mode::kCreate;
  // A writable open creates the families too: a creation killed after
  // RocksDB's CURRENT and before the last family left an index every open
  // refused ("Column family not found"); it holds no record (the format key
  // comes after the families), so the store finishes the creation.
  opts.create_missing_column_families =
      mode != Mode::kReadOnly && mode != Mode::kSecondary;
  opts.max_background_jobs = 2;
  opts.info_log_level = rocksdb::WARN_LEVEL;
  // Our own info log (see NewIndexLogger): RocksDB's aborts the process on
  // its second append after a full disk. A read-only open writes nothing
  // into the store; a reader's goes to its private directory (below).
  if (mode != Mode::kReadOnly && mode != Mode::kSecondary)
    opts.info_log = NewIndexLogger(absl::StrCat(dir, "/LOG"));
  else
    opts.info_log = NewIndexLogger("");
  // Every column family flushes together, so that a reader (a secondary
  // instance) never sees one family's flush without the others'.
  opts.atomic_flush = true;
  // Point-in-time: a damaged WAL replays up to the damage. Whether that lost
  // acknowledged writes is for the seal to say (see the header).
  opts.wal_recovery_mode = rocksdb::WALRecoveryMode::kPointInTimeRecovery;
  // No preallocation: RocksDB reserves 1.1 write buffers (70 MiB) for each
  // new WAL with fallocate, which on a nearly full disk takes the last free
  // blocks (ext4 keeps what it got before ENOSPC), so the store cannot open
  // even to drop a tag and gc, and a process killed before the log's close
  // leaves them taken. The index writes little; appends extend its files.
  opts.allow_fallocate = false;
  std::vector<rocksdb::ColumnFamilyDescriptor> cfs;
  for (const char* n : kCfNames)
    cfs.emplace_back(n, rocksdb::ColumnFamilyOptions());
  std::unique_ptr<MetaIndex> m(new MetaIndex());
  m->dir_ = dir;
  m->fs_ = fs;
  m->read_only_ = mode == Mode::kReadOnly || mode == Mode::kSecondary;
  rocksdb::DB* db = nullptr;
  rocksdb::Status s;
  if (mode == Mode::kSecondary) {
    const char* tmp = std::getenv("TMPDIR");
    std::string base = tmp && *tmp ? tmp : "/tmp";
    RemoveDeadReaders(base);
    std::string templ =
        absl::StrCat(base, "/mlpo-reader-", ::getpid(), "-XXXXXX");
    if (::mkdtemp(templ.data()) == nullptr)
      return ErrnoStatus(errno, absl::StrCat("create a reader's directory ",
                                             templ));
    m->secondary_dir_ = templ;
    opts.info_log = NewIndexLogger(absl::StrCat(templ, "/LOG"));
    opts.max_open_files = -1;  // keep every file the view needs
    s = rocksdb::DB::OpenAsSecondary(opts, dir, m->secondary_dir_, cfs,
                                     &m->cf_, &db);
    if (s.ok()) {
      s = db->TryCatchUpWithPrimary();
      if (!s.ok()) {
        for (auto* h : m->cf_) db->DestroyColumnFamilyHandle(h);
        m->cf_.clear();
        delete db;
        db = nullptr;
      }
    }
  } else if (m->read_only_) {
    s = rocksdb::DB::OpenForReadOnly(opts, dir, cfs, &m->cf_, &db);
  } else {
    s = rocksdb::DB::Open(opts, dir, cfs, &m->cf_, &db);
    if (IsNoSpace(s) && ReleaseReserve(dir)) {
      // A full disk: the reserve's blocks let the index open, so that the
      // commands that free space (drop-tag, gc) can run.
      m->used_reserve_ = true;
      m->cf_.clear();
      s = rocksdb::DB::Open(opts, dir, cfs, &m->cf_, &db);
    }
  }
  if (!s.ok()) {
    if (absl::StrContains(s.ToString(), "Permission denied"))
      return RocksStatus(s, absl::StrCat("open store index ", dir));
    if (m->read_only_ && s.IsInvalidArgument() &&
        absl::StrContains(s.ToString(), "Column family not found"))
      return WithReason(
          absl::NotFoundError(absl::StrCat(
              "store index ", dir, " was never finished: its creation was "
              "cut short before its column families were made (",
              s.ToString(), "). The next writable open (the training job) "
              "finishes it; nothing was stored")),
          kReasonCreationCutShort);
    if (mode != Mode::kCreate) {
      if (std::string missing = MissingIndexFile(dir); !missing.empty())
        return absl::DataLossError(absl::StrCat(
            "store index ", dir, " is damaged: ", missing, " is missing (",
            s.ToString(), "); nothing was changed. `mlpo recover STORE` "
            "rebuilds the index from its backups and says what was lost"));
    }
    if (mode != Mode::kCreate &&
        (s.IsInvalidArgument() || s.IsCorruption() || s.IsNotFound()))
      return absl::DataLossError(absl::StrCat(
          "store index ", dir, " is damaged and cannot be opened (",
          s.ToString(), "); nothing was changed. `mlpo recover STORE` "
          "says what can be recovered"));
    return RocksStatus(s, absl::StrCat("open store index ", dir));
  }
  m->db_.reset(db);
  if (!m->read_only_ && !m->used_reserve_) MakeReserve(dir);
  std::string fmt;
  s = db->Get(rocksdb::ReadOptions(), m->cf_[kMeta], "format", &fmt);
  if (s.IsNotFound() && mode == Mode::kCreate) {
    rocksdb::WriteOptions wo;
    wo.sync = true;
    s = db->Put(wo, m->cf_[kMeta], "format", std::to_string(kStoreFormat));
    if (!s.ok()) return RocksStatus(s, "write format");
  } else if (s.IsNotFound()) {
    // No records at all, or lost ones: the store decides (it compares the
    // index with its seal and its directories).
  } else if (!s.ok()) {
    return RocksStatus(s, absl::StrCat("read format of ", dir));
  } else if (fmt != std::to_string(kStoreFormat)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "store index ", dir, " has format ", fmt, "; this mlpo reads format ",
        kStoreFormat));
  }
  return m;
}

absl::Status MetaIndex::SetSealUuid(const std::string& uuid) {
  if (read_only_) return absl::OkStatus();
  MutexLock l(&seal_mu_);
  if (!poison_.ok()) return poison_;
  seal_uuid_ = uuid;
  if (seal_fd_ < 0) {
    std::string file = absl::StrCat(dir_, "/", kSealFile);
    bool direct = false;
    MLPO_ASSIGN_OR_RETURN(int fd, fs_->OpenForIo(file, /*create=*/true,
                                                 /*want_direct=*/false,
                                                 &direct, false));
    // Written in place: a second link (a `cp -al` copy of the index)
    // would take this store's seal.
    if (absl::Status sole = fs_->CheckSoleLink(fd, file, "index seal");
        !sole.ok()) {
      ::close(fd);
      return sole;
    }
    seal_fd_ = fd;
  }
  // Both slots: a stale slot from an older sequence must not outlive this.
  MLPO_RETURN_IF_ERROR(WriteSeal());
  MLPO_RETURN_IF_ERROR(WriteSeal());
  MLPO_RETURN_IF_ERROR(
      fs_->Fdatasync(seal_fd_, absl::StrCat(dir_, "/", kSealFile)));
  return fs_->SyncDir(dir_);
}

absl::StatusOr<uint64_t> MetaIndex::SyncAndSeal() {
  MutexLock l(&seal_mu_);
  if (!poison_.ok()) return poison_;
  if (read_only_ || seal_uuid_.empty()) return 0;  // not sealed by this open
  uint64_t seq = db_->GetLatestSequenceNumber();
  MLPO_RETURN_IF_ERROR(RocksStatus(db_->FlushWAL(/*sync=*/true),
                                   absl::StrCat("sync store index ", dir_)));
  MLPO_RETURN_IF_ERROR(WriteSeal());
  MLPO_RETURN_IF_ERROR(
      fs_->Fdatasync(seal_fd_, absl::StrCat(dir_, "/", kSealFile)));
  return seq;
}

absl::Status MetaIndex::WriteSeal() {
  if (seal_fd_ < 0 || seal_uuid_.empty()) return absl::OkStatus();
  std::string slot = SealSlot(seal_uuid_, db_->GetLatestSequenceNumber());
  off_t off = static_cast<off_t>((seal_writes_++ % 2) * kSealSlot);
  return fs_->WriteAt(seal_fd_, absl::StrCat(dir_, "/", kSealFile), slot,
                      static_cast<uint64_t>(off));
}

MetaIndex::~MetaIndex() {
  {
    MutexLock l(&seal_mu_);
    if (seal_fd_ >= 0) ::close(seal_fd_);
  }
  if (db_) {
    for (auto* h : cf_) db_->DestroyColumnFamilyHandle(h);
    db_->Close();
    db_.reset();
  }
  if (!secondary_dir_.empty()) {
    std::error_code ec;
    std::filesystem::remove_all(secondary_dir_, ec);
  }
}

absl::StatusOr<MetaSnapshot> MetaIndex::Load() {
  MetaSnapshot snap;
  {
    rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), cf_[kMeta],
                                 "store_uuid", &snap.store_uuid);
    if (!s.ok() && !s.IsNotFound())
      return RocksStatus(s, absl::StrCat("read store uuid of ", dir_));
  }
  auto scan = [&](int cf, auto fn) -> absl::Status {
    std::unique_ptr<rocksdb::Iterator> it(
        db_->NewIterator(rocksdb::ReadOptions(), cf_[cf]));
    for (it->SeekToFirst(); it->Valid(); it->Next()) {
      MLPO_RETURN_IF_ERROR(fn(absl::string_view(it->key().data(), it->key().size()),
                              absl::string_view(it->value().data(), it->value().size())));
    }
    return RocksStatus(it->status(), absl::StrCat("scan index ", dir_));
  };
  MLPO_RETURN_IF_ERROR(scan(kMeta, [&](absl::string_view k, absl::string_view v) {
    if (absl::StartsWith(k, "attr/"))
      snap.attributes[std::string(k.substr(5))] = std::string(v);
    if (k == "next_version") {
      if (v.size() != 8)
        return absl::DataLossError(
            absl::StrCat("corrupt next_version record in ", dir_));
      snap.next_version = FromBE64(v);
    }
    return absl::OkStatus();
  }));
  MLPO_RETURN_IF_ERROR(scan(kObjects, [&](absl::string_view k, absl::string_view v) {
    auto l = ObjectLayout::Decode(v);
    if (!l.ok()) return Annotate(l.status(), absl::StrCat("object ", k));
    snap.objects.emplace(std::string(k), *l);
    return absl::OkStatus();
  }));
  MLPO_RETURN_IF_ERROR(scan(kHeads, [&](absl::string_view k, absl::string_view v) {
    snap.heads[std::string(k)] = FromBE64(v);
    return absl::OkStatus();
  }));
  MLPO_RETURN_IF_ERROR(scan(kTags, [&](absl::string_view k, absl::string_view v) {
    size_t z = k.find('\0');
    if (z == absl::string_view::npos)
      return absl::DataLossError(absl::StrCat("corrupt tag key in ", dir_));
    auto& tag = snap.tags[std::string(k.substr(0, z))];
    // An empty object name is the tag's own marker (so that a tag of a
    // store without committed objects exists too).
    if (z + 1 < k.size()) tag[std::string(k.substr(z + 1))] = FromBE64(v);
    return absl::OkStatus();
  }));
  MLPO_RETURN_IF_ERROR(scan(kVersions, [&](absl::string_view k, absl::string_view v) {
    size_t z = k.find('\0');
    if (z == absl::string_view::npos || k.size() != z + 9)
      return absl::DataLossError(
          absl::StrCat("corrupt version key in ", dir_));
    uint64_t version = FromBE64(k.substr(z + 1));
    std::string where = absl::StrCat("object ", k.substr(0, z), " version ",
                                     version, " in index ", dir_);
    auto r = VersionRecord::Decode(v);
    if (!r.ok()) return Annotate(r.status(), where);
    if (r->version != version)
      return absl::DataLossError(absl::StrCat(
          "corrupt version record: ", where, " says version ", r->version));
    snap.versions.emplace(
        std::make_pair(std::string(k.substr(0, z)), FromBE64(k.substr(z + 1))),
        *r);
    return absl::OkStatus();
  }));
  MLPO_RETURN_IF_ERROR(scan(kPaths, [&](absl::string_view k, absl::string_view v) {
    std::vector<std::string> parts = absl::StrSplit(v, '\t');
    uint64_t seg = 0;
    if ((parts.size() != 3 && parts.size() != 4) || k.size() != 4 ||
        (parts.size() == 4 && !absl::SimpleAtoi(parts[3], &seg)))
      return absl::DataLossError(absl::StrCat("corrupt path record in ", dir_));
    uint64_t id = FromBE64(std::string(4, '\0') + std::string(k));
    if (id >= 4096)
      return absl::DataLossError(
          absl::StrCat("corrupt path record in ", dir_, ": path id ", id));
    if (snap.paths.size() <= id) snap.paths.resize(id + 1);
    snap.paths[id] = {parts[0], parts[1], parts[2], seg};
    return absl::OkStatus();
  }));
  return snap;
}

void MetaIndex::Batch::PutObject(const std::string& n, const ObjectLayout& l) {
  batch_.Put(m_->cf_[kObjects], n, l.Encode());
}
void MetaIndex::Batch::PutVersion(const std::string& n, const VersionRecord& r) {
  batch_.Put(m_->cf_[kVersions], Pair(n, BE64(r.version)), r.Encode());
}
void MetaIndex::Batch::DeleteVersion(const std::string& n, uint64_t v) {
  batch_.Delete(m_->cf_[kVersions], Pair(n, BE64(v)));
}
void MetaIndex::Batch::PutHead(const std::string& n, uint64_t v) {
  batch_.Put(m_->cf_[kHeads], n, BE64(v));
}
void MetaIndex::Batch::DeleteHead(const std::string& n) {
  batch_.Delete(m_->cf_[kHeads], n);
}
void MetaIndex::Batch::PutTag(const std::string& t, const std::string& n,
                              uint64_t v) {
  batch_.Put(m_->cf_[kTags], Pair(t, n), BE64(v));
}
void MetaIndex::Batch::DeleteTag(const std::string& t, const std::string& n) {
  batch_.Delete(m_->cf_[kTags], Pair(t, n));
}
void MetaIndex::Batch::PutPath(uint32_t id, const PathRecord& p) {
  batch_.Put(m_->cf_[kPaths], BE64(id).substr(4),
             absl::StrCat(p.uuid, "\t", p.root, "\t", p.kind, "\t",
                          p.segment_bytes));
}

absl::Status MetaIndex::Apply(Batch* b, bool sync, bool maintenance) {
  rocksdb::WriteOptions wo;
  wo.sync = sync;
  MutexLock l(&seal_mu_);
  if (!poison_.ok()) return poison_;
  if (read_only_)
    return absl::FailedPreconditionError(
        absl::StrCat("store index ", dir_, " is open read-only"));
  // A full disk: a failed write poisons the index, so for a remedy the
  // reserve's blocks go back before the write that would fail (a drop-tag
  // or restore right after a tag filled the disk works the first time).
  struct statvfs vfs;
  if (maintenance && !used_reserve_ && ::statvfs(dir_.c_str(), &vfs) == 0 &&
      static_cast<uint64_t>(vfs.f_bavail) * vfs.f_frsize <
          2 * kIndexReserveBytes &&
      ReleaseReserve(dir_)) {
    used_reserve_ = true;
    std::fprintf(stderr,
                 "mlpo: store index %s: the disk is full; the index's "
                 "reserve (%llu KiB) was given back so that this write can "
                 "land: free space (mlpo drop-tag, mlpo gc) before training "
                 "on\n",
                 dir_.c_str(),
                 static_cast<unsigned long long>(kIndexReserveBytes >> 10));
  }
  absl::Status st = RocksStatus(db_->Write(wo, &b->batch_),
                                absl::StrCat("write store index ", dir_));
  // A synced write makes the whole WAL durable, earlier unsynced records
  // included: everything up to here is now acknowledged.
  if (st.ok() && sync) st = WriteSeal();
  if (!st.ok()) {
    poison_ = absl::Status(
        st.code(),
        absl::StrCat(st.message(),
                     "; the index takes no more writes until the store is "
                     "reopened (what it held before this write is intact)"));
    is_poisoned_.store(true, std::memory_order_release);
    return poison_;
  }
  return absl::OkStatus();
}

absl::Status MetaIndex::VerifyChecksums() {
  rocksdb::Status s = db_->VerifyChecksum();
  if (s.ok()) return absl::OkStatus();
  return absl::DataLossError(absl::StrCat(
      "store index ", dir_, " fails its checksums: ", s.ToString()));
}

absl::Status VerifyIndexCopy(const std::string& dir, FileSystem* fs) {
  MLPO_ASSIGN_OR_RETURN(auto m,
                        MetaIndex::Open(dir, MetaIndex::Mode::kReadOnly, fs));
  MLPO_RETURN_IF_ERROR(m->VerifyChecksums());
  return m->Load().status();
}

absl::Status MetaIndex::poisoned() const {
  if (!is_poisoned_.load(std::memory_order_acquire)) return absl::OkStatus();
  MutexLock l(&seal_mu_);
  return poison_;
}

absl::Status MetaIndex::Checkpoint(const std::string& dir) {
  MLPO_RETURN_IF_ERROR(poisoned());
  rocksdb::Checkpoint* cp = nullptr;
  MLPO_RETURN_IF_ERROR(RocksStatus(rocksdb::Checkpoint::Create(db_.get(), &cp),
                                   absl::StrCat("checkpoint of ", dir_)));
  std::unique_ptr<rocksdb::Checkpoint> owner(cp);
  return RocksStatus(cp->CreateCheckpoint(dir, /*log_size_for_flush=*/0),
                     absl::StrCat("checkpoint of ", dir_, " into ", dir));
}

void MetaIndex::Batch::PutAttribute(const std::string& key,
                                    const std::string& value) {
  batch_.Put(m_->cf_[kMeta], "attr/" + key, value);
}

void MetaIndex::Batch::PutNextVersion(uint64_t v) {
  batch_.Put(m_->cf_[kMeta], "next_version", BE64(v));
}

void MetaIndex::Batch::PutStoreUuid(const std::string& uuid) {
  batch_.Put(m_->cf_[kMeta], "store_uuid", uuid);
}

}  // namespace mlpo
