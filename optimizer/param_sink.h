// Where new parameters go after each subgroup's update, in the model dtype.
// The host sink keeps one buffer per parameter group (CPU runs, tests, the
// benchmark); a device sink (gpu/) copies them to the GPU.
//
// Thread-safety: Buffer/Publish are called by the update pipeline's thread.
#ifndef MLPO_OPTIMIZER_PARAM_SINK_H_
#define MLPO_OPTIMIZER_PARAM_SINK_H_

#include <vector>

#include "absl/status/status.h"
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
  // The kernel has filled Buffer(s).
  virtual absl::Status Publish(const Subgroup& s) = 0;
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
