// ObjectStore::Recover: makes a damaged store openable again, explicitly,
// and says what was lost (see object_store.h and the README's identity and
// recovery rules).
#include <ctime>
#include <filesystem>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "store/fs/file_util.h"
#include "store/object_store.h"
#include "store/store_survey.h"

namespace mlpo {
namespace fs = std::filesystem;

namespace {

using Survey = StoreSurvey;

struct Backup {
  std::string dir;
  uint64_t sequence = 0;
  std::set<std::string> tags;
};

// The newest index backup in the store's directories that belongs to store
// `uuid` (any when empty); dir is empty when there is none.
Backup FindBackup(const Survey& sv, const std::string& uuid) {
  Backup best;
  std::error_code ec;
  for (auto& p : sv.paths) {
    for (const char* name : {"", ".old"}) {
      std::string dir = absl::StrCat(p.dir, "/", kIndexBackupDir, name);
      if (!fs::exists(dir + "/CURRENT", ec)) continue;
      auto m = MetaIndex::Open(dir, MetaIndex::Mode::kReadOnly);
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
                               const std::string& backup,
                               std::string* kept) {
  std::error_code ec;
  if (fs::exists(meta, ec)) {
    *kept = absl::StrCat(meta, ".damaged-", ::time(nullptr));
    fs::rename(meta, *kept, ec);
    if (ec) return ErrnoStatus(ec.value(), "rename " + meta + " to " + *kept);
  }
  MLPO_RETURN_IF_ERROR(MakePrivateDirs(meta));
  for (fs::directory_iterator it(backup, ec), end; !ec && it != end;
       it.increment(ec)) {
    if (!it->is_regular_file()) continue;
    fs::copy_file(it->path(), fs::path(meta) / it->path().filename(), ec);
    if (ec)
      return ErrnoStatus(ec.value(), "copy " + it->path().string() + " to " +
                                         meta);
  }
  if (ec) return ErrnoStatus(ec.value(), "read " + backup);
  MLPO_ASSIGN_OR_RETURN(auto m, MetaIndex::Open(meta, MetaIndex::Mode::kWrite));
  MLPO_ASSIGN_OR_RETURN(MetaSnapshot snap, m->Load());
  return m->SetSealUuid(snap.store_uuid);
}

}  // namespace

absl::StatusOr<RecoverReport> ObjectStore::Recover(const StoreOptions& options,
                                                   bool discard) {
  MLPO_RETURN_IF_ERROR(ValidateStoreOptions(options));
  RecoverReport rep;
  {
    std::unique_ptr<ObjectStore> s(new ObjectStore(options));
    StoreOptions& o = s->options_;
    if (o.meta_dir.empty()) o.meta_dir = DefaultMetaDir(o);
    rep.meta_dir = o.meta_dir;
    MLPO_RETURN_IF_ERROR(s->CheckRoots());
    std::error_code ec;
    if (fs::is_directory(o.meta_dir, ec)) MLPO_RETURN_IF_ERROR(s->LockStore());
    Survey sv = SurveyStore(o);
    absl::Status unrecoverable;
    std::set<std::string> recovered_tags;
    if (sv.index == IndexState::kPresent) {
      std::string uuid;
      {
        auto view = MetaIndex::Open(o.meta_dir, MetaIndex::Mode::kReadOnly);
        if (view.ok()) {
          auto snap = (*view)->Load();
          if (snap.ok()) uuid = snap->store_uuid;
        }
      }
      auto seal = ReadSeal(o.meta_dir, uuid);
      if (!seal.ok()) return seal.status();
      auto m = MetaIndex::Open(o.meta_dir, MetaIndex::Mode::kRecover);
      if (m.ok()) {
        auto snap = (*m)->Load();
        if (!snap.ok()) return snap.status();
        for (auto& [t, objs] : snap->tags) recovered_tags.insert(t);
        rep.acknowledged_sequence = *seal;
        rep.recovered_sequence = (*m)->sequence();
        rep.rolled_back = *seal > rep.recovered_sequence;
        bool no_records = snap->store_uuid.empty() && snap->paths.empty();
        if (no_records && sv.segments() > 0) {
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
        unrecoverable = m.status();
      }
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
    Backup backup = FindBackup(sv, uuid);
    bool lost_tags = false;
    for (auto& t : backup.tags) lost_tags |= !recovered_tags.count(t);
    if (!backup.dir.empty() &&
        (!unrecoverable.ok() || (rep.rolled_back && lost_tags))) {
      if (!fs::is_directory(o.meta_dir, ec)) {
        MLPO_RETURN_IF_ERROR(MakePrivateDirs(o.meta_dir));
        MLPO_RETURN_IF_ERROR(s->LockStore());
      }
      MLPO_RETURN_IF_ERROR(
          RebuildFromBackup(o.meta_dir, backup.dir, &rep.damaged_index_kept));
      rep.rebuilt_from = backup.dir;
      unrecoverable = absl::OkStatus();
    }
    if (!unrecoverable.ok() && !discard)
      return absl::FailedPreconditionError(absl::StrCat(
          s->Where(), " cannot be recovered: ", unrecoverable.message(),
          ", and no index backup (", kIndexBackupDir, ", written at every "
          "tag) was found. Put the index directory back from a backup of "
          "your own if there is one; otherwise `mlpo recover STORE "
          "--discard` deletes this store's segments, descriptors and index "
          "so that it can start afresh"));
    if (!unrecoverable.ok()) {
      // Discard, as asked: the store's own files only.
      auto remove = [&](const fs::path& f) {
        std::error_code e;
        uint64_t size = fs::is_regular_file(f, e) ? fs::file_size(f, e) : 0;
        if (fs::remove(f, e)) {
          ++rep.discarded_files;
          rep.discarded_bytes += size;
        }
      };
      for (auto& p : sv.paths) {
        for (fs::directory_iterator it(p.dir, ec), end; !ec && it != end;
             it.increment(ec)) {
          std::string n = it->path().filename().string();
          if (n.rfind("seg-", 0) == 0 || n == "STORE") remove(it->path());
        }
        for (const char* b : {"", ".old", ".tmp"})
          fs::remove_all(absl::StrCat(p.dir, "/", kIndexBackupDir, b), ec);
      }
      for (fs::directory_iterator it(o.meta_dir, ec), end; !ec && it != end;
           it.increment(ec))
        if (it->path().filename() != kLockFile) remove(it->path());
      rep.discarded = true;
      return rep;
    }
  }  // releases the lock
  StoreOptions o = options;
  o.create_if_missing = false;
  MLPO_ASSIGN_OR_RETURN(auto store, ObjectStore::Open(o));
  MLPO_ASSIGN_OR_RETURN(VerifyReport heads, store->Verify());
  rep.objects = heads.objects;
  rep.bad_heads = heads.bad;
  for (auto& [name, objs] : store->Tags()) {
    MLPO_ASSIGN_OR_RETURN(VerifyReport t, store->Verify(name));
    rep.tags.push_back({name, t.objects, t.bad.size()});
  }
  return rep;
}

}  // namespace mlpo
