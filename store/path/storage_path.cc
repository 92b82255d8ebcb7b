#include "store/path/storage_path.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>

#include <filesystem>
#include <fstream>
#include <random>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/trace.h"
#include "store/fs/file_util.h"
#include "base/status_macros.h"

namespace mlpo {
namespace fs = std::filesystem;

const char* PathKindName(PathKind k) {
  switch (k) {
    case PathKind::kNvme: return "nvme";
    case PathKind::kPfs: return "pfs";
    default: return "other";
  }
}

absl::StatusOr<PathKind> ParsePathKind(absl::string_view s) {
  if (s == "nvme") return PathKind::kNvme;
  if (s == "pfs") return PathKind::kPfs;
  if (s == "other") return PathKind::kOther;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown path kind '", s, "' (nvme, pfs or other)"));
}

std::string NewUuid() {
  std::random_device rd;
  return absl::StrFormat("%08x%08x%08x%08x", rd(), rd(), rd(), rd());
}

absl::StatusOr<std::string> PathUuid(const std::string& root, bool create,
                                     FileSystem* fs) {
  if (fs == nullptr) fs = DefaultFileSystem();
  std::string dir = root + "/.mlpo";
  std::string file = dir + "/uuid";
  auto text = fs->ReadFile(file, 4096);
  if (text.ok()) {
    std::string id(absl::StripAsciiWhitespace(*text));
    bool hex = id.size() == 32 &&
               std::all_of(id.begin(), id.end(), [](char c) {
                 return absl::ascii_isxdigit(static_cast<unsigned char>(c));
               });
    if (hex) return id;
    std::string shown = id.substr(0, 40);
    for (char& c : shown)
      if (!absl::ascii_isprint(static_cast<unsigned char>(c))) c = '?';
    return absl::DataLossError(absl::StrCat(
        "path ", root, ": identity file ", file,
        " is damaged (expected 32 hex digits, found '", shown, "'",
        id.size() > 40 ? "..." : "", ")"));
  }
  if (!absl::IsNotFound(text.status()))
    return Annotate(text.status(), absl::StrCat("path ", root, " identity"));
  if (!create)
    return absl::NotFoundError(
        absl::StrCat("path ", root, " has no identity file ", file));
  MLPO_RETURN_IF_ERROR(fs->CreateDirs(dir));
  // Ranks of a node open their stores on the same roots at once: the first
  // to link its identity file in place wins, the others read the winner's.
  std::string id = NewUuid();
  std::string tmp = absl::StrCat(file, ".", id, ".tmp");
  MLPO_RETURN_IF_ERROR(fs->WriteFileAtomic(tmp, id + "\n"));
  absl::Status linked = fs->Link(tmp, file);
  fs->Unlink(tmp).IgnoreError();  // a leftover tmp file is harmless
  if (absl::IsAlreadyExists(linked))
    return PathUuid(root, /*create=*/false, fs);
  MLPO_RETURN_IF_ERROR(Annotate(linked, absl::StrCat("create ", file)));
  MLPO_RETURN_IF_ERROR(fs->SyncDir(dir));
  return id;
}

absl::StatusOr<uint64_t> ExistingSegmentBytes(const std::string& dir,
                                              FileSystem* fs) {
  if (fs == nullptr) fs = DefaultFileSystem();
  auto st = fs->Stat(dir + "/seg-000000");
  if (absl::IsNotFound(st.status())) return 0;
  if (!st.ok()) return st.status();
  return st->size;
}

int CountSegmentFiles(const std::string& dir, FileSystem* fs) {
  if (fs == nullptr) fs = DefaultFileSystem();
  auto names = fs->ListDir(dir);
  if (!names.ok()) return 0;
  int n = 0;
  for (auto& name : *names)
    if (name.rfind("seg-", 0) == 0) ++n;
  return n;
}

absl::StatusOr<std::unique_ptr<StoragePath>> StoragePath::Open(
    const PathOptions& options, const std::string& ns, bool create) {
  if (options.segment_bytes == 0 || options.segment_bytes % kIoAlignment)
    return absl::InvalidArgumentError(absl::StrCat(
        "path ", options.root, ": segment_bytes ", options.segment_bytes,
        " is not a positive multiple of 4096"));
  FileSystem* fsys = options.fs != nullptr ? options.fs : DefaultFileSystem();
  if (!fsys->IsDirectory(options.root))
    return absl::NotFoundError(absl::StrCat(
        "path root ", options.root, " does not exist or is not a directory"));
  if (create && options.read_only)
    return absl::InvalidArgumentError(absl::StrCat(
        "path ", options.root, ": cannot create a store read-only"));
  std::unique_ptr<StoragePath> p(new StoragePath(options));
  auto uuid = PathUuid(options.root, create, fsys);
  if (absl::IsNotFound(uuid.status()) && !options.known_uuid.empty())
    uuid = options.known_uuid;
  MLPO_ASSIGN_OR_RETURN(p->uuid_, std::move(uuid));
  p->dir_ = absl::StrCat(options.root, "/", ns);
  if (create) {
    MLPO_RETURN_IF_ERROR(fsys->CreateDirs(p->dir_));
  } else if (!fsys->IsDirectory(p->dir_)) {
    return absl::NotFoundError(
        absl::StrCat("store directory ", p->dir_, " is missing"));
  }
  int slots = options.slots >= 0 ? options.slots
                                 : (options.kind == PathKind::kPfs ? 1 : 0);
  if (options.read_only) slots = 0;  // slot files would need write access
  std::unique_ptr<IoSlots> slot_set;
  if (slots > 0) {
    MLPO_ASSIGN_OR_RETURN(
        slot_set, IoSlots::Open(options.root + "/.mlpo/slots", slots, fsys));
  }
  // Nothing to enforce (no caps, no slots): no admission on the hot path.
  if (options.read_cap > 0 || options.write_cap > 0 || slot_set != nullptr)
    p->admission_ = std::make_unique<PathAdmission>(
        options.read_cap, options.write_cap, options.cap_burst,
        std::move(slot_set), options.slot_turn);
  IoEngineOptions eo;
  eo.kind = options.engine;
  eo.queue_depth = options.queue_depth;
  eo.admission = p->admission_.get();
  eo.completion_filter = p->fs()->CompletionFilter();
  eo.name = options.root;
  MLPO_ASSIGN_OR_RETURN(p->engine_, IoEngine::Create(eo));
  MutexLock l(&p->mu_);
  p->alloc_ = std::make_unique<ExtentAllocator>(options.segment_bytes);
  // Reopen existing segments in order; a gap means a lost file.
  uint64_t count = 0;
  {
    auto names = fsys->ListDir(p->dir_);
    if (!names.ok()) return names.status();
    for (const std::string& name : *names) {
      uint64_t n = 0;
      if (name.size() == 10 && name.rfind("seg-", 0) == 0 &&
          absl::SimpleAtoi(name.substr(4), &n))
        count = std::max(count, n + 1);
    }
  }
  std::vector<uint64_t> missing;
  for (uint64_t n = 0; n < count; ++n) {
    Segment seg;
    if (fsys->Exists(absl::StrFormat("%s/seg-%06d", p->dir_, n))) {
      MLPO_RETURN_IF_ERROR(p->OpenSegment(n, &seg));
    } else {
      seg.missing = true;
      missing.push_back(n);
    }
    p->segments_.push_back(seg);
    p->alloc_->AddSegment();
  }
  if (!missing.empty() && !options.allow_missing_segments)
    return p->MissingError(missing);
  return p;
}

absl::Status StoragePath::OpenSegment(uint64_t n, Segment* seg) {
  std::string f = absl::StrFormat("%s/seg-%06d", dir_, n);
  bool direct;
  MLPO_ASSIGN_OR_RETURN(int fd, fs()->OpenForIo(f, false, options_.direct,
                                                &direct, options_.read_only));
  direct_ = direct;
  if (!options_.read_only) {
    // Written in place: a second link (a `cp -al` copy) would see every
    // write. The store's open names every such file first; this guards
    // the tools that open paths themselves.
    if (absl::Status sole = fs()->CheckSoleLink(fd, f, "segment file");
        !sole.ok()) {
      ::close(fd);
      return sole;
    }
  }
  auto h = engine_->RegisterFile(fd, f, direct);
  if (!h.ok()) {
    ::close(fd);
    return h.status();
  }
  *seg = Segment{fd, *h, false, false};
  return absl::OkStatus();
}

absl::Status StoragePath::MissingError(
    const std::vector<uint64_t>& missing) const {
  std::string names;
  for (size_t i = 0; i < missing.size() && i < 8; ++i)
    absl::StrAppend(&names, i ? ", " : "",
                    absl::StrFormat("seg-%06d", missing[i]));
  if (missing.size() > 8) absl::StrAppend(&names, ", ...");
  return absl::DataLossError(absl::StrCat(
      "path ", options_.root, ": ", missing.size(),
      " segment file(s) of the store are missing from ", dir_, " (", names,
      "). Nothing was changed. `mlpo verify --deep STORE` lists every "
      "version they held; `mlpo recover --salvage STORE` keeps every tag "
      "and head that does not touch them"));
}

absl::Status StoragePath::EnsureSegments(uint64_t count) {
  MutexLock l(&mu_);
  std::vector<uint64_t> missing;
  for (uint64_t n = segments_.size(); n < count; ++n) {
    Segment seg;
    seg.missing = true;
    missing.push_back(n);
    segments_.push_back(seg);
    alloc_->AddSegment();
  }
  if (!missing.empty() && !options_.allow_missing_segments)
    return MissingError(missing);
  return absl::OkStatus();
}

std::vector<std::string> StoragePath::MissingSegments() const {
  MutexLock l(&mu_);
  std::vector<std::string> out;
  for (size_t n = 0; n < segments_.size(); ++n)
    if (segments_[n].missing)
      out.push_back(absl::StrFormat("%s/seg-%06d", dir_, n));
  return out;
}

std::vector<std::string> StoragePath::ShortSegments() const {
  std::vector<std::string> out;
  size_t n_segments;
  {
    MutexLock l(&mu_);
    n_segments = segments_.size();
  }
  for (size_t n = 0; n < n_segments; ++n) {
    std::string f = absl::StrFormat("%s/seg-%06d", dir_, n);
    auto st = fs()->Stat(f);
    if (st.ok() && st->size < options_.segment_bytes) out.push_back(f);
  }
  return out;
}

absl::Status StoragePath::RepairSegments() {
  MutexLock l(&mu_);
  for (size_t n = 0; n < segments_.size(); ++n) {
    std::string f = absl::StrFormat("%s/seg-%06d", dir_, n);
    Segment& seg = segments_[n];
    if (seg.missing) {
      bool direct;
      MLPO_ASSIGN_OR_RETURN(int fd, fs()->OpenForIo(f, true, options_.direct,
                                                     &direct, false));
      ::close(fd);
      MLPO_RETURN_IF_ERROR(OpenSegment(n, &seg));
    }
    auto st = fs()->Stat(f);
    if (!st.ok()) return st.status();
    if (st->size < options_.segment_bytes) {
      MLPO_RETURN_IF_ERROR(fs()->Preallocate(seg.fd, f, options_.segment_bytes));
      MLPO_RETURN_IF_ERROR(fs()->Fdatasync(seg.fd, f));
    }
  }
  return fs()->SyncDir(dir_);
}

StoragePath::~StoragePath() {
  if (engine_) engine_->Close();
  MutexLock l(&mu_);
  for (auto& s : segments_) ::close(s.fd);
}

std::string StoragePath::SegmentFile(uint64_t off) const {
  return absl::StrFormat("%s/seg-%06d", dir_, off / options_.segment_bytes);
}

absl::Status StoragePath::AddSegment() {
  uint64_t n = segments_.size();
  uint64_t seg = options_.segment_bytes;
  if (options_.capacity > 0 && (n + 1) * seg > options_.capacity)
    return absl::ResourceExhaustedError(absl::StrCat(
        "path ", options_.root, " is full: capacity ", options_.capacity,
        " bytes, ", alloc_->free(), " free"));
  std::string f = absl::StrFormat("%s/seg-%06d", dir_, n);
  bool direct;
  MLPO_ASSIGN_OR_RETURN(int fd, fs()->OpenForIo(f, true, options_.direct,
                                                 &direct, false));
  // Its size must be durable before extents in it are: a segment that comes
  // back short after a power loss would look truncated.
  absl::Status made = fs()->Preallocate(fd, f, seg);
  if (made.ok()) made = fs()->Fdatasync(fd, f);
  if (!made.ok()) {
    ::close(fd);
    fs()->Unlink(f).IgnoreError();  // the error that matters is `made`
    return Annotate(made, absl::StrCat("path ", options_.root, ": segment"));
  }
  // The new file's directory entry must be durable before extents in it are.
  absl::Status synced = fs()->SyncDir(dir_);
  if (!synced.ok()) {
    ::close(fd);
    fs()->Unlink(f).IgnoreError();
    return Annotate(synced, absl::StrCat("path ", options_.root));
  }
  auto h = engine_->RegisterFile(fd, f, direct);
  if (!h.ok()) {
    ::close(fd);
    return h.status();
  }
  direct_ = direct;
  segments_.push_back({fd, *h, false});
  alloc_->AddSegment();
  return absl::OkStatus();
}

absl::StatusOr<std::vector<Range>> StoragePath::Allocate(uint64_t length) {
  MutexLock l(&mu_);
  uint64_t need = (length + kIoAlignment - 1) / kIoAlignment * kIoAlignment;
  while (alloc_->free() < need) MLPO_RETURN_IF_ERROR(AddSegment());
  auto r = alloc_->Allocate(need);
  if (!r.ok()) return Annotate(r.status(), absl::StrCat("path ", root()));
  return r;
}

absl::Status StoragePath::Free(Range r) {
  MutexLock l(&mu_);
  return Annotate(alloc_->Free(r), absl::StrCat("path ", root()));
}

absl::Status StoragePath::MarkUsed(Range r) {
  MutexLock l(&mu_);
  if (r.offset + r.length > alloc_->total()) {
    // An extent past the last segment means a segment file vanished.
    return absl::DataLossError(absl::StrCat(
        "path ", root(), ": extent [", r.offset, ", +", r.length,
        ") lies past the last segment file (", SegmentFile(r.offset),
        " missing?)"));
  }
  return Annotate(alloc_->MarkUsed(r), absl::StrCat("path ", root()));
}

void StoragePath::Read(Range r, void* buf, IoCallback done) {
  Transfer(IoOp::kRead, r, buf, std::move(done));
}

void StoragePath::Write(Range r, const void* buf, IoCallback done) {
  Transfer(IoOp::kWrite, r, const_cast<void*>(buf), std::move(done));
}

void StoragePath::Transfer(IoOp op, Range r, void* buf, IoCallback done) {
  uint64_t seg = r.offset / options_.segment_bytes;
  int handle = -1;
  {
    MutexLock l(&mu_);
    if (seg < segments_.size() &&
        SegmentOffset(r.offset) + r.length <= options_.segment_bytes) {
      handle = segments_[seg].handle;
      if (op == IoOp::kWrite) segments_[seg].dirty = true;
    }
  }
  if (handle < 0) {
    bool missing = false;
    {
      MutexLock l(&mu_);
      missing = seg < segments_.size() && segments_[seg].missing;
    }
    if (missing) {
      done(absl::NotFoundError(absl::StrCat("segment file ",
                                            SegmentFile(r.offset),
                                            " is missing")));
      return;
    }
    done(absl::InvalidArgumentError(absl::StrCat(
        "path ", root(), ": extent [", r.offset, ", +", r.length,
        ") is outside the segments")));
    return;
  }
  {
    MutexLock l(&busy_mu_);
    if (inflight_++ == 0) busy_since_ = absl::Now();
  }
  IoRequest req;
  req.op = op;
  req.file = handle;
  req.offset = SegmentOffset(r.offset);
  req.buf = buf;
  req.len = r.length;
  const absl::Time traced =
      Trace::Get()->enabled() ? absl::Now() : absl::InfinitePast();
  req.done = [this, op, len = r.length, traced,
              done = std::move(done)](const absl::Status& s) {
    if (s.ok()) (op == IoOp::kRead ? bytes_read_ : bytes_written_) += len;
    if (traced != absl::InfinitePast())
      Trace::Get()->Complete(op == IoOp::kRead ? "read" : "write", "io",
                             "path " + options_.root, traced, absl::Now(),
                             len);
    {
      MutexLock l(&busy_mu_);
      if (--inflight_ == 0) busy_ += absl::Now() - busy_since_;
    }
    done(s);
  };
  engine_->Submit(std::move(req));
}

absl::Status StoragePath::Sync() {
  std::vector<std::pair<int, std::string>> todo;
  {
    MutexLock l(&mu_);
    for (size_t i = 0; i < segments_.size(); ++i) {
      if (!segments_[i].dirty) continue;
      segments_[i].dirty = false;
      todo.emplace_back(segments_[i].fd,
                        SegmentFile(i * options_.segment_bytes));
    }
  }
  for (auto& [fd, name] : todo) {
    absl::Status st = fs()->Fdatasync(fd, name);
    if (st.ok()) {
      // A segment deleted while open (its directory removed, a stray rm)
      // takes every write "made durable" here with it: say so now instead
      // of acknowledging versions nobody will find.
      auto links = fs()->LinkCount(fd, name);
      if (links.ok() && *links == 0)
        st = absl::DataLossError(absl::StrCat(
            "path ", options_.root, ": segment file ", name,
            " was deleted while the store had it open; what was written "
            "to it is gone"));
    }
    if (!st.ok()) {
      // Whatever was written since the last good sync is suspect: keep the
      // segment dirty so the next Sync tries again.
      MutexLock l(&mu_);
      for (size_t i = 0; i < segments_.size(); ++i)
        if (segments_[i].fd == fd) segments_[i].dirty = true;
      return st;
    }
  }
  return absl::OkStatus();
}

absl::Status StoragePath::SetCaps(uint64_t read_cap, uint64_t write_cap) {
  if (admission_ == nullptr)
    return absl::FailedPreconditionError(absl::StrCat(
        "path ", options_.root, " was opened without a cap; give it one at "
        "open to change it later"));
  admission_->SetCaps(read_cap, write_cap);
  return absl::OkStatus();
}

PathUsage StoragePath::Usage() const {
  MutexLock l(&mu_);
  PathUsage u;
  u.total = alloc_->total();
  u.used = alloc_->used();
  u.free = alloc_->free();
  if (options_.capacity > u.total) u.free += options_.capacity - u.total;
  return u;
}

PathCounters StoragePath::Counters() const {
  PathCounters c;
  c.bytes_read = bytes_read_.load();
  c.bytes_written = bytes_written_.load();
  MutexLock l(&busy_mu_);
  absl::Duration b = busy_;
  if (inflight_ > 0) b += absl::Now() - busy_since_;
  c.busy_s = absl::ToDoubleSeconds(b);
  return c;
}

}  // namespace mlpo
