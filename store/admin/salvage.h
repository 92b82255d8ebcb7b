// Salvage (`mlpo recover --salvage`): after data was lost (a deleted or
// truncated segment file, extents that fail their checksum), keep every tag
// and head that still reads back whole and drop the rest. Works over the
// store's public interface and StoreView.
//
// Layer store/admin: may include store/ and below.
#ifndef MLPO_STORE_ADMIN_SALVAGE_H_
#define MLPO_STORE_ADMIN_SALVAGE_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "store/object_store.h"

namespace mlpo {

// What Salvage kept and dropped.
struct SalvageReport {
  uint64_t versions_checked = 0;
  std::vector<BadExtent> bad;  // every unreadable extent found
  std::vector<std::string> kept_tags, dropped_tags;
  uint64_t kept_heads = 0;
  std::vector<std::string> dropped_heads;  // objects left without a head
  std::vector<std::string> repaired_segments;  // recreated or extended
};

// Keeps every tag and head whose extents all read back (a replica
// standing in for a bad first copy) and drops the rest: a tag whole (a
// checkpoint is never restored in part), a head leaving its object with
// no committed version (restore a kept tag). Nothing that still reads is
// changed: dropped versions wait for `gc`. Then missing segment files are
// created again and short ones extended, so the store opens for writing.
// Takes the writer lock.
absl::StatusOr<SalvageReport> Salvage(
    const StoreOptions& options,
    std::function<void(uint64_t, uint64_t)> progress = nullptr);

}  // namespace mlpo

#endif  // MLPO_STORE_ADMIN_SALVAGE_H_
