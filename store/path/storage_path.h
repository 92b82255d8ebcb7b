// One storage path: a directory on one storage class (node-local NVMe, a PFS
// mount, ...) holding this store's segment files, with its own I/O engine,
// extent allocator, bandwidth caps and node-wide I/O slots.
//
// Layout: <root>/.mlpo/uuid            identity of the path (checked on open)
//         <root>/.mlpo/slots/slot-<i>  node-wide I/O slots (flock)
//         <root>/<ns>/seg-<n>          segment files, fallocated
//
// Thread-safe.
// Layer store/path: may include base/, store/io and store/fs only.
#ifndef MLPO_STORE_PATH_STORAGE_PATH_H_
#define MLPO_STORE_PATH_STORAGE_PATH_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "base/mutex.h"
#include "store/path/admission.h"
#include "store/path/extent_allocator.h"
#include "store/fs/file_system.h"
#include "store/io/io_engine.h"

namespace mlpo {

enum class PathKind { kNvme, kPfs, kOther };
const char* PathKindName(PathKind k);
absl::StatusOr<PathKind> ParsePathKind(absl::string_view s);

struct PathOptions {
  std::string root;  // must exist
  PathKind kind = PathKind::kNvme;
  // Bandwidth cap per direction in bytes/s; 0 = uncapped (default). A cap
  // lower than the device makes the path that slow; the idle credit it keeps
  // is cap_burst.
  uint64_t read_cap = 0;
  uint64_t write_cap = 0;
  absl::Duration cap_burst = absl::Milliseconds(20);
  // Node-wide I/O slots: -1 = by kind (1 for pfs, unlimited otherwise),
  // 0 = unlimited, N = at most N processes of this node transfer at once.
  int slots = -1;
  // How long a busy process keeps a slot before it hands it on (releases
  // it and waits a moment so another rank takes it): ranks of a node take
  // turns on a shared path. 0 = keep it until this process is idle.
  absl::Duration slot_turn = absl::Milliseconds(100);
  // Most bytes of segments this path may hold; 0 = whatever the filesystem
  // allows (fallocate fails with ENOSPC -> ResourceExhausted).
  uint64_t capacity = 0;
  // Size of each segment file, a multiple of 4 KiB. Larger segments mean
  // fewer files; capacity grows one segment at a time.
  uint64_t segment_bytes = uint64_t{256} << 20;
  bool direct = true;  // O_DIRECT when the filesystem allows it
  // Open existing segments read-only (O_RDONLY), create nothing and take no
  // I/O slot: for tools that inspect a store on a read-only mount or that
  // belongs to another user who granted read access.
  bool read_only = false;
  // Open although segment files are missing (a read-only look, or `mlpo
  // recover --salvage`): each missing file is a placeholder whose reads
  // fail with NotFound naming it. Without it a gap is DataLoss.
  bool allow_missing_segments = false;
  // The root's identity as the store established it when its identity file
  // is gone and a read-only open may not write it back (ObjectStore's
  // MendPathIdentity); empty: the file must be there.
  std::string known_uuid;
  // Where segment files are opened, preallocated and synced; nullptr = the
  // POSIX default. Tests pass a FaultInjectionFileSystem. Not owned.
  FileSystem* fs = nullptr;
  IoEngineKind engine = IoEngineKind::kAuto;
  int queue_depth = 32;   // 1..4096
};

struct PathUsage {
  uint64_t total = 0, used = 0, free = 0;
};

struct PathCounters {
  uint64_t bytes_read = 0, bytes_written = 0;
  double busy_s = 0;  // wall time with at least one transfer in flight
};

class StoragePath {
 public:
  // Opens (and with `create` makes) namespace `ns` under options.root.
  static absl::StatusOr<std::unique_ptr<StoragePath>> Open(
      const PathOptions& options, const std::string& ns, bool create);
  ~StoragePath();

  const std::string& root() const { return options_.root; }
  const std::string& dir() const { return dir_; }
  const std::string& uuid() const { return uuid_; }
  PathKind kind() const { return options_.kind; }
  const PathOptions& options() const { return options_; }

