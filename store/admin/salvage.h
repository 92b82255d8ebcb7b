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

#include "absl/status/statusor.h"
#include "store/object_store.h"

namespace mlpo {

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
