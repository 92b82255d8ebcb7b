// ObjectStore: open and recover. The identity rules:
//
// A store has an identity, a random uuid made when it is created. It is
// recorded in three places that must agree: the index (meta "store_uuid"),
// the STORE descriptor in the store's directory on every path, and the
// index's seal. Each path root also has its own identity (.mlpo/uuid), which
// the index records per path. So:
//  - An index is never created over directories that already hold a store's
//    data (segment files): a misspelt meta_dir, or an index that was deleted,
//    is an error naming what was found, never a fresh start (data loss
//    probe 1 and 3).
//  - Two paths that are one directory (listed twice, or through a link or a
//    bind mount) are refused before anything is written (probe 2).
//  - An index behind its seal has lost acknowledged writes (a damaged or
//    deleted WAL): an error, until `mlpo recover` accepts the loss and says
//    what it was (probe 4).
//  - Nothing is created or changed until every check has passed: the index
//    is checked through RocksDB's read-only mode first (a writable open
//    would replay, flush and delete a damaged WAL).
//  - Creation writes the path identities and descriptors first and the
//    index last, so a store killed half-way through creation has descriptors
//    but no segment file, and the next open finishes the job.
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "base/size_units.h"
#include "base/status_macros.h"
#include "base/status_reason.h"
#include "nlohmann/json.hpp"
#include "store/config_sanity.h"
#include "store/fs/file_util.h"
#include "store/object_store.h"
#include "store/placement/stripe.h"
#include "store/store_files.h"
#include "store/store_survey.h"
#include "store/store_target.h"

