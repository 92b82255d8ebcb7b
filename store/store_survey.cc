#include "store/store_survey.h"

#include <filesystem>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "store/fs/file_util.h"
#include "store/path/storage_path.h"

namespace mlpo {
namespace fs = std::filesystem;

int StoreSurvey::segments() const {
  int n = 0;
  for (auto& p : paths) n += p.segments;
  return n;
}

std::string StoreSurvey::SegmentSummary() const {
  std::vector<std::string> parts;
  for (auto& p : paths)
    if (p.segments > 0) parts.push_back(absl::StrCat(p.segments, " in ", p.dir));
  return absl::StrJoin(parts, ", ");
}

StoreSurvey SurveyStore(const StoreOptions& o) {
  StoreSurvey sv;
  std::error_code ec;
  bool current = fs::exists(o.meta_dir + "/CURRENT", ec);
  if (current) {
    sv.index = IndexState::kPresent;
  } else {
    for (fs::directory_iterator it(o.meta_dir, ec), end; !ec && it != end;
         it.increment(ec)) {
      std::string n = it->path().filename().string();
      if (n == kLockFile) continue;
      sv.index_files.push_back(n);
    }
    if (!sv.index_files.empty()) sv.index = IndexState::kDamaged;
  }
  std::string ns = StoreNamespace(o);
  for (auto& pc : o.paths) {
    PathSurvey ps;
    ps.dir = absl::StrCat(pc.path.root, "/", ns);
    ps.segments = CountSegmentFiles(ps.dir);
    auto text = ReadSmallFile(ps.dir + "/STORE", kMaxConfigBytes);
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
