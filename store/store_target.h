// Which store a command-line target names: a TOML config file, a store
// directory (one holding STORE), a store's name directory or a path root
// holding one store; and the ranks of a data-parallel store. The CLI's and
// the admin tools' way from what a user typed to StoreOptions.
#ifndef MLPO_STORE_STORE_TARGET_H_
#define MLPO_STORE_STORE_TARGET_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "store/store_options.h"

namespace mlpo {

// A directory holding STORE is itself; a directory holding none resolves
// to the one store directory below it: DIR/<store>/rank-<r> (DIR is a path
// root, as the adapter's store= names it) or DIR/rank-<r> (DIR is a store's
// name directory). NotFound when there is none, InvalidArgument naming
// them when there are several.
absl::StatusOr<std::string> ResolveStoreDir(const std::string& dir);
// Every store directory ResolveStoreDir looks for (DIR itself when it holds
// STORE), sorted; empty when there is none.
std::vector<std::string> FindStoreDirs(const std::string& dir);
// The directory of one store of several ranks (data parallel:
// <dir>/rank-<r>) when `dirs` (FindStoreDirs) are two or more of its ranks,
// however spelt; else empty.
std::string RanksOfOneStore(const std::vector<std::string>& dirs);
// The rank directories of one store of several ranks when `target` is its
// directory or a path root holding only it (FindStoreDirs, then
// RanksOfOneStore); else empty.
std::vector<std::string> RanksOfStoreAt(const std::string& target);
// The directory holding store directory `dir` (its name directory when
// `dir` is a rank's), absolute and normal: "x/rank-0/" and "." work too.
std::string ParentOfStoreDir(const std::string& dir);

// For the CLI: a TOML config file, or a store directory holding STORE (or a
// directory ResolveStoreDir resolves to one).
// A directory that is not one of the roots its descriptor records (a copy
// or a moved store: descriptors record absolute roots) is refused with
// FailedPrecondition naming `mlpo relocate`, unless `any_location` (what
// relocate itself reads).
absl::StatusOr<StoreOptions> StoreOptionsForTarget(const std::string& target,
                                                   bool any_location = false);

// Whether `a` and `b` name one existing directory (links and spellings
// resolved: device and inode compared). False when either is missing.
bool SameDirectory(const std::string& a, const std::string& b);

}  // namespace mlpo

#endif  // MLPO_STORE_STORE_TARGET_H_
