// StoreView: everything that reads a store without changing it goes
// through this view: inspection (objects, tags, version records, statistics,
// attributes: `mlpo inspect`, `ls`, `tags`) and maintenance's reads
// (store/admin/: verify, the extent-map check, salvage's check): the
// options in force, the paths, the version records the index holds, pinned
// while they are read, and each copy of a version read and checked.
// ObjectStore implements it; nothing through it changes the store. Tools
// over it need no access to the store's internals (as RocksDB's utilities
// work over its DB interface).
//
// Thread-safety: as the implementation's (ObjectStore: thread-safe).
// Layer store/: may include base/ and store's own folders.
#ifndef MLPO_STORE_STORE_VIEW_H_
#define MLPO_STORE_STORE_VIEW_H_

#include <algorithm>
#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "store/cache/object_cache.h"
#include "store/fs/file_system.h"
#include "store/meta/layout.h"
#include "store/path/storage_path.h"
#include "store/store_options.h"

namespace mlpo {

// One extent that failed its read or its checksum, or an index problem
// (the error then starts with "index: ").
struct BadExtent {
  std::string object;
  uint64_t version = 0;
  uint64_t step = 0;  // the step of that version (0 when unknown)
  std::string path, file;  // path root; segment file
  uint64_t file_offset = 0, length = 0;
  std::string error;  // checksum mismatch or I/O error text
  // DataLoss for a checksum mismatch; for an I/O error the errno's code
  // (ENOENT -> NotFound, EACCES -> PermissionDenied, EIO -> Internal, ...).
  absl::StatusCode code = absl::StatusCode::kDataLoss;
};

// The status for a bad extent, with its code (DataLoss for a checksum
// mismatch, the errno's for an I/O error); the message names object,
// version, path, file and offset. Checkout, ReadVersion and Verify all read
// through one function and report through this one.
absl::Status BadExtentStatus(const BadExtent& b);

struct StorePathStats {
  std::string root, kind, uuid;
  PathUsage usage;
  uint64_t referenced_bytes = 0;  // by heads and tags
  // Held by version records that no head or tag references any more (a
  // dropped tag's): `gc` frees them.
  uint64_t unreferenced_bytes = 0;
  PathCounters counters;
};

struct StoreStats {
  uint64_t objects = 0, objects_with_head = 0, versions = 0, tags = 0;
  uint64_t commits = 0, checkouts = 0;
  CacheStats cache;  // all zero when the DRAM tier is off
  std::vector<StorePathStats> paths;
};

struct ObjectInfo {
  std::string name;
  ObjectLayout layout;
  bool has_head = false;
  uint64_t head = 0;       // the head's sequence number
  uint64_t head_step = 0;  // the step the head was committed at
  std::vector<uint64_t> versions;  // with a record (head and tagged)
  std::vector<uint64_t> steps;     // the step of each of `versions`
};

// An object's version: (object, sequence number).
using VersionKey = std::pair<std::string, uint64_t>;

// A version record and the object it belongs to.
struct RecordOf {
  std::string object;
  VersionRecord rec;
};

class StoreView {
 public:
  virtual ~StoreView() = default;
  // The options in force: meta_dir filled in, and each path's segment_bytes
  // the store's own.
  virtual const StoreOptions& options() const = 0;
  // The file system of the store's files and its index.
  virtual FileSystem* fs() const = 0;
  virtual size_t num_paths() const = 0;
  virtual const StoragePath& path_at(size_t i) const = 0;
  // Every version record the index holds: heads, tags' versions, and the
  // records awaiting gc. A copy, as of the call.
  virtual std::vector<RecordOf> AllVersions() const = 0;
  // The versions of every head (with `and_tags`, of every tag too), or of
  // `tag` when it is not empty (NotFound naming it when there is none),
  // each pinned (its extents stay allocated) until UnpinVersion.
  virtual absl::StatusOr<std::vector<RecordOf>> PinVersions(
      const std::string& tag, bool and_tags) = 0;
  virtual void UnpinVersion(const std::string& object, uint64_t version) = 0;
  // Reads the version `rec` describes into `buf` (rec.blob_bytes), checking
  // each extent's checksum; failing ones are appended to `bad`. When
  // `rec.replica` is set, the replica stands in for a bad first copy (only
  // what both lose is bad); clear it to read one copy alone.
  virtual void ReadCopy(const std::string& object, const VersionRecord& rec,
                        char* buf, std::vector<BadExtent>* bad) = 0;
  // Inspection. Every object with its head and kept versions.
  virtual std::vector<ObjectInfo> List() const = 0;
  // Every tag: object -> the version it holds.
  virtual std::map<std::string, std::map<std::string, uint64_t>> Tags()
      const = 0;
  // The record of one version (the head when version == 0).
  virtual absl::StatusOr<VersionRecord> GetVersion(const std::string& object,
                                                   uint64_t version) const = 0;
  // Objects, versions, tags, counters, and per path its usage and the bytes
  // heads and tags reference (and what only gc-able records hold).
  virtual StoreStats Stats() const = 0;
  // A small named value kept with the store; NotFound when there is none.
  virtual absl::StatusOr<std::string> GetAttribute(
      const std::string& key) const = 0;
  // The store's identity (index, descriptors and seal agree on it).
  virtual const std::string& store_uuid() const = 0;

  // Reads every version in `keys` whole, each pinned meanwhile (a replica
  // stands in for a bad first copy): the bad extents of each version that
  // failed; versions that read back are absent. `progress(done_bytes,
  // total_bytes)` when not null.
  virtual std::map<VersionKey, std::vector<BadExtent>> CheckVersions(
      const std::set<VersionKey>& keys,
      std::function<void(uint64_t, uint64_t)> progress) = 0;
  // A BadExtent naming `e`'s path, segment file and offset.
  virtual BadExtent DescribeExtent(const std::string& object,
                                   uint64_t version, const ExtentRef& e,
                                   const std::string& error,
                                   absl::StatusCode code) const = 0;
};

// The names of `tags` (StoreView::Tags()) in the order their state was
// written, the oldest first: by the newest version each holds (versions are
// never reused; an empty tag counts as oldest), then by name. Not by name
// alone, where "step-10" sorts before "step-2". `mlpo tags`, `inspect`,
// the adapter.
inline std::vector<std::string> TagsInWriteOrder(
    const std::map<std::string, std::map<std::string, uint64_t>>& tags) {
  std::vector<std::pair<uint64_t, std::string>> order;
  for (auto& [t, objs] : tags) {
    uint64_t newest = 0;
    for (auto& [o, v] : objs) newest = std::max(newest, v);
    order.emplace_back(newest, t);
  }
  std::sort(order.begin(), order.end());
  std::vector<std::string> out;
  for (auto& [v, t] : order) out.push_back(t);
  return out;
}

}  // namespace mlpo

#endif  // MLPO_STORE_STORE_VIEW_H_
