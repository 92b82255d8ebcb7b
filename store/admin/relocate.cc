#include "store/admin/relocate.h"


#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "base/status_macros.h"
#include "store/fs/file_util.h"
#include "store/meta/meta_index.h"
#include "store/object_store.h"
#include "store/path/storage_path.h"
#include "store/store_files.h"
#include "store/store_survey.h"
#include "store/store_target.h"

namespace mlpo {

std::vector<std::string> CopiedFrom(absl::string_view attribute) {
  return absl::StrSplit(attribute, ' ', absl::SkipEmpty());
}

// Long (about 160 lines) because it is one resumable procedure under one
// writer lock: its marker decides copy or move once, and each later step
// reads what the earlier ones found (the snapshot, the planned identity,
// the roots); cut apart, that state would be passed through every piece.
absl::StatusOr<RelocateReport> Relocate(const StoreOptions& options,
                                        bool new_identity,
                                        const UnshareProgress& progress) {
  MLPO_RETURN_IF_ERROR(ValidateStoreOptions(options));
  StoreOptions o = options;
  o.store_uuid.clear();
  o.create_if_missing = false;
  o.read_only = false;
  if (o.meta_dir.empty()) o.meta_dir = DefaultMetaDir(o);
  FileSystem* fsys = StoreFileSystem(o);
  MLPO_RETURN_IF_ERROR(CheckStoreRoots(o, fsys));
  if (!fsys->IsDirectory(o.meta_dir) || !fsys->Exists(o.meta_dir + "/CURRENT"))
    return absl::NotFoundError(absl::StrCat(
        "there is no store index at ", o.meta_dir,
        " (pass --meta-dir where the moved index is)"));
  MLPO_ASSIGN_OR_RETURN(WriterLock lock,
                        WriterLock::Acquire(o.meta_dir, fsys));

  MetaSnapshot snap;
  {
    MLPO_ASSIGN_OR_RETURN(
        auto view, MetaIndex::Open(o.meta_dir, MetaIndex::Mode::kReadOnly, fsys));
    MLPO_ASSIGN_OR_RETURN(snap, view->Load());
    // Any store's seal: a relocation cut short may have sealed the new
    // identity already.
    MLPO_ASSIGN_OR_RETURN(uint64_t seal, ReadSeal(o.meta_dir, fsys, ""));
    if (seal > view->sequence())
      return absl::DataLossError(absl::StrCat(
          "the index at ", o.meta_dir,
          " has lost acknowledged writes; run `mlpo recover` on it first"));
  }
  if (snap.paths.size() != o.paths.size())
    return absl::FailedPreconditionError(absl::StrCat(
        "the store at ", o.meta_dir, " has ", snap.paths.size(),
        " paths; ", o.paths.size(), " were named"));
  // The decision (copy or move, the new identity) is made once and kept in
  // a marker until the relocation is complete, so a relocation killed
  // half-way and run again finishes the same way.
  const std::string marker = o.meta_dir + "/MLPO-RELOCATING";
  // "<new uuid> <old uuid> copy|move"
  std::string planned_uuid, planned_old;
  if (auto text = fsys->ReadFile(marker, 4096); text.ok()) {
    std::vector<std::string> f =
        absl::StrSplit(absl::StripAsciiWhitespace(*text), ' ');
    if (f.size() != 3 || f[0].empty() || (f[2] != "copy" && f[2] != "move"))
      return absl::DataLossError(absl::StrCat(
          marker, " is damaged; delete it and run again"));
    planned_uuid = f[0];
    planned_old = f[1];
    new_identity = f[2] == "copy";
  }
  RelocateReport rep;
  rep.old_uuid = planned_uuid.empty() ? snap.store_uuid : planned_old;
  rep.old_meta_dir = snap.paths.empty() ? "" : o.meta_dir;
  const std::string ns = StoreNamespace(o);
  for (size_t i = 0; i < o.paths.size(); ++i) {
    const std::string& root = o.paths[i].path.root;
    const PathRecord& rec = snap.paths[i];
    rep.old_roots.push_back(rec.root);
    rep.new_roots.push_back(AbsolutePath(root));
    // The data must be this store's: its descriptor names the same store.
    std::string dir = absl::StrCat(root, "/", ns);
    auto text = fsys->ReadFile(dir + "/STORE", kMaxConfigBytes);
    if (!text.ok())
      return Annotate(text.status(),
                      absl::StrCat("path ", i, " (", root,
                                   ") has no store directory ", dir));
    auto theirs = StoreOptionsFromDescriptor(*text);
    if (!theirs.ok())
      return Annotate(theirs.status(), dir);
    if (!snap.store_uuid.empty() && !theirs->store_uuid.empty() &&
        theirs->store_uuid != snap.store_uuid &&
        theirs->store_uuid != planned_uuid &&
        theirs->store_uuid != planned_old)
      return absl::FailedPreconditionError(absl::StrCat(
          dir, " belongs to store ", theirs->store_uuid,
          ", not to the store of the index at ", o.meta_dir, " (",
          snap.store_uuid, ")"));
    if (new_identity && planned_uuid.empty() && SameDirectory(root, rec.root))
      return absl::FailedPreconditionError(absl::StrCat(
          "path ", i, " (", root, ") is where the store already "
          "lives; a new identity is for a copy at another place"));
  }
  if (new_identity && planned_uuid.empty() &&
      SameDirectory(o.meta_dir, rep.old_meta_dir) &&
      snap.paths.size() > 0 && SameDirectory(o.paths[0].path.root,
                                             snap.paths[0].root))
    return absl::FailedPreconditionError(
        "nothing was moved or copied");

  // A hard-linked copy (`cp -al`) shares the files written in place with
  // the original: each gets an inode of its own before anything is written.
  MLPO_ASSIGN_OR_RETURN(UnshareReport unshared,
                        UnshareLocked(o, fsys, progress));
  rep.unshared_files = unshared.files;
  rep.unshared_bytes = unshared.bytes;
  MLPO_ASSIGN_OR_RETURN(
      auto meta, MetaIndex::Open(o.meta_dir, MetaIndex::Mode::kWrite, fsys));
  rep.new_uuid = !planned_uuid.empty() ? planned_uuid
                 : new_identity       ? NewUuid()
                                      : snap.store_uuid;
  if (rep.new_uuid.empty()) rep.new_uuid = NewUuid();  // a store before uuids
  if (planned_uuid.empty()) {
    MLPO_RETURN_IF_ERROR(fsys->WriteFileAtomic(
        marker, absl::StrCat(rep.new_uuid, " ", rep.old_uuid,
                             new_identity ? " copy" : " move", "\n")));
    MLPO_RETURN_IF_ERROR(fsys->SyncDir(o.meta_dir));
  }
  MetaIndex::Batch b = meta->NewBatch();
  for (size_t i = 0; i < o.paths.size(); ++i) {
    const auto& po = o.paths[i].path;
    const PathRecord& rec = snap.paths[i];
    MLPO_ASSIGN_OR_RETURN(std::string uuid, PathUuid(po.root, false, fsys));
    bool fresh = false;
    if (new_identity && uuid == rec.uuid) {
      // The copied root still carries the original's identity: its own now
      // (a sibling store of the same copy adopts it when relocated).
      uuid = NewUuid();
      MLPO_RETURN_IF_ERROR(
          fsys->WriteFileAtomic(po.root + "/.mlpo/uuid", uuid + "\n"));
      MLPO_RETURN_IF_ERROR(fsys->SyncDir(po.root + "/.mlpo"));
      fresh = true;
    }
    rep.new_path_identity.push_back(fresh);
    PathRecord r = rec;
    r.uuid = uuid;
    r.root = AbsolutePath(po.root);
    b.PutPath(static_cast<uint32_t>(i), r);
    // The store keeps its own segment size.
    if (rec.segment_bytes != 0)
      o.paths[i].path.segment_bytes = rec.segment_bytes;
  }
  if (rep.new_uuid != snap.store_uuid) b.PutStoreUuid(rep.new_uuid);
  if (new_identity && !rep.old_uuid.empty()) {
    // The copy remembers what it was copied from (once, if run again).
    auto it = snap.attributes.find(kCopiedFromAttribute);
    std::vector<std::string> from;
    if (it != snap.attributes.end()) from = CopiedFrom(it->second);
    if (from.empty() || from.back() != rep.old_uuid) {
      from.push_back(rep.old_uuid);
      b.PutAttribute(kCopiedFromAttribute, absl::StrJoin(from, " "));
    }
  }
  MLPO_RETURN_IF_ERROR(meta->Apply(&b, true));
  MLPO_RETURN_IF_ERROR(meta->SetSealUuid(rep.new_uuid));
  StoreOptions written = o;
  written.meta_dir = AbsolutePath(o.meta_dir);
  MLPO_RETURN_IF_ERROR(WriteStoreDescriptors(written, rep.new_uuid, fsys));
  rep.new_meta_dir = written.meta_dir;
  MLPO_RETURN_IF_ERROR(fsys->Unlink(marker));
  MLPO_RETURN_IF_ERROR(fsys->SyncDir(o.meta_dir));
  meta.reset();
  lock.Release();  // the open below takes it

  // Opens as any store now, and its index backups name the new place.
  StoreOptions reopen = o;
  reopen.store_uuid = rep.new_uuid;
  MLPO_ASSIGN_OR_RETURN(auto store, ObjectStore::Open(reopen));
  store->BackupIndex();
  return rep;
}

}  // namespace mlpo
