// Sizes a user configures that are in range yet absurd: a cap of "1" (for
// "1G": bytes/s, close() waits for hours), a segment larger than the
// path's capacity. Checked where a config is written by a user (a TOML, and
// the creation of a new store), not where one is read back from a store's
// descriptors: a store made before these checks still opens.
#ifndef MLPO_STORE_CONFIG_SANITY_H_
#define MLPO_STORE_CONFIG_SANITY_H_

#include "absl/status/status.h"
#include "store/store_options.h"

namespace mlpo {

// InvalidArgument naming the path, the key and what to write instead: a
// read or write cap other than 0 below 1 MiB/s, or segment_bytes above the
// path's capacity.
absl::Status CheckConfiguredSizes(const StoreOptions& o);

}  // namespace mlpo

#endif  // MLPO_STORE_CONFIG_SANITY_H_
