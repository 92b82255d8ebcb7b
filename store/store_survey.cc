#include "store/store_survey.h"


#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "store/fs/file_util.h"
#include "store/path/storage_path.h"

namespace mlpo {

int StoreSurvey::segments() const {
  int n = 0;
  for (auto& p : paths) n += p.segments;
  return n;
}

bool StoreSurvey::CreationCutShort() const {
  if (index != IndexState::kDamaged || segments() > 0) return false;
  for (const std::string& f : index_files)
    if (absl::EndsWith(f, ".sst") || f == "MLPO-SEAL") return false;
  return true;
}

absl::Status StoreSurvey::RemoveCutShortCreation(const std::string& meta_dir,
                                                  FileSystem* fs) const {
  if (!CreationCutShort())
    return absl::FailedPreconditionError(
        absl::StrCat(meta_dir, " is not a creation cut short"));
  for (const std::string& f : index_files) {
    std::string file = absl::StrCat(meta_dir, "/", f);
    MLPO_RETURN_IF_ERROR(fs->IsDirectory(file) ? fs->RemoveTree(file)
                                               : fs->Unlink(file));
  }
  return fs->SyncDir(meta_dir);
}

std::string StoreSurvey::SegmentSummary() const {
  std::vector<std::string> parts;
  for (auto& p : paths)
    if (p.segments > 0) parts.push_back(absl::StrCat(p.segments, " in ", p.dir));
  return absl::StrJoin(parts, ", ");
}

StoreSurvey SurveyStore(const StoreOptions& o) {
  StoreSurvey sv;
  FileSystem* fsys = o.fs != nullptr ? o.fs : DefaultFileSystem();
  if (fsys->Exists(o.meta_dir + "/CURRENT")) {
    sv.index = IndexState::kPresent;
  } else {
    auto names = fsys->ListDir(o.meta_dir);
    for (auto& n : names.ok() ? *names : std::vector<std::string>()) {
      if (n == kLockFile) continue;
      sv.index_files.push_back(n);
    }
    if (!sv.index_files.empty()) sv.index = IndexState::kDamaged;
  }
  std::string ns = StoreNamespace(o);
  for (auto& pc : o.paths) {
    PathSurvey ps;
    ps.dir = absl::StrCat(pc.path.root, "/", ns);
    ps.segments = CountSegmentFiles(ps.dir, fsys);
    auto text = fsys->ReadFile(ps.dir + "/STORE", kMaxConfigBytes);
    if (text.ok()) {
      ps.has_descriptor = true;
      auto d = StoreOptionsFromDescriptor(*text);
      if (d.ok()) {
        ps.uuid = d->store_uuid;
        ps.meta_dir = d->meta_dir;
      } else {
        ps.descriptor_error = std::string(d.status().message());
      }
    }
    sv.paths.push_back(ps);
  }
  return sv;
}

}  // namespace mlpo