namespace mlpo {
namespace fs = std::filesystem;
namespace {

using Survey = StoreSurvey;

// An index directory without its CURRENT file.
absl::Status DamagedIndexError(const std::string& where, const Survey& sv) {
  if (sv.CreationCutShort())
    return absl::NotFoundError(absl::StrCat(
        where, " was never finished: its creation was cut short (the index "
        "holds only ", absl::StrJoin(sv.index_files, ", "), ", and no data "
        "was stored). The next writable open (the training job) creates it; "
        "nothing is lost"));
  return absl::DataLossError(absl::StrCat(
      where, " is damaged: its CURRENT file is missing, but it holds ",
      absl::StrJoin(sv.index_files, ", "),
      ". Nothing was changed; run `mlpo recover STORE`"));
}

}  // namespace

absl::StatusOr<std::unique_ptr<ObjectStore>> ObjectStore::Open(
    const StoreOptions& options) {
  MLPO_RETURN_IF_ERROR(ValidateStoreOptions(options));
  std::unique_ptr<ObjectStore> s(new ObjectStore(options));
  if (s->options_.meta_dir.empty())
    s->options_.meta_dir = DefaultMetaDir(s->options_);
  MLPO_RETURN_IF_ERROR(s->OpenImpl());
  return s;
}

// Refuses to create an index when the store's directories show that one
// existed: segment files, or descriptors naming another index.
static absl::Status CheckNoStoreData(const StoreOptions& o, const Survey& sv,
                                     const std::string& where,
                                     FileSystem* fsys) {
  std::string other;
  for (auto& p : sv.paths)
    if (!p.meta_dir.empty() && AbsolutePath(p.meta_dir) != AbsolutePath(o.meta_dir))
      other = p.meta_dir;
  std::string hint =
      other.empty()
          ? std::string()
          : absl::StrCat("; their STORE descriptors record the index at ",
                         other, " (is meta_dir misspelt?)");
  if (sv.segments() > 0)
    return absl::FailedPreconditionError(absl::StrCat(
        where, ": there is no index, but the store's directories hold its "
        "data (segment files: ", sv.SegmentSummary(), ")", hint,
        ". mlpo never starts a store afresh over existing data: fix "
        "meta_dir, put the index back from a backup, or run `mlpo recover "
        "STORE` to see what can be done"));
  if (!other.empty() && fsys->Exists(other + "/CURRENT"))
    return absl::FailedPreconditionError(absl::StrCat(
        where, ": there is no index, but the store's directories belong to "
        "the index at ", other, ": is meta_dir misspelt?"));
  return absl::OkStatus();
}

namespace {

// A new store's sizes (CheckConfiguredSizes), and its segment files, which
// are preallocated whole: one larger than the
// free space of its disk would let steps return into the DRAM tier and then
// fail every write-back with "every path is full" (a "1T" for "1G"). Checked
// before anything is created, so a refused config leaves nothing behind.
absl::Status CheckSegmentsFit(const StoreOptions& o) {
  MLPO_RETURN_IF_ERROR(CheckConfiguredSizes(o));
  for (size_t i = 0; i < o.paths.size(); ++i) {
    const auto& po = o.paths[i].path;
    struct statvfs vfs;
    if (::statvfs(po.root.c_str(), &vfs) != 0) continue;  // PathUuid says why
    const uint64_t free =
        static_cast<uint64_t>(vfs.f_bavail) * static_cast<uint64_t>(vfs.f_frsize);
    if (po.segment_bytes > free)
      return absl::InvalidArgumentError(absl::StrCat(
          "path[", i, "] ", po.root, ": segment_bytes ",
          FormatBytes(po.segment_bytes), " is more than the ",
          FormatBytes(free), " free on its disk: each segment file is "
          "preallocated whole. Pick a smaller segment_bytes (default "
          "256 MiB); nothing was created"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ObjectStore::PreparePaths(const std::string& uuid) {
  for (auto& pc : options_.paths) {
    MLPO_RETURN_IF_ERROR(
        PathUuid(pc.path.root, /*create=*/true, fs()).status());
    MLPO_RETURN_IF_ERROR(fs()->CreateDirs(
        absl::StrCat(pc.path.root, "/", StoreNamespace(options_))));
  }
  return WriteStoreDescriptors(options_, uuid, fs());
}

absl::Status ObjectStore::InitializeIndex(MetaIndex* m,
                                          const std::string& uuid) {
  MetaIndex::Batch b = m->NewBatch();
  b.PutStoreUuid(uuid);
  for (size_t i = 0; i < options_.paths.size(); ++i) {
    const auto& po = options_.paths[i].path;
    MLPO_ASSIGN_OR_RETURN(std::string path_uuid, PathUuid(po.root, false, fs()));
    b.PutPath(static_cast<uint32_t>(i),
              {path_uuid, AbsolutePath(po.root), PathKindName(po.kind),
               po.segment_bytes});
  }
  MLPO_RETURN_IF_ERROR(m->Apply(&b, true));
  return m->SetSealUuid(uuid);
}

// Checks an existing index (opened read-only) against its seal and the
// store's directories. Sets *empty for an index with no records at all over
// directories without data: a creation cut short, finished by the caller.
absl::Status ObjectStore::CheckIndex(const MetaSnapshot& snap, uint64_t seq,
                                     const StoreSurvey& sv, bool* empty,
                                     const uint64_t* seal_before) const {
  *empty = false;
  const std::string& uuid = snap.store_uuid;
  MLPO_ASSIGN_OR_RETURN(uint64_t seal, ReadSeal(options_.meta_dir, fs(), uuid));
  seal = std::max(seal, ReadSealCopies(sv.dirs(), fs(), uuid));
  // Beside a writer the seal moves on while the index is read: the one read
  // before the index was caught up is the one to compare.
  if (seal_before != nullptr) seal = *seal_before;
  if (seal > seq)
    return absl::DataLossError(absl::StrCat(
        Where(), " has lost acknowledged writes: it opens at index sequence ",
        seq, " but sequence ", seal, " was acknowledged (", kSealFile,
        " and its copies, ", kSealCopyFile, "). Its write-ahead log was damaged, truncated or deleted. Nothing "
        "was changed; `mlpo recover STORE` rolls the index back to its last "
        "consistent point and reports what survived"));
  if (uuid.empty()) {
    if (!snap.paths.empty()) return absl::OkStatus();  // made before uuids
    if (sv.segments() > 0 || !snap.objects.empty() || !snap.tags.empty())
      return absl::DataLossError(absl::StrCat(
          Where(), " holds no store records, but the store's directories "
          "hold its data (segment files: ", sv.SegmentSummary(),
          "): the index lost its records (a deleted write-ahead log?). "
          "Nothing was changed; run `mlpo recover STORE`"));
    *empty = true;
    return absl::OkStatus();
  }
  if (!options_.store_uuid.empty() && options_.store_uuid != uuid)
    return absl::FailedPreconditionError(absl::StrCat(
        Where(), " is the index of store ", uuid, ", but the descriptor "
        "used to open it names store ", options_.store_uuid,
        ": one of them is another store's, copied here. Nothing was "
        "changed. Name the store by its TOML config or another path's "
        "directory (the job's next open rewrites the descriptors), or, if "
        "the index is the stranger, `mlpo recover STORE` rebuilds it from "
        "this store's backup (meta-backup)"));
  for (auto& p : sv.paths)
    if (!p.uuid.empty() && p.uuid != uuid)
      return absl::FailedPreconditionError(absl::StrCat(
          Where(), " is the index of store ", uuid, ", but ", p.dir,
          " belongs to store ", p.uuid, " (index ", p.meta_dir,
          "): a misspelt meta_dir, or another store's index?"));
  // Records of the store but none of an object, while its directories
  // hold data: what the index held since its last flush is gone (its
  // write-ahead log and its seal deleted together), a rollback to nothing.
  if (snap.objects.empty() && sv.segments() > 0)
    return absl::DataLossError(absl::StrCat(
        Where(), " records no objects, but the store's directories hold "
        "their data (segment files: ", sv.SegmentSummary(), "): the index "
        "lost its records (a deleted write-ahead log and ", kSealFile,
        "?). Nothing was changed; `mlpo recover STORE` rebuilds the index "
        "from its backup where there is one"));
  return absl::OkStatus();
}

// A read-only open beside a writer: the seal is read first, then the index
// is opened as a RocksDB secondary and caught up. The writer writes its
// index before its seal, so the index seen is never behind the seal read
// unless writes were really lost. What looks damaged is looked at again
// (a fresh survey, seal and index) before it is reported.
absl::Status ObjectStore::OpenReadOnly() {
  MLPO_RETURN_IF_ERROR(CheckStoreRoots(options_, fs()));
  for (auto& pc : options_.paths) pc.path.read_only = true;
  absl::Status st;
  MetaSnapshot snap;
  for (int look = 0; look < 5; ++look) {
    if (look > 0) absl::SleepFor(absl::Milliseconds(20 * look));
    st = [&]() -> absl::Status {
      Survey sv = SurveyStore(options_);
      if (sv.index == IndexState::kAbsent) {
        MLPO_RETURN_IF_ERROR(CheckNoStoreData(options_, sv, Where(), fs()));
        return absl::NotFoundError(absl::StrCat(
            "store ", options_.name, " rank ", options_.rank,
            " has no index in ", options_.meta_dir));
      }
      if (sv.index == IndexState::kDamaged)
        return DamagedIndexError(Where(), sv);
      MLPO_ASSIGN_OR_RETURN(uint64_t seal, ReadSeal(options_.meta_dir, fs(), ""));
      seal = std::max(seal, ReadSealCopies(sv.dirs(), fs(), ""));
      MLPO_ASSIGN_OR_RETURN(
          std::unique_ptr<MetaIndex> view,
          MetaIndex::Open(options_.meta_dir, MetaIndex::Mode::kSecondary, fs()));
      MLPO_ASSIGN_OR_RETURN(snap, view->Load());
      bool empty = false;
      MLPO_RETURN_IF_ERROR(
          CheckIndex(snap, view->sequence(), sv, &empty, &seal));
      if (empty)
        return absl::NotFoundError(absl::StrCat(
            Where(), " was never initialised (its creation was cut short)"));
      meta_ = std::move(view);
      // The view is checked whole too (every head and tag has its record,
      // no two records' extents overlap): a view caught up while the writer
      // flushed can lack a record, or hold one the writer had deleted.
      return LoadState(snap);
    }();
    // Only what a writer's progress can make appear is looked at again.
    if (st.ok() || !(absl::IsDataLoss(st) || absl::IsNotFound(st) ||
                     absl::IsInternal(st) || absl::IsUnavailable(st) ||
                     absl::IsAborted(st) || absl::IsInvalidArgument(st)))
      break;
    // A fresh start for the next look.
    paths_.clear();
    meta_.reset();
    hasher_.reset();
    finalizer_.reset();
    pool_.reset();
    MutexLock l(&mu_);
    objects_.clear();
    versions_.clear();
    tags_.clear();
    attributes_.clear();
  }
  return st;
}

absl::Status ObjectStore::OpenImpl() {
  const bool ro = options_.read_only;
  if (ro) return OpenReadOnly();
  MLPO_RETURN_IF_ERROR(CheckStoreRoots(options_, fs()));
  for (auto& pc : options_.paths) pc.path.read_only = ro;
  if (!ro && fs()->IsDirectory(options_.meta_dir)) {
    MLPO_ASSIGN_OR_RETURN(lock_, WriterLock::Acquire(options_.meta_dir, fs()));
  }
  Survey sv = SurveyStore(options_);
  if (lock_.held() && options_.create_if_missing && sv.CreationCutShort()) {
    // The creation is finished now: what RocksDB left holds no record.
    MLPO_RETURN_IF_ERROR(sv.RemoveCutShortCreation(options_.meta_dir, fs()));
    std::fprintf(stderr,
                 "mlpo: %s: its creation was cut short (%s left, no data); "
                 "creating it now\n",
                 Where().c_str(), absl::StrJoin(sv.index_files, ", ").c_str());
    sv = SurveyStore(options_);
  }
  if (sv.index == IndexState::kAbsent) {
    MLPO_RETURN_IF_ERROR(CheckNoStoreData(options_, sv, Where(), fs()));
    if (ro || !options_.create_if_missing)
      return absl::NotFoundError(absl::StrCat(
          "store ", options_.name, " rank ", options_.rank,
          " has no index in ", options_.meta_dir));
    MLPO_RETURN_IF_ERROR(CheckSegmentsFit(options_));
    if (!lock_.held()) {
      MLPO_RETURN_IF_ERROR(fs()->CreateDirs(options_.meta_dir));
      MLPO_ASSIGN_OR_RETURN(lock_, WriterLock::Acquire(options_.meta_dir, fs()));
      sv = SurveyStore(options_);  // someone may have created it meanwhile
    }
    if (sv.index == IndexState::kAbsent) {
      MLPO_RETURN_IF_ERROR(CheckNoStoreData(options_, sv, Where(), fs()));
      // Adopt the identity of a creation cut short (descriptors, no data).
      std::string uuid;
      for (auto& p : sv.paths)
        if (!p.uuid.empty()) uuid = p.uuid;
      if (uuid.empty()) uuid = NewUuid();
      MLPO_RETURN_IF_ERROR(PreparePaths(uuid));
      MLPO_ASSIGN_OR_RETURN(
          auto m, MetaIndex::Open(options_.meta_dir, MetaIndex::Mode::kCreate, fs()));
      MLPO_RETURN_IF_ERROR(InitializeIndex(m.get(), uuid));
      sv = SurveyStore(options_);
    }
  }
  if (sv.index == IndexState::kDamaged)
    return DamagedIndexError(Where(), sv);

  // Every check runs on a read-only view first: nothing changes unless all
  // pass.
  auto opened =
      MetaIndex::Open(options_.meta_dir, MetaIndex::Mode::kReadOnly, fs());
  const auto why = ReasonOf(opened.status());
  if (!ro && lock_.held() && options_.create_if_missing && why &&
      why->first == kReasonCreationCutShort) {
    // A creation killed before RocksDB made the index's column families
    // (the index holds no record): a writable open makes them, and the
    // checks below see an empty index, whose creation is finished.
    MLPO_RETURN_IF_ERROR(
        MetaIndex::Open(options_.meta_dir, MetaIndex::Mode::kWrite, fs())
            .status());
    opened = MetaIndex::Open(options_.meta_dir, MetaIndex::Mode::kReadOnly,
                             fs());
  }
  MLPO_ASSIGN_OR_RETURN(std::unique_ptr<MetaIndex> view, std::move(opened));
  MLPO_ASSIGN_OR_RETURN(MetaSnapshot snap, view->Load());
  bool empty = false;
  MLPO_RETURN_IF_ERROR(CheckIndex(snap, view->sequence(), sv, &empty));
  if (ro) {
    if (empty)
      return absl::NotFoundError(absl::StrCat(
          Where(), " was never initialised (its creation was cut short)"));
    meta_ = std::move(view);
  } else {
    view.reset();
    MLPO_ASSIGN_OR_RETURN(
        meta_, MetaIndex::Open(options_.meta_dir, MetaIndex::Mode::kWrite, fs()));
    if (meta_->used_reserve())
      std::fprintf(stderr,
                   "mlpo: %s: the index's disk (%s) is full; the index opened "
                   "on its %llu KiB reserve. Free space there: `mlpo drop-tag` "
                   "and `mlpo gc` free the store's own, or delete other "
                   "files\n",
                   Where().c_str(), options_.meta_dir.c_str(),
                   static_cast<unsigned long long>(kIndexReserveBytes >> 10));
    if (empty) {
      std::string uuid;
      for (auto& p : sv.paths)
        if (!p.uuid.empty()) uuid = p.uuid;
      if (uuid.empty()) uuid = NewUuid();
      MLPO_RETURN_IF_ERROR(PreparePaths(uuid));
      MLPO_RETURN_IF_ERROR(InitializeIndex(meta_.get(), uuid));
    }
    MLPO_ASSIGN_OR_RETURN(snap, meta_->Load());
  }
  return LoadState(snap);
}

absl::Status ObjectStore::MendPathIdentity(const std::string& root,
                                           const std::string& uuid) {
  const std::string desc =
      absl::StrCat(root, "/", StoreNamespace(options_), "/STORE");
  auto text = fs()->ReadFile(desc, kMaxConfigBytes);
  if (!text.ok()) return text.status();
  try {
    auto j = nlohmann::json::parse(*text);
    if (!j.contains("store_uuid") || j.at("store_uuid") != store_uuid_)
      return absl::FailedPreconditionError(desc + " names another store");
  } catch (const std::exception& e) {
    return absl::DataLossError(desc + ": " + e.what());
  }
  if (options_.read_only) return absl::OkStatus();
  MLPO_RETURN_IF_ERROR(fs()->CreateDirs(root + "/.mlpo"));
  MLPO_RETURN_IF_ERROR(
      fs()->WriteFileAtomic(root + "/.mlpo/uuid", uuid + "\n"));
  std::fprintf(stderr,
               "mlpo: %s: path %s had lost or damaged its identity file .mlpo/uuid; "
               "restored it from the store's index (the store's descriptor "
               "there names this store)\n",
               Where().c_str(), root.c_str());
  return absl::OkStatus();
}

absl::Status ObjectStore::LoadState(const MetaSnapshot& snap) {
  const bool ro = options_.read_only;
  if (snap.paths.size() != options_.paths.size()) {
    std::string recorded;
    for (const PathRecord& r : snap.paths)
      absl::StrAppend(&recorded, recorded.empty() ? "" : ", ", r.root);
    return absl::FailedPreconditionError(absl::StrCat(
        Where(), " has ", snap.paths.size(), " paths (", recorded,
        "); the options name ", options_.paths.size(),
        ". Nothing was changed: a store's paths are fixed when it is "
        "created. Name the same paths, or move the state into a store with "
        "the new ones (the adapter: load export_state_dict()'s dict into an "
        "optimizer on the new store)"));
  }
  store_uuid_ = snap.store_uuid;
  MetaIndex::Batch upgrade = meta_->NewBatch();
  if (store_uuid_.empty()) {  // a store made before identities: give it one
    store_uuid_ = NewUuid();
    upgrade.PutStoreUuid(store_uuid_);
  }
  for (size_t i = 0; i < options_.paths.size(); ++i)
    MLPO_RETURN_IF_ERROR(CheckPath(i, snap, &upgrade));
  if (!ro) {
    // A hard-linked copy (`cp -al`) shares the files written in place:
    // refused before the first write, which would change both stores.
    MLPO_ASSIGN_OR_RETURN(std::vector<SharedFile> shared,
                          SharedStoreFiles(options_, fs()));
    if (!shared.empty()) return SharedFilesError(options_, shared);
    if (!upgrade.empty()) {
      MLPO_RETURN_IF_ERROR(meta_->Apply(&upgrade, true));
    }
    MLPO_RETURN_IF_ERROR(meta_->SetSealUuid(store_uuid_));
    MLPO_RETURN_IF_ERROR(WriteStoreDescriptors(options_, store_uuid_, fs()));
  }
  MLPO_RETURN_IF_ERROR(OpenPaths(snap));
  MutexLock l(&mu_);
  MLPO_RETURN_IF_ERROR(LoadRecords(snap));
  pool_ = std::make_shared<BufferPool>(options_.buffer_pool_bytes);
  if (!ro && (options_.cache_bytes > 0 || options_.cache_percent > 0)) {
    cache_ = std::make_unique<ObjectCache>(options_.cache_bytes);
    dirty_home_ = std::make_shared<DirtyHome>(cache_.get());
    ResizeCache();  // mu_ is held (above)
  }
  hasher_ = std::make_unique<WorkQueue>();
  finalizer_ = std::make_unique<WorkQueue>();
  return absl::OkStatus();
}


absl::Status ObjectStore::UnidentifiedPathError(
    size_t i, const std::string& recorded_root, const absl::Status& why_not) {
  const auto& po = options_.paths[i].path;
  // Told apart before any lossy remedy is named: a directory gone or
  // empty is far more often a disk not mounted (or a directory moved)
  // than a disk lost.
  const std::string lossy = absl::StrCat(
      " Only if its disk was replaced and its data is gone: `mlpo "
      "recover --lost-path ", i, " STORE` makes the store go on without "
      "it (the versions with no copy elsewhere are lost)");
  std::string why;
  if (!fs()->Exists(po.root)) {
    why = absl::StrCat(
        "the directory is gone (removed, renamed, or its file system "
        "not mounted?). Nothing was changed. Mount it back, or point "
        "the config at where the directory is now.", lossy);
  } else if (auto names = fs()->ListDir(po.root);
             names.ok() && names->empty()) {
    // Empty and on its parent's file system: nothing is mounted there,
    // so the disk is most likely not mounted yet, and no lossy command
    // is named. Empty and a file system's root: a disk is mounted
    // there that holds nothing (a replaced one, or the wrong one).
    auto self = fs()->Stat(po.root);
    auto parent = fs()->Stat(
        std::filesystem::path(AbsolutePath(po.root)).parent_path().string());
    const bool mounted_here =
        self.ok() && parent.ok() && self->dev != parent->dev;
    why = mounted_here
              ? absl::StrCat(
                    "the directory is the root of a file system mounted "
                    "there that holds nothing: a new, empty disk (or "
                    "the wrong one) is mounted in the path's place. "
                    "Nothing was changed. If the store's disk is "
                    "elsewhere, mount it here instead.", lossy)
              : std::string(
                    "the directory is empty and nothing is mounted "
                    "there (it is on its parent's file system): most "
                    "likely its disk is not mounted yet. Nothing was "
                    "changed, and nothing of the store is lost while "
                    "that disk is intact: mount it there and open the "
                    "store again");
  } else {
    why = absl::StrCat(why_not.message(),
                       ". Nothing was changed. Check that the config "
                       "names this store's paths (not another rank's or "
                       "store's).", lossy);
  }
  return absl::FailedPreconditionError(absl::StrCat(
      "path ", i, " (", po.root, ") is not the store's path ", recorded_root,
      ": ", why));
}

absl::Status ObjectStore::CheckPath(size_t i, const MetaSnapshot& snap,
                                    MetaIndex::Batch* upgrade) {
  const bool ro = options_.read_only;
  auto& po = options_.paths[i].path;
  const PathRecord& rec = snap.paths[i];
  if (!rec.root.empty() && !SameDirectory(po.root, rec.root))
    return absl::FailedPreconditionError(absl::StrCat(
        Where(), ": path ", i, " is ", po.root, ", but the store's index "
        "records the absolute root ", rec.root, " (",
        fs()->Exists(rec.root) ? "another directory" : "which is gone",
        "): the store was moved or copied (its index and descriptors "
        "record absolute roots). Nothing was changed. `mlpo relocate ",
        po.root, "/", StoreNamespace(options_),
        "` makes it a store at its new place (a copy gets an identity of "
        "its own)"));
  auto uuid = PathUuid(po.root, false, fs());
  // A damaged identity file (cut, flipped, or another store's copied
  // over it) is mended like a lost one, unless it names another path of
  // this store: then the directories were swapped (a disk mounted at
  // the other's place), which is refused below.
  bool ours = false;
  for (const PathRecord& r : snap.paths)
    ours = ours || (uuid.ok() && *uuid == r.uuid);
  if (!rec.uuid.empty() && !ours) {
    // The identity file alone is lost or damaged (33 bytes; it bricked
    // the store): this is the recorded root, and where the store's
    // descriptor there names this store, the index's record of the path
    // is its identity. A writable open puts the file back; a read-only
    // one goes on.
    absl::Status mended = MendPathIdentity(po.root, rec.uuid);
    if (mended.ok()) {
      uuid = rec.uuid;
      po.known_uuid = rec.uuid;  // read-only: the file is not rewritten
    }
  }
  if (!uuid.ok()) return UnidentifiedPathError(i, rec.root, uuid.status());
  if (*uuid != rec.uuid)
    return absl::FailedPreconditionError(absl::StrCat(
        "path ", i, " (", po.root, ") has identity ", *uuid,
        " but the store expects ", rec.uuid, " (recorded root ", rec.root,
        ours ? "): that is another path's identity of this store, so the "
               "directories were swapped (a disk mounted at another's "
               "place?). Nothing was changed; mount each disk at its own "
               "root"
             : absl::StrCat("): another store's directory (its "
                            "descriptor does not name this store). Nothing "
                            "was changed. If this path's disk was replaced "
                            "and its data is gone, `mlpo recover "
                            "--lost-path ", i, " STORE` makes the store go "
                            "on without it")));
  // The store knows its own segment size; the config's is only for new
  // stores.
  std::string dir = absl::StrCat(po.root, "/", StoreNamespace(options_));
  if (!fs()->IsDirectory(dir) && !options_.salvage)
    return absl::FailedPreconditionError(absl::StrCat(
        "path ", i, " (", po.root, "): the store's directory ", dir,
        " is gone (removed, or its disk unmounted?) while the index "
        "records its data there. Nothing was changed. Mount it back; if "
        "its data is lost, `mlpo recover --lost-path ", i,
        " STORE` makes the store go on without it (versions with a copy "
        "elsewhere are kept)"));
  MLPO_ASSIGN_OR_RETURN(uint64_t on_disk, ExistingSegmentBytes(dir, fs()));
  // (A read-only look and a salvage go on: verify names it as short.)
  if (rec.segment_bytes != 0 && on_disk != 0 &&
      on_disk != rec.segment_bytes && !ro && !options_.salvage)
    return absl::DataLossError(absl::StrCat(
        "path ", po.root, ": segment file ", dir, "/seg-000000 is ", on_disk,
        " bytes, but the store's segments are ", rec.segment_bytes,
        " bytes (truncated or replaced?). Nothing was changed. `mlpo "
        "verify --deep STORE` lists every version it held; `mlpo recover "
        "--salvage STORE` keeps every tag and head that does not touch "
        "it"));
  uint64_t seg = rec.segment_bytes != 0 ? rec.segment_bytes : on_disk;
  if (seg != 0) po.segment_bytes = seg;
  if (rec.segment_bytes == 0) {
    PathRecord r = rec;
    r.segment_bytes = po.segment_bytes;
    upgrade->PutPath(static_cast<uint32_t>(i), r);
  }
  return absl::OkStatus();
}

absl::Status ObjectStore::OpenPaths(const MetaSnapshot& snap) {
  const bool ro = options_.read_only;
  for (size_t i = 0; i < options_.paths.size(); ++i) {
    options_.paths[i].path.fs = options_.fs;
    options_.paths[i].path.allow_missing_segments = ro || options_.salvage;
    auto path = StoragePath::Open(options_.paths[i].path,
                                  StoreNamespace(options_), /*create=*/false);
    if (!path.ok()) return path.status();
    paths_.push_back(std::move(*path));
  }
  placement_ = std::make_unique<Placement>(paths_.size());

  std::vector<double> weights;
  bool any = false;
  for (auto& p : options_.paths) {
    weights.push_back(p.fraction);
    any |= p.fraction > 0;
  }
  auto bw = snap.attributes.find(kBandwidthAttribute);
  if (!any && bw != snap.attributes.end()) {
    // No fractions given: stripe by the mixed bandwidth `mlpo profile
    // --store` measured (f_k proportional to U_k).
    try {
      auto j = nlohmann::json::parse(bw->second);
      if (j.size() == weights.size())
        for (size_t i = 0; i < weights.size(); ++i)
          weights[i] = j[i].at("mixed_bps").get<double>();
    } catch (const std::exception&) {
      // A damaged figure is no reason to refuse the store: equal shares.
    }
  }
  placement_->SetWeights(weights);

  return absl::OkStatus();
}

absl::Status ObjectStore::LoadRecords(const MetaSnapshot& snap) {
  for (auto& [name, layout] : snap.objects) objects_[name].layout = layout;
  for (auto& [name, v] : snap.heads) {
    objects_[name].has_head = true;
    objects_[name].head = v;
  }
  tags_ = snap.tags;
  attributes_ = snap.attributes;
  for (auto& [k, rec] : snap.versions) versions_[k].rec = rec;
  std::vector<VKey> referenced;
  for (auto& [name, st] : objects_)
    if (st.has_head) referenced.emplace_back(name, st.head);
  for (auto& [tag, objs] : tags_)
    for (auto& [obj, v] : objs) referenced.emplace_back(obj, v);
  for (const VKey& k : referenced) {
    auto it = versions_.find(k);
    if (it == versions_.end())
      return absl::DataLossError(absl::StrCat(
          Where(), ": object ", k.first, " version ", k.second,
          " is referenced but has no record"));
    ++it->second.refs;
  }
  for (auto& [name, st] : objects_)
    if (st.has_head) st.head_step = versions_[{name, st.head}].rec.step;
  // Never hand out a number the index has seen: above the recorded counter,
  // every record, head and tag (a store made before the counter has only
  // the latter).
  next_version_ = std::max<uint64_t>(1, snap.next_version);
  for (const VKey& k : referenced)
    next_version_ = std::max(next_version_, k.second + 1);
  for (auto& [k, vs] : versions_)
    next_version_ = std::max(next_version_, k.second + 1);
  // Every segment an extent lies in exists (trailing files can be gone
  // too): placeholders for a read-only look or a salvage, else DataLoss.
  {
    std::vector<uint64_t> need(paths_.size(), 0);
    for (auto& [k, vs] : versions_)
      for (const ExtentRef& e : vs.rec.AllExtents())
        if (e.path < paths_.size())
          need[e.path] = std::max(
              need[e.path],
              e.offset / paths_[e.path]->options().segment_bytes + 1);
    for (size_t p = 0; p < paths_.size(); ++p)
      MLPO_RETURN_IF_ERROR(paths_[p]->EnsureSegments(need[p]));
  }
  // Rebuild free space from every record. Records no head or tag references
  // (left by DropTag) keep their space until Gc() deletes them, so that
  // `mlpo drop-tag` then `mlpo gc` frees what the README says.
  for (auto& [k, vs] : versions_) {
    for (const ExtentRef& e : vs.rec.AllExtents()) {
      if (e.path >= paths_.size())
        return absl::DataLossError(absl::StrCat(
            "object ", k.first, " version ", k.second,
            " references unknown path ", e.path,
            ": the index is damaged. Nothing was changed; `mlpo recover "
            "STORE` rebuilds it from its backup"));
      absl::Status st = paths_[e.path]->MarkUsed({e.offset, e.length});
      if (!st.ok())
        return absl::DataLossError(absl::StrCat(
            "object ", k.first, " version ", k.second, ": ", st.message(),
            ": the index's records contradict each other (a damaged "
            "index, or another store's write-ahead log or table copied "
            "in?). Nothing was changed; `mlpo recover STORE` rebuilds the "
            "index from its backup"));
    }
  }
  return absl::OkStatus();
}

}  // namespace mlpo
