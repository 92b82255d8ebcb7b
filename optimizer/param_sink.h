// Where new parameters go after each subgroup's update, in the model dtype.
// The host sink keeps one buffer per parameter group (CPU runs, tests, the
// benchmark); the device sink copies them to the GPU as they are made.
//
// Thread-safety: Buffer/Publish are called by the update pipeline's thread.
#ifndef MLPO_OPTIMIZER_PARAM_SINK_H_
#define MLPO_OPTIMIZER_PARAM_SINK_H_

#include <atomic>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"

#include "absl/status/status.h"
#include "gpu/device_backend.h"
#include "optimizer/partition.h"
#include "base/dtype.h"
#include "base/aligned_buffer.h"

namespace mlpo {

class ParamSink {
 public:
  virtual ~ParamSink() = default;
  virtual DType dtype() const = 0;
  // Where the kernel writes subgroup `s`'s new parameters (numel elements of
  // dtype()), or nullptr for none.
  virtual void* Buffer(const Subgroup& s) = 0;
  // The kernel has filled elements [offset, offset + n) of Buffer(s): one
  // tile, called from the kernel's threads as each ends (disjoint tiles
  // concurrently), while the tile is still in cache. Optional: Publish
  // delivers whatever was not.
  virtual void TileDone(const Subgroup& s, uint64_t offset, uint64_t n) {}
  // The kernel has filled Buffer(s).
  virtual absl::Status Publish(const Subgroup& s) = 0;
  // The step's last subgroup is published: returns when every copy it
  // started is done (the update pipeline calls it before Step returns).
  virtual absl::Status Flush() { return absl::OkStatus(); }
};

// One tensor of a parameter group on the device: elements [offset,
// offset + numel) of the group live at `dst` (param dtype).
struct DevicePiece {
  uint64_t offset = 0;
  uint64_t numel = 0;
  void* dst = nullptr;
};

// New parameters to the device: the kernel writes each subgroup into one of
// `buffers` registered staging buffers, and Publish starts its host-to-device
// copies on the parameter stream into the tensors the subgroup overlaps,
// overlapping the next subgroup's update; a staging buffer is reused only
// after its copy is done. With the host backend the destinations are host
// memory: each tile is copied there as the kernel finishes it (TileDone,
// on the kernel's threads, from cache) instead of the whole subgroup
// after it (re-read from memory); Publish copies the whole subgroup when
// the tiles did not cover it. The CPU tests run the same staging buffers,
// pieces and bounds.
class DeviceParamSink final : public ParamSink {
 public:
  // `dest[g]`: group g's parameters on the device (param dtype, the whole
  // group in one buffer); `max_numel`: the largest subgroup. Not owned:
  // backend, dest.
  static absl::StatusOr<std::unique_ptr<DeviceParamSink>> Create(
      DeviceBackend* backend, std::vector<void*> dest, DType dtype,
      uint64_t max_numel, int buffers = 2);
  // The same with each group made of separate tensors (a model's
  // parameters): pieces[g] must not overlap; elements no piece covers are
  // not copied anywhere.
  static absl::StatusOr<std::unique_ptr<DeviceParamSink>> Create(
      DeviceBackend* backend, std::vector<std::vector<DevicePiece>> pieces,
      DType dtype, uint64_t max_numel, int buffers = 2);
  ~DeviceParamSink() override;
  DType dtype() const override { return dtype_; }
  void* Buffer(const Subgroup& s) override;
  void TileDone(const Subgroup& s, uint64_t offset, uint64_t n) override;
  absl::Status Publish(const Subgroup& s) override;
  absl::Status Flush() override;
  uint64_t bytes_copied() const { return bytes_copied_; }

 private:
  DeviceParamSink(DeviceBackend* b, std::vector<std::vector<DevicePiece>> dest,
                  DType dtype)
      : backend_(b), dest_(std::move(dest)), dtype_(dtype),
        per_tile_(!b->on_device()) {}
  // Calls fn(destination, staging source, bytes) for each piece of group
  // `s.group` that elements [first, end) of the subgroup overlap.
  template <typename Fn>
  absl::Status ForEachPiece(const Subgroup& s, uint64_t first, uint64_t end,
                            Fn fn);
  DeviceBackend* backend_;
  std::vector<std::vector<DevicePiece>> dest_;  // sorted by offset
  DType dtype_;
  const bool per_tile_;  // host memory: TileDone copies
  std::atomic<uint64_t> tiles_done_{0};  // elements TileDone copied
  std::vector<AlignedBuffer> staging_;
  std::vector<bool> in_flight_;
  size_t next_ = 0, current_ = 0;
  uint64_t bytes_copied_ = 0;
};

class HostParamSink final : public ParamSink {
 public:
  HostParamSink(const std::vector<uint64_t>& group_numel, DType dtype)
      : dtype_(dtype) {
    for (uint64_t n : group_numel) bufs_.emplace_back(n * DTypeSize(dtype));
  }
  DType dtype() const override { return dtype_; }
  void* Buffer(const Subgroup& s) override {
    return bufs_[s.group].data() + s.group_offset * DTypeSize(dtype_);
  }
  absl::Status Publish(const Subgroup&) override { return absl::OkStatus(); }
  const void* Group(int g) const { return bufs_[g].data(); }

 private:
  DType dtype_;
  std::vector<AlignedBuffer> bufs_;
};

}  // namespace mlpo

#endif  // MLPO_OPTIMIZER_PARAM_SINK_H_
