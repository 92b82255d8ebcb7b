#include "optimizer/kernel/tile.h"

#include <algorithm>
#include <vector>

namespace mlpo {
namespace {

// The rule's slice of elements [at, at + n) of the subgroup, its gradient
// at `g` in `gd`.
RuleSlice SliceOf(const Tile& t, uint64_t at, uint64_t n, const void* g,
                  DType gd) {
  const StateRef& st = *t.state;
  const size_t msize = MomentBytes(st.format);
  RuleSlice sl;
  sl.p = t.p + at;
  sl.grad = g;
  sl.grad_dtype = gd;
  sl.out = t.out ? static_cast<char*>(t.out) + (at - t.off) *
                                                   DTypeSize(t.out_dtype)
                 : nullptr;
  sl.out_dtype = t.out_dtype;
  sl.n = n;
  sl.format = st.format;
  sl.slots = st.slots;
  for (int k = 0; k < st.slots; ++k) {
    sl.slot[k] = static_cast<char*>(st.slot[k]) + at * msize;
    sl.nonneg[k] = st.nonneg[k];
    if (st.format == StateFormat::kInt8Moments)
      sl.scale[k] = st.scale[k] + st.grid->Block(at);
  }
  return sl;
}

}  // namespace

void UpdateTile(const Tile& t, const GradSource& grad, const RuleConsts& c) {
  const DType gd = grad.dtype();
  uint64_t avail = 0;
  const void* g = grad.Span(t.off, &avail);
  if (avail >= t.n || t.state->format != StateFormat::kInt8Moments) {
    for (uint64_t done = 0; done < t.n;) {
      uint64_t n = std::min(t.n - done, avail);
      RuleUpdate(SliceOf(t, t.off + done, n, g, gd), c);
      done += n;
      if (done < t.n) g = grad.Span(t.off + done, &avail);
    }
    return;
  }
  std::vector<float> gather(t.n);
  for (uint64_t done = 0; done < t.n;) {
    uint64_t n = std::min(t.n - done, avail);
    for (uint64_t i = 0; i < n; ++i) gather[done + i] = LoadAsFloat(g, gd, i);
    done += n;
    if (done < t.n) g = grad.Span(t.off + done, &avail);
  }
  RuleUpdate(SliceOf(t, t.off, t.n, gather.data(), DType::kF32), c);
}

}  // namespace mlpo
