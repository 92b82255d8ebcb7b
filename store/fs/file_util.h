// Small-file helpers for the store's own metadata files (descriptors, identity
// files, the index seal): owner-only creation, atomic replacement, bounded
// reads. Everything the store creates is private to its owner (0700 / 0600,
// whatever the umask): optimizer state is model weights.
//
// Thread-compatible free functions.
#ifndef MLPO_STORE_FS_FILE_UTIL_H_
#define MLPO_STORE_FS_FILE_UTIL_H_

#include <cstddef>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace mlpo {

inline constexpr int kPrivateDirMode = 0700;
inline constexpr int kPrivateFileMode = 0600;

// `p` made absolute (against the working directory) and normalised
// lexically (no symlinks resolved): how store records name directories.
std::string AbsolutePath(const std::string& p);

// Replaces `file` with `data`: writes "<file>.tmp" (0600), fdatasyncs it,
// renames it over `file` and syncs the directory, so a crash leaves either the
// old or the new content, never a torn one.
absl::Status WriteFileAtomic(const std::string& file, absl::string_view data);

// Reads a regular file of at most `max_bytes` (a device, FIFO or larger file
// is InvalidArgument naming it; a missing file NotFound).
absl::StatusOr<std::string> ReadSmallFile(const std::string& file,
                                          size_t max_bytes);

// fsync of a directory, so entries created or renamed in it are durable.
absl::Status SyncDir(const std::string& dir);

}  // namespace mlpo

#endif  // MLPO_STORE_FS_FILE_UTIL_H_
