#include "store/path/extent_allocator.h"

#include "absl/strings/str_cat.h"
#include "store/io/io_engine.h"

namespace mlpo {

ExtentAllocator::ExtentAllocator(uint64_t segment_bytes)
    : segment_bytes_(segment_bytes) {}

void ExtentAllocator::Insert(uint64_t off, uint64_t len) {
  by_offset_[off] = len;
  by_size_.emplace(len, off);
}

void ExtentAllocator::Erase(std::map<uint64_t, uint64_t>::iterator it) {
  auto [lo, hi] = by_size_.equal_range(it->second);
  for (auto s = lo; s != hi; ++s) {
    if (s->second == it->first) {
      by_size_.erase(s);
      break;
    }
  }
  by_offset_.erase(it);
}

void ExtentAllocator::AddSegment() {
  uint64_t off = segments_ * segment_bytes_;
  ++segments_;
  Insert(off, segment_bytes_);
  free_ += segment_bytes_;
}

absl::StatusOr<std::vector<Range>> ExtentAllocator::Allocate(uint64_t length) {
  length = (length + kIoAlignment - 1) / kIoAlignment * kIoAlignment;
  if (length == 0) return std::vector<Range>{};
  if (length > free_) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "need ", length, " bytes, ", free_, " free of ", total()));
  }
  std::vector<Range> out;
  uint64_t left = length;
  // Best fit for the whole request when possible; else largest-first.
  auto fit = by_size_.end();
  for (auto it = by_size_.begin(); it != by_size_.end() && it->first >= left;
       ++it)
    fit = it;
  while (left > 0) {
    auto s = fit != by_size_.end() ? fit : by_size_.begin();
    fit = by_size_.end();
    uint64_t off = s->second, len = s->first;
    uint64_t take = std::min(len, left);
    Erase(by_offset_.find(off));
    if (take < len) Insert(off + take, len - take);
    out.push_back({off, take});
    left -= take;
  }
  free_ -= length;
  return out;
}

absl::Status ExtentAllocator::Free(Range r) {
  if (r.length == 0) return absl::OkStatus();
  if (r.offset % kIoAlignment || r.length % kIoAlignment ||
      r.offset + r.length > total() ||
      SegmentEnd(r.offset) < r.offset + r.length) {
    return absl::InvalidArgumentError(absl::StrCat(
        "free of bad extent [", r.offset, ", +", r.length, ")"));
  }
  auto next = by_offset_.lower_bound(r.offset);
  if (next != by_offset_.end() && next->first < r.offset + r.length)
    return absl::InvalidArgumentError(absl::StrCat(
        "double free: extent [", r.offset, ", +", r.length,
        ") overlaps free space at ", next->first));
  if (next != by_offset_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second > r.offset)
      return absl::InvalidArgumentError(absl::StrCat(
          "double free: extent [", r.offset, ", +", r.length,
          ") overlaps free space at ", prev->first));
  }
  uint64_t off = r.offset, len = r.length;
  uint64_t seg_start = off / segment_bytes_ * segment_bytes_;
  if (next != by_offset_.end() && next->first == off + len &&
      next->first < SegmentEnd(off)) {
    len += next->second;
    Erase(next);
  }
  auto after = by_offset_.lower_bound(off);
  if (after != by_offset_.begin()) {
    auto prev = std::prev(after);
    if (prev->first + prev->second == off && prev->first >= seg_start) {
      off = prev->first;
      len += prev->second;
      Erase(prev);
    }
  }
  Insert(off, len);
  free_ += r.length;
  return absl::OkStatus();
}

absl::Status ExtentAllocator::MarkUsed(Range r) {
  if (r.length == 0) return absl::OkStatus();
  auto it = by_offset_.upper_bound(r.offset);
  if (it == by_offset_.begin())
    return absl::InvalidArgumentError(absl::StrCat(
        "extent [", r.offset, ", +", r.length, ") is not free"));
  --it;
  uint64_t off = it->first, len = it->second;
  if (off + len < r.offset + r.length)
    return absl::InvalidArgumentError(absl::StrCat(
        "extent [", r.offset, ", +", r.length,
        ") is not free (referenced twice, or outside the path)"));
  Erase(it);
  if (r.offset > off) Insert(off, r.offset - off);
  if (off + len > r.offset + r.length)
    Insert(r.offset + r.length, off + len - r.offset - r.length);
  free_ -= r.length;
  return absl::OkStatus();
}

}  // namespace mlpo
