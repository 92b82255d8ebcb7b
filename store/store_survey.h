// What of a store exists on disk, read without changing anything: the
// index directory's state and, per path, the store directory's descriptor
// and segment files. Shared by ObjectStore's open (object_store_open.cc) and
// repair (store/admin/repair.cc); not a public interface.
#ifndef MLPO_STORE_STORE_SURVEY_H_
#define MLPO_STORE_STORE_SURVEY_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "store/store_options.h"

namespace mlpo {

// The writer lock in the index directory (flock).
inline constexpr char kLockFile[] = "MLPO-LOCK";

struct PathSurvey {
  std::string dir;  // <root>/<name>/rank-<r>
  bool has_descriptor = false;
  std::string descriptor_error;  // a STORE that does not parse
  std::string uuid, meta_dir;    // recorded in the descriptor
  int segments = 0;
};

enum class IndexState { kAbsent, kPresent, kDamaged };

struct StoreSurvey {
  IndexState index = IndexState::kAbsent;
  std::vector<std::string> index_files;  // what a damaged index left
  std::vector<PathSurvey> paths;

  int segments() const;
  // The index has no CURRENT, holds no table file, and no path holds a
  // segment: a creation killed before RocksDB finished its first open.
  // Nothing was ever stored; the leftovers can go and the store be made.
  bool CreationCutShort() const;
  // Removes the index directory's leftovers (index_files) of a creation
  // cut short; only when CreationCutShort().
  absl::Status RemoveCutShortCreation(const std::string& meta_dir,
                                      FileSystem* fs) const;
  // Each path's store directory.
  std::vector<std::string> dirs() const {
    std::vector<std::string> out;
    for (const auto& p : paths) out.push_back(p.dir);
    return out;
  }
  // "N in DIR, ..." for every path with segment files.
  std::string SegmentSummary() const;
};

StoreSurvey SurveyStore(const StoreOptions& o);

}  // namespace mlpo

#endif  // MLPO_STORE_STORE_SURVEY_H_
