// RepairIndex: makes a damaged store openable again, explicitly, and says
// what was lost (see recover.h and docs/operations.md). Works on a store
// that is not open, under its writer lock.
#include <ctime>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "store/admin/recover.h"
#include "store/fs/file_util.h"
#include "store/meta/meta_index.h"
#include "store/path/storage_path.h"
#include "store/store_files.h"
#include "store/store_survey.h"

namespace mlpo {

namespace {

using Survey = StoreSurvey;

// An index backup's files are RocksDB's (a few SSTs, a WAL, a manifest);
// anything larger is not one of ours.
constexpr size_t kMaxBackupFileBytes = size_t{1} << 30;

struct Backup {
  std::string dir;
  uint64_t sequence = 0;
  std::set<std::string> tags;
};

// The newest index backup in the store's directories that belongs to store
// `uuid` (any when empty); dir is empty when there is none.
Backup FindBackup(const Survey& sv, const std::string& uuid,
                  FileSystem* fsys) {
  Backup best;
  for (auto& p : sv.paths) {
    for (const char* name : {"", ".old"}) {
      std::string dir = absl::StrCat(p.dir, "/", kIndexBackupDir, name);
      if (!fsys->Exists(dir + "/CURRENT")) continue;
      auto m = MetaIndex::Open(dir, MetaIndex::Mode::kReadOnly, fsys);
      if (!m.ok()) continue;
      auto snap = (*m)->Load();
      if (!snap.ok() || snap->store_uuid.empty()) continue;
      std::string want = uuid.empty() ? p.uuid : uuid;
      if (!want.empty() && snap->store_uuid != want) continue;
      uint64_t seq = (*m)->sequence();
      if (!best.dir.empty() && seq <= best.sequence) continue;
      best.dir = dir;
      best.sequence = seq;
      best.tags.clear();
      for (auto& [t, objs] : snap->tags) best.tags.insert(t);
    }
  }
  return best;
}

// Replaces the index in `meta` with a copy of `backup`, keeping what was
// there as <meta>.damaged-<time>. The caller holds the store's lock.
absl::Status RebuildFromBackup(const std::string& meta,
                               const std::string& backup, std::string* kept,
                               FileSystem* fsys) {
  if (fsys->Exists(meta)) {
    // Nothing but our own lock file (made to take the lock, and still
    // held): nothing to keep; the backup's files go in beside it.
    auto names = fsys->ListDir(meta);
    bool only_lock = names.ok() && (names->empty() ||
                                    (names->size() == 1 &&
                                     names->front() == kLockFile));
    if (!only_lock) {
      *kept = absl::StrCat(meta, ".damaged-", ::time(nullptr));
      MLPO_RETURN_IF_ERROR(fsys->Rename(meta, *kept));
    }
  }
  MLPO_RETURN_IF_ERROR(fsys->CreateDirs(meta));
  MLPO_ASSIGN_OR_RETURN(std::vector<std::string> names, fsys->ListDir(backup));
  for (const std::string& n : names) {
    std::string from = absl::StrCat(backup, "/", n);
    auto info = fsys->Stat(from);
    if (!info.ok() || !info->is_regular) continue;
    // Every copied file synced, then the directory: the rebuilt index is
    // durable before anything is opened on it.
    MLPO_ASSIGN_OR_RETURN(std::string data,
                          fsys->ReadFile(from, kMaxBackupFileBytes));
    MLPO_RETURN_IF_ERROR(
        fsys->WriteFileSynced(absl::StrCat(meta, "/", n), data));
  }
  MLPO_RETURN_IF_ERROR(fsys->SyncDir(meta));
  MLPO_ASSIGN_OR_RETURN(auto m,
                        MetaIndex::Open(meta, MetaIndex::Mode::kWrite, fsys));
  MLPO_ASSIGN_OR_RETURN(MetaSnapshot snap, m->Load());
  return m->SetSealUuid(snap.store_uuid);
}

}  // namespace

// The index forgets path `lost` (see Recover): promotes replicas, drops
// what had no other copy, gives the path a new identity.
static absl::Status ForgetLostPath(MetaIndex* m, const StoreOptions& o, int lost,
                            RecoverReport* rep, FileSystem* fsys) {
  MLPO_ASSIGN_OR_RETURN(MetaSnapshot snap, m->Load());
  if (lost < 0 || static_cast<size_t>(lost) >= snap.paths.size() ||
      static_cast<size_t>(lost) >= o.paths.size())
    return absl::InvalidArgumentError(absl::StrCat(
        "--lost-path ", lost, ": the store has ", snap.paths.size(),
        " paths (0..", snap.paths.size() - 1, ")"));
  const std::string& root = o.paths[lost].path.root;
  const std::string ns = absl::StrCat(root, "/", StoreNamespace(o));
  if (fsys->IsDirectory(ns)) {
    MLPO_ASSIGN_OR_RETURN(std::vector<std::string> names, fsys->ListDir(ns));
    for (const std::string& n : names)
      if (n.rfind("seg-", 0) == 0)
        return absl::FailedPreconditionError(absl::StrCat(
            "--lost-path ", lost, ": ", ns, " still holds the store's segment "
            "files (", n, ", ...); --lost-path is for a path whose data is "
            "gone (a replaced or wiped device). Nothing was changed; if "
            "those files are beyond use, move them away first"));
  }
  MLPO_RETURN_IF_ERROR(m->SetSealUuid(snap.store_uuid));
  MetaIndex::Batch b = m->NewBatch();
  auto on_lost = [lost](const std::vector<ExtentRef>& list) {
    for (const ExtentRef& e : list)
      if (static_cast<int>(e.path) == lost) return true;
    return false;
  };
  std::set<std::pair<std::string, uint64_t>> gone;
  for (auto& [k, rec] : snap.versions) {
    const bool first = on_lost(rec.extents), second = on_lost(rec.replica);
    if (!first && !second) continue;
    VersionRecord r = rec;
    if (first && !rec.replica.empty() && !second) {
      r.extents = rec.replica;  // the replica becomes the only copy
      r.replica.clear();
      ++rep->promoted;
      b.PutVersion(k.first, r);
    } else if (first) {
      gone.insert(k);
      b.DeleteVersion(k.first, k.second);
    } else {
      r.replica.clear();
      ++rep->replicas_dropped;
      b.PutVersion(k.first, r);
    }
  }
  for (auto& [obj, v] : snap.heads)
    if (gone.count({obj, v})) {
      b.DeleteHead(obj);
      rep->lost_heads.push_back(absl::StrCat(obj, "@", v));
    }
  for (auto& [tag, objs] : snap.tags) {
    uint64_t lost_objects = 0;
    for (auto& [obj, v] : objs) lost_objects += gone.count({obj, v});
    if (lost_objects == 0) continue;
    b.DeleteTag(tag, "");
    for (auto& [obj, v] : objs) b.DeleteTag(tag, obj);
    rep->lost_tags.emplace_back(tag, lost_objects);
  }
  // Versions that only a deleted tag held stay as records awaiting gc;
  // those of lost tags that survive are freed by the next gc.
  MLPO_ASSIGN_OR_RETURN(std::string uuid, PathUuid(root, true, fsys));
  PathRecord np = snap.paths[lost];
  np.uuid = uuid;
  np.root = root;
  b.PutPath(static_cast<uint32_t>(lost), np);
  MLPO_RETURN_IF_ERROR(fsys->CreateDirs(ns));
  MLPO_RETURN_IF_ERROR(m->Apply(&b, /*sync=*/true));
  rep->lost_path = lost;
  return absl::OkStatus();
}

// Long (about 150 lines) because it is one ordered recovery under one
// writer lock (classify the damage, roll back or rebuild, then read every
// head and tag back), each step deciding from the report the earlier ones
// filled; the pieces that stand alone (RebuildFromBackup, LosePath, the
// read-back) are functions of their own above.
absl::StatusOr<RecoverReport> RepairIndex(
    const StoreOptions& options, bool discard, int lost_path) {
  MLPO_RETURN_IF_ERROR(ValidateStoreOptions(options));
  RecoverReport rep;
  {
    StoreOptions o = options;
    if (o.meta_dir.empty()) o.meta_dir = DefaultMetaDir(o);
    rep.meta_dir = o.meta_dir;
    FileSystem* fsys = StoreFileSystem(o);
    MLPO_RETURN_IF_ERROR(CheckStoreRoots(o, fsys));
    WriterLock lock;
    if (fsys->IsDirectory(o.meta_dir)) {
      MLPO_ASSIGN_OR_RETURN(lock, WriterLock::Acquire(o.meta_dir, fsys));
    }
    Survey sv = SurveyStore(o);
    absl::Status unrecoverable;
    std::set<std::string> recovered_tags;
    if (sv.index == IndexState::kPresent) {
      std::string uuid;
      {
        auto view =
            MetaIndex::Open(o.meta_dir, MetaIndex::Mode::kReadOnly, fsys);
        if (view.ok()) {
          auto snap = (*view)->Load();
          if (snap.ok()) uuid = snap->store_uuid;
        }
      }
      auto seal = ReadSeal(o.meta_dir, fsys, uuid);
      if (!seal.ok()) return seal.status();
      seal = std::max(*seal, ReadSealCopies(sv.dirs(), fsys, uuid));
      auto m = MetaIndex::Open(o.meta_dir, MetaIndex::Mode::kRecover, fsys);
      // A damaged block anywhere (one no lookup reads too) or records that
      // do not load: the index is unusable whatever the damage, and the
      // backup below rebuilds it (issue 51: four flipped bytes in a data
      // block made recover fail where the backups were good).
      const absl::Status live = m.ok() ? (*m)->VerifyChecksums() : m.status();
      // A file this user may not read is not damage: a rebuild from the
      // backup would throw away the steps since the last tag to work
      // around a chown (the damage matrix's "another user's" row).
      if (absl::IsPermissionDenied(live)) return live;
      absl::StatusOr<MetaSnapshot> snap =
          live.ok() ? (*m)->Load() : absl::StatusOr<MetaSnapshot>(live);
      if (snap.ok()) {
        for (auto& [t, objs] : snap->tags) recovered_tags.insert(t);
        rep.acknowledged_sequence = *seal;
        rep.recovered_sequence = (*m)->sequence();
        rep.rolled_back = *seal > rep.recovered_sequence;
        bool no_records = snap->store_uuid.empty() && snap->paths.empty();
        if (!no_records && snap->objects.empty() && sv.segments() > 0) {
          unrecoverable = absl::DataLossError(absl::StrCat(
              "the index in ", o.meta_dir, " has lost every object record "
              "(its write-ahead log and seal are gone?), so the store's data "
              "(segment files: ", sv.SegmentSummary(),
              ") cannot be found again"));
        } else if (no_records && sv.segments() > 0) {
          unrecoverable = absl::FailedPreconditionError(absl::StrCat(
              "the index in ", o.meta_dir,
              " has lost every record, so the store's data (segment files: ",
              sv.SegmentSummary(), ") cannot be found again"));
        } else if (!no_records) {
          // Accept the loss: the seal now matches what the index holds.
          MLPO_RETURN_IF_ERROR((*m)->SetSealUuid(
              snap->store_uuid.empty() ? NewUuid() : snap->store_uuid));
        }
      } else {
        unrecoverable = snap.status();
      }
    } else if (sv.CreationCutShort()) {
      // Nothing was stored: the leftovers go, and the next open creates
      // the store as if for the first time.
      MLPO_RETURN_IF_ERROR(sv.RemoveCutShortCreation(o.meta_dir, fsys));
      rep.creation_cut_short = true;
    } else if (sv.index == IndexState::kDamaged) {
      unrecoverable = absl::DataLossError(absl::StrCat(
          "the index in ", o.meta_dir, " has no CURRENT file (it holds ",
          absl::StrJoin(sv.index_files, ", "), ")"));
    } else if (sv.segments() > 0) {
      unrecoverable = absl::NotFoundError(absl::StrCat(
          "the index in ", o.meta_dir, " is gone, and the store's data ",
          "(segment files: ", sv.SegmentSummary(),
          ") cannot be re-indexed from the segments alone"));
    }
    // The index backup taken at the last tag: it rebuilds an index that is
    // gone or unopenable, and one whose rollback lost tags the backup has.
    std::string uuid;
    for (auto& p : sv.paths)
      if (!p.uuid.empty()) uuid = p.uuid;
    Backup backup = FindBackup(sv, uuid, fsys);
    bool lost_tags = false;
    for (auto& t : backup.tags) lost_tags |= !recovered_tags.count(t);
    if (!backup.dir.empty() &&
        (!unrecoverable.ok() || (rep.rolled_back && lost_tags))) {
      if (!fsys->IsDirectory(o.meta_dir)) {
        MLPO_RETURN_IF_ERROR(fsys->CreateDirs(o.meta_dir));
        MLPO_ASSIGN_OR_RETURN(lock, WriterLock::Acquire(o.meta_dir, fsys));
      }
      MLPO_RETURN_IF_ERROR(
          RebuildFromBackup(o.meta_dir, backup.dir, &rep.damaged_index_kept,
                            fsys));
      rep.rebuilt_from = backup.dir;
      unrecoverable = absl::OkStatus();
    }
    if (!unrecoverable.ok() && !discard)
      return absl::FailedPreconditionError(absl::StrCat(
          StoreWhere(o), " cannot be recovered: ", unrecoverable.message(),
          ", and no index backup (", kIndexBackupDir, ", written at every "
          "tag) was found. Put the index directory back from a backup of "
          "your own if there is one; otherwise `mlpo recover STORE "
          "--discard` deletes this store's segments, descriptors and index "
          "so that it can start afresh"));
    if (!unrecoverable.ok()) {
      // Discard, as asked: the store's own files only.
      auto remove = [&](const std::string& dir,
                        const std::string& name) -> absl::Status {
        std::string f = absl::StrCat(dir, "/", name);
        auto info = fsys->Stat(f);
        if (info.ok() && info->is_dir) return fsys->RemoveTree(f);
        uint64_t size = info.ok() ? info->size : 0;
        MLPO_RETURN_IF_ERROR(fsys->Unlink(f));
        ++rep.discarded_files;
        rep.discarded_bytes += size;
        return absl::OkStatus();
      };
      for (auto& p : sv.paths) {
        auto names = fsys->ListDir(p.dir);
        if (names.ok())
          for (auto& n : *names)
            if (n.rfind("seg-", 0) == 0 || n == "STORE")
              MLPO_RETURN_IF_ERROR(remove(p.dir, n));
        for (const char* b : {"", ".old", ".tmp"})
          MLPO_RETURN_IF_ERROR(fsys->RemoveTree(
              absl::StrCat(p.dir, "/", kIndexBackupDir, b)));
        MLPO_RETURN_IF_ERROR(fsys->SyncDir(p.dir));
      }
      auto names = fsys->ListDir(o.meta_dir);
      if (names.ok()) {
        for (auto& n : *names)
          if (n != kLockFile) MLPO_RETURN_IF_ERROR(remove(o.meta_dir, n));
        MLPO_RETURN_IF_ERROR(fsys->SyncDir(o.meta_dir));
      }
      rep.discarded = true;
      return rep;
    }
    // What the index holds now is the store: the copies of the seal are
    // written afresh at the next tag or close.
    RemoveSealCopies(sv.dirs(), fsys);
    if (lost_path >= 0) {
      MLPO_ASSIGN_OR_RETURN(
          auto m, MetaIndex::Open(o.meta_dir, MetaIndex::Mode::kWrite, fsys));
      MLPO_RETURN_IF_ERROR(ForgetLostPath(m.get(), o, lost_path, &rep, fsys));
    }
  }  // releases the lock
  return rep;
}

}  // namespace mlpo
