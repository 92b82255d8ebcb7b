#include "store/admin/unshare.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "store/meta/meta_index.h"
#include "store/store_files.h"
#include "store/store_target.h"

namespace mlpo {

absl::StatusOr<UnshareReport> UnshareLocked(const StoreOptions& o,
                                            FileSystem* fs,
                                            const UnshareProgress& progress) {
  // What an earlier run cut short left behind.
  MLPO_RETURN_IF_ERROR(RemoveUnshareTemporaries(fs, o.meta_dir));
  for (auto& pc : o.paths)
    MLPO_RETURN_IF_ERROR(RemoveUnshareTemporaries(
        fs, absl::StrCat(pc.path.root, "/", StoreNamespace(o))));
  MLPO_ASSIGN_OR_RETURN(std::vector<SharedFile> shared,
                        SharedStoreFiles(o, fs));
  // The writer lock last: the caller holds it (on the shared inode, which
  // keeps excluding the other copy's writers until the end).
  std::stable_partition(shared.begin(), shared.end(), [](const SharedFile& f) {
    return !f.path.ends_with("/MLPO-LOCK");
  });
  uint64_t total = 0;
  for (const SharedFile& f : shared) total += f.size;
  UnshareReport rep;
  for (size_t i = 0; i < shared.size(); ++i) {
    const SharedFile& f = shared[i];
    const uint64_t before = rep.bytes;
    MLPO_RETURN_IF_ERROR(UnshareFile(fs, f.path, [&](uint64_t done) {
      if (progress) progress(f.path, i, shared.size(), before + done, total);
    }));
    rep.bytes += f.size;
    rep.files.push_back(f.path);
    // (An empty file has no chunk to report.)
    if (progress && f.size == 0)
      progress(f.path, i, shared.size(), rep.bytes, total);
  }
  return rep;
}

absl::StatusOr<UnshareReport> Unshare(const StoreOptions& options,
                                      const UnshareProgress& progress) {
  MLPO_RETURN_IF_ERROR(ValidateStoreOptions(options));
  StoreOptions o = options;
  if (o.meta_dir.empty()) o.meta_dir = DefaultMetaDir(o);
  FileSystem* fs = StoreFileSystem(o);
  MLPO_RETURN_IF_ERROR(CheckStoreRoots(o, fs));
  if (!fs->IsDirectory(o.meta_dir) || !fs->Exists(o.meta_dir + "/CURRENT"))
    return absl::NotFoundError(
        absl::StrCat("there is no store index at ", o.meta_dir));
  MLPO_ASSIGN_OR_RETURN(WriterLock lock, WriterLock::Acquire(o.meta_dir, fs));
  {
    // The store must be where its index says: on a moved or copied store
    // (whose records name the original's directories) this would act on
    // the wrong files; relocate unshares a copy as it makes it a store.
    MLPO_ASSIGN_OR_RETURN(
        auto view, MetaIndex::Open(o.meta_dir, MetaIndex::Mode::kReadOnly, fs));
    MLPO_ASSIGN_OR_RETURN(MetaSnapshot snap, view->Load());
    if (snap.paths.size() != o.paths.size())
      return absl::FailedPreconditionError(absl::StrCat(
          StoreWhere(o), " has ", snap.paths.size(), " paths; ",
          o.paths.size(), " were named"));
    for (size_t i = 0; i < o.paths.size(); ++i)
      if (!snap.paths[i].root.empty() &&
          !SameDirectory(o.paths[i].path.root, snap.paths[i].root))
        return absl::FailedPreconditionError(absl::StrCat(
            StoreWhere(o), ": path ", i, " is ", o.paths[i].path.root,
            ", but the index records ", snap.paths[i].root,
            ": the store was moved or copied. Nothing was changed. `mlpo "
            "relocate ", o.paths[i].path.root, "/", StoreNamespace(o),
            "` makes it a store at its new place and gives it files of "
            "its own"));
  }
  return UnshareLocked(o, fs, progress);
}

}  // namespace mlpo
