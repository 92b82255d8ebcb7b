// The update of one tile: elements [off, off + n) of a subgroup whose
// master p and slots (StateRef) are in memory, with its gradient from a
// GradSource, by the rule's fused kernel (rule_kernels.h). The pipeline
// (optimizer/update_pipeline.h) cuts each subgroup into tiles and runs
// them on its threads; this is the arithmetic it hands each one.
//
// Thread-safety: UpdateTile on disjoint tiles of one subgroup may run at
// once (an int8 tile starts a block and ends one, so no two tiles share a
// block's scale); a GradSource is read concurrently.
#ifndef MLPO_OPTIMIZER_KERNEL_TILE_H_
#define MLPO_OPTIMIZER_KERNEL_TILE_H_

#include <cstddef>
#include <cstdint>

#include "base/dtype.h"
#include "optimizer/kernel/rule_kernels.h"
#include "optimizer/kernel/state_codec.h"

namespace mlpo {

// Where a subgroup's gradient is: contiguous stretches of it.
class GradSource {
 public:
  virtual ~GradSource() = default;
  // The gradient from element `at` of the subgroup, and in *avail how many
  // elements follow contiguously from there (>= 1 while at < numel).
  virtual const void* Span(uint64_t at, uint64_t* avail) const = 0;
  virtual DType dtype() const = 0;
};

// A gradient in one piece of `numel` elements.
class ContiguousGrad : public GradSource {
 public:
  ContiguousGrad(const void* base, DType dtype, uint64_t numel)
      : base_(static_cast<const char*>(base)), dtype_(dtype), numel_(numel) {}
  const void* Span(uint64_t at, uint64_t* avail) const override {
    *avail = numel_ - at;
    return base_ + at * DTypeSize(dtype_);
  }
  DType dtype() const override { return dtype_; }

 private:
  const char* base_;
  DType dtype_;
  uint64_t numel_;
};

struct Tile {
  float* p = nullptr;                // the subgroup's master, element 0
  const StateRef* state = nullptr;   // its slots (and int8's grid)
  uint64_t off = 0, n = 0;           // the tile: elements [off, off + n)
  void* out = nullptr;    // the new parameters of [off, off + n); or none
  DType out_dtype = DType::kF32;
};

// One kernel call per contiguous stretch of gradient; int8 needs whole
// blocks in one call, so a tile whose gradient is in pieces is gathered
// into fp32 first.
void UpdateTile(const Tile& t, const GradSource& grad, const RuleConsts& c);

}  // namespace mlpo

#endif  // MLPO_OPTIMIZER_KERNEL_TILE_H_
