// Host staging of one step's gradients, per subgroup, in the gradient's own
// low-precision dtype (delayed conversion: no fp32 gradient is materialised
// outside the update kernel), or lent by the caller (Borrow: no copy).
// Slices arrive in any order. Their squares and non-finite counts (for the
// global norm and the overflow check) are taken as a host copy is made, in
// the same pass over memory and over the pool's threads (CopyGradStats);
// of borrowed slices and of what a device copied in, when the step starts,
// over every thread (FinishStats). Either way the sums are taken in 1 Mi
// element chunks and added in the order the slices came, so a device run
// and a host run of the same step agree bit for bit.
//
// Thread-safety: Stage* may be called concurrently for disjoint slices.
#ifndef MLPO_OPTIMIZER_GRAD_STAGE_H_
#define MLPO_OPTIMIZER_GRAD_STAGE_H_

#include <algorithm>
#include <cstdint>
#include <map>
#include <vector>

#include "absl/status/status.h"
#include "base/aligned_buffer.h"
#include "base/mutex.h"
#include "gpu/device_backend.h"
#include "optimizer/kernel/grad_stats.h"
#include "optimizer/parallel.h"
#include "optimizer/partition.h"

namespace mlpo {

class GradStage {
 public:
  // `runner` (not owned; may be null: one thread) splits host copies.
  GradStage(const std::vector<Subgroup>& subgroups, DType dtype,
            ParallelRunner* runner = nullptr);
  ~GradStage() { Unregister(); }

  DType dtype() const { return dtype_; }
  // Copies `count` gradient elements of `dtype` that start at element
  // `offset` of parameter group `group`. InvalidArgument for a wrong dtype,
  // a range outside the group, or elements already staged this step.
  absl::Status Stage(int group, uint64_t offset, const void* data, DType dtype,
                     uint64_t count);
  // The same without a copy: the step reads the caller's memory, which
  // must stay valid and unchanged until Step returns (or Reset). The
  // statistics are taken by FinishStats.
  absl::Status Borrow(int group, uint64_t offset, const void* data,
                      DType dtype, uint64_t count);
  // Takes the statistics of borrowed slices not yet counted, in parallel.
  void FinishStats(ParallelRunner* runner);
  // The same from device memory: each subgroup's part is copied by the
  // backend straight into the stage (registered with it: no bounce buffer)
  // on the gradient stream, all of them before one wait (the caller may
  // reuse its memory when this returns); their statistics are taken by
  // FinishStats. A backend whose "device" memory is host memory (the host
  // backend) is copied as Stage copies, statistics and all.
  absl::Status StageFromDevice(DeviceBackend* backend, int group,
                               uint64_t offset, const void* device_data,
                               DType dtype, uint64_t count);
  // Pins the stage's buffers for the backend's copies (once).
  absl::Status RegisterWith(DeviceBackend* backend);
  void Unregister();

  // OK when every element of every subgroup was staged; otherwise
  // FailedPrecondition naming the first subgroup and range missing.
  absl::Status CheckComplete() const;
  // How many of elements [offset, offset + count) of `group` were staged.
  uint64_t StagedCount(int group, uint64_t offset, uint64_t count) const;
  GradStats Totals() const;  // over everything counted by FinishStats
  // The gradient of element `offset` of `subgroup` and how many elements
  // from it are contiguous there (a borrowed slice or the stage's copy).
  const void* Span(int subgroup, uint64_t offset, uint64_t* avail) const;
  void Reset();  // forget this step's gradients

 private:
  const std::vector<Subgroup>& subgroups_;
  // Statistics are summed per chunk of this many elements of a slice.
  static constexpr uint64_t kStatsChunk = uint64_t{1} << 20;
  // The chunk count of a slice of n elements, and chunk i's elements.
  static size_t StatsChunks(uint64_t n) {
    return (n + kStatsChunk - 1) / kStatsChunk;
  }
  static uint64_t StatsChunkSize(uint64_t n, size_t i) {
    return std::min(kStatsChunk, n - i * kStatsChunk);
  }
  // Copies a slice in: from host memory (device == nullptr) with its
  // statistics, or by `device`'s copy engine.
  absl::Status StageImpl(int group, uint64_t offset, const void* data,
                         DType dtype, uint64_t count, DeviceBackend* device);
  std::vector<SubgroupSlice> Overlaps(int group, uint64_t offset,
                                      uint64_t count) const {
    return SlicesOf(subgroups_, by_group_[group], offset, count);
  }
  // Validates a slice (dtype, range, not staged yet) and marks it staged.
  absl::Status Claim(int group, uint64_t offset, DType dtype, uint64_t count);
  void AllocateBuffers();  // every subgroup's copy buffer
  DType dtype_;
  // Allocated when first copied into (borrowed gradients need none).
  std::vector<AlignedBuffer> bufs_;
  struct Borrowed {
    uint64_t end;  // subgroup element after the slice
    const char* data;
  };
  // subgroup -> borrowed slices by first element. Written under mu_ by
  // Borrow; read by the step after staging ends.
  std::vector<std::map<uint64_t, Borrowed>> borrowed_;
  // Slices in the order they came; `chunks` holds their statistics per
  // kStatsChunk when taken already (a host copy), else FinishStats takes
  // them.
  struct Counted {
    const char* p;
    uint64_t n;
    std::vector<GradStats> chunks;
  };
  std::vector<Counted> pending_stats_ ABSL_GUARDED_BY(mu_);
  ParallelRunner* runner_;
  DeviceBackend* registered_with_ = nullptr;
  std::vector<std::vector<int>> by_group_;  // group -> subgroup indices
  mutable Mutex mu_;
  // subgroup -> staged ranges (start -> end), disjoint
  std::vector<std::map<uint64_t, uint64_t>> staged_ ABSL_GUARDED_BY(mu_);
  GradStats totals_ ABSL_GUARDED_BY(mu_);
};

}  // namespace mlpo

#endif  // MLPO_OPTIMIZER_GRAD_STAGE_H_
