// Where a command may write a file: never on a store's state.
#ifndef MLPO_TOOLS_OUTPUT_PATH_H_
#define MLPO_TOOLS_OUTPUT_PATH_H_

#include <string>

#include "absl/status/status.h"

namespace mlpo {

// OK when `out` may be written: it is not inside a store directory (one
// holding a STORE descriptor, an index's MLPO-SEAL or MLPO-LOCK, an index
// backup, or a path's .mlpo), whatever store it belongs to, and -- unless
// `force` -- no file is there yet. InvalidArgument / AlreadyExists naming
// what was found otherwise. Checked before any work starts.
absl::Status CheckOutputPath(const std::string& out, bool force);

}  // namespace mlpo

#endif  // MLPO_TOOLS_OUTPUT_PATH_H_
