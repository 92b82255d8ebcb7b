// Free-space map of one storage path: a linear byte space made of equal
// segments (one file each). Extents are kIoAlignment-aligned, never cross a
// segment boundary, and frees coalesce with their neighbours.
//
// Free space is derived, not stored (docs/design.md "The store", invariant 3): on open the store
// calls MarkUsed for every extent a live head or tag references.
//
// Thread-compatible: the owner (StoragePath) serialises calls.
#ifndef MLPO_STORE_PATH_EXTENT_ALLOCATOR_H_
#define MLPO_STORE_PATH_EXTENT_ALLOCATOR_H_

#include <cstdint>
#include <map>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace mlpo {

struct Range {
  uint64_t offset = 0;
  uint64_t length = 0;
  bool operator==(const Range&) const = default;
};

class ExtentAllocator {
 public:
  // `segment_bytes`: a positive multiple of kIoAlignment.
  explicit ExtentAllocator(uint64_t segment_bytes);

  // Adds one more segment of free space at the end.
  void AddSegment();
  uint64_t segments() const { return segments_; }
  uint64_t segment_bytes() const { return segment_bytes_; }

  // Allocates `length` bytes (rounded up to kIoAlignment) as few extents as
  // possible, largest free ranges first. ResourceExhausted when the free
  // space is short; nothing is allocated then.
  absl::StatusOr<std::vector<Range>> Allocate(uint64_t length);
  // Returns a range. InvalidArgument if any of it is already free or outside.
  absl::Status Free(Range r);
  // Marks a range used (rebuilding from the index). InvalidArgument if any of
  // it is not free (a double reference: a corrupt index).
  absl::Status MarkUsed(Range r);

  uint64_t total() const { return segments_ * segment_bytes_; }
  uint64_t used() const { return total() - free_; }
  uint64_t free() const { return free_; }
  size_t free_ranges() const { return by_offset_.size(); }

 private:
  void Insert(uint64_t off, uint64_t len);
  void Erase(std::map<uint64_t, uint64_t>::iterator it);
  uint64_t SegmentEnd(uint64_t off) const {
    return (off / segment_bytes_ + 1) * segment_bytes_;
  }

  uint64_t segment_bytes_;
  uint64_t segments_ = 0;
  uint64_t free_ = 0;
  std::map<uint64_t, uint64_t> by_offset_;                // offset -> length
  std::multimap<uint64_t, uint64_t, std::greater<>> by_size_;  // len -> off
};

}  // namespace mlpo

#endif  // MLPO_STORE_PATH_EXTENT_ALLOCATOR_H_