  // Allocates `length` bytes as one or more extents, adding segments as
  // needed. ResourceExhausted names the path when capacity or disk is short.
  absl::StatusOr<std::vector<Range>> Allocate(uint64_t length);
  absl::Status Free(Range r);
  absl::Status MarkUsed(Range r);

  // Asynchronous transfer of one extent (never crosses a segment).
  void Read(Range r, void* buf, IoCallback done);
  void Write(Range r, const void* buf, IoCallback done);
  // Makes everything written so far durable (fdatasync of dirty segments).
  absl::Status Sync();

  // Segments up to (not including) `count` exist: placeholders for missing
  // files when allow_missing_segments, else DataLoss naming them. LoadState
  // calls it with the count the index's extents need.
  absl::Status EnsureSegments(uint64_t count);
  // Segment files that are missing, and those shorter than segment_bytes.
  std::vector<std::string> MissingSegments() const;
  std::vector<std::string> ShortSegments() const;
  // Creates every missing segment file (preallocated, synced) and extends
  // short ones to the segment size, so that new extents can go anywhere:
  // `mlpo recover --salvage` after it has dropped what they held.
  absl::Status RepairSegments();

  // "<dir>/seg-<n>" of the segment that holds linear offset `off`.
  std::string SegmentFile(uint64_t off) const;
  uint64_t SegmentOffset(uint64_t off) const {
    return off % options_.segment_bytes;
  }
  PathUsage Usage() const;
  PathCounters Counters() const;
  // Changes the path's bandwidth caps from now on (bytes/s, 0 = none).
  // FailedPrecondition when the path was opened without caps or slots (its
  // engine then runs without admission).
  absl::Status SetCaps(uint64_t read_cap, uint64_t write_cap);
  IoEngine* engine() { return engine_.get(); }

 private:
  explicit StoragePath(const PathOptions& o) : options_(o) {}
  FileSystem* fs() const {
    return options_.fs ? options_.fs : DefaultFileSystem();
  }
  absl::Status AddSegment() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Transfer(IoOp op, Range r, void* buf, IoCallback done);

  PathOptions options_;
  std::string dir_;
  std::string uuid_;
  std::unique_ptr<PathAdmission> admission_;
  std::unique_ptr<IoEngine> engine_;

  mutable Mutex mu_;
  std::unique_ptr<ExtentAllocator> alloc_ ABSL_GUARDED_BY(mu_);
  struct Segment {
    int fd = -1;
    int handle = -1;
    bool dirty = false;
    bool missing = false;  // a placeholder: the file is gone
  };
  // Opens segment `n`'s file (existing) and registers it in `seg`.
  absl::Status OpenSegment(uint64_t n, Segment* seg)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // DataLoss naming the missing segment files of [from, to).
  absl::Status MissingError(const std::vector<uint64_t>& missing) const;
  std::vector<Segment> segments_ ABSL_GUARDED_BY(mu_);
  bool direct_ = true;

  mutable Mutex busy_mu_;
  int inflight_ ABSL_GUARDED_BY(busy_mu_) = 0;
  absl::Time busy_since_ ABSL_GUARDED_BY(busy_mu_);
  absl::Duration busy_ ABSL_GUARDED_BY(busy_mu_);
  std::atomic<uint64_t> bytes_read_{0}, bytes_written_{0};
};

// Reads (creating when `create`) the identity file <root>/.mlpo/uuid. A
// missing file is NotFound; one whose content is not 32 hex digits is
// DataLoss naming the file and what it holds.
absl::StatusOr<std::string> PathUuid(const std::string& root, bool create,
                                     FileSystem* fs = nullptr);

// The size of the segment files already in `dir` (that of seg-000000), or 0
// when there is none.
absl::StatusOr<uint64_t> ExistingSegmentBytes(const std::string& dir,
                                              FileSystem* fs = nullptr);
// How many segment files (seg-*) `dir` holds; 0 when `dir` does not exist.
int CountSegmentFiles(const std::string& dir, FileSystem* fs = nullptr);

// A random 128-bit identity as 32 hex digits.
std::string NewUuid();

}  // namespace mlpo

#endif  // MLPO_STORE_PATH_STORAGE_PATH_H_
