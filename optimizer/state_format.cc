#include "optimizer/state_format.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "base/dtype.h"
#include "store/meta/layout.h"
#include "store/object_store.h"

namespace mlpo {

double StateBytesPerParam(StateFormat f) {
  switch (f) {
    case StateFormat::kBF16Moments: return 8;
    case StateFormat::kInt8Moments: return 6 + 8.0 / kQuantBlock;
    default: return 12;
  }
}

QuantGrid::QuantGrid(const std::vector<uint64_t>& pieces, uint64_t numel)
    : numel_(numel) {
  std::vector<uint64_t> starts = pieces;
  if (starts.empty() || starts[0] != 0) starts.insert(starts.begin(), 0);
  for (size_t k = 0; k < starts.size(); ++k) {
    uint64_t end = k + 1 < starts.size() ? starts[k + 1] : numel;
    if (end <= starts[k]) continue;  // an empty piece
    start_.push_back(starts[k]);
    first_block_.push_back(blocks_);
    blocks_ += (end - starts[k] + kQuantBlock - 1) / kQuantBlock;
  }
}

size_t QuantGrid::Piece(uint64_t i) const {
  auto it = std::upper_bound(start_.begin(), start_.end(), i);
  return static_cast<size_t>(it - start_.begin()) - 1;
}

uint64_t QuantGrid::Block(uint64_t i) const {
  size_t p = Piece(i);
  return first_block_[p] + (i - start_[p]) / kQuantBlock;
}

uint64_t QuantGrid::BlockStart(uint64_t i) const {
  size_t p = Piece(i);
  return start_[p] + (i - start_[p]) / kQuantBlock * kQuantBlock;
}

uint64_t QuantGrid::BlockEnd(uint64_t i) const {
  size_t p = Piece(i);
  uint64_t piece_end = p + 1 < start_.size() ? start_[p + 1] : numel_;
  return std::min(BlockStart(i) + kQuantBlock, piece_end);
}

std::string ScaleSection(absl::string_view section) {
  return absl::StrCat(section, "s");
}

absl::StatusOr<ObjectLayout> StateLayout(StateFormat f, const RuleSpec& rule,
                                         uint64_t numel, uint64_t blocks) {
  std::vector<SectionSpec> secs = {{"p", DType::kF32, numel}};
  const DType code = f == StateFormat::kF32           ? DType::kF32
                     : f == StateFormat::kBF16Moments ? DType::kBF16
                                                      : DType::kU8;
  std::vector<StateSlot> slots = rule.Slots();
  for (const StateSlot& s : slots) secs.push_back({s.section, code, numel});
  if (f == StateFormat::kInt8Moments)
    for (const StateSlot& s : slots)
      secs.push_back({ScaleSection(s.section), DType::kF32, blocks});
  return ObjectLayout::Make(secs);
}

absl::StatusOr<ObjectLayout> StateLayout(StateFormat f, uint64_t numel,
                                         uint64_t blocks) {
  return StateLayout(f, RuleSpec(), numel, blocks);
}

absl::StatusOr<StateRef> StateIn(StateFormat f, const RuleSpec& rule,
                                 CheckoutLease* lease, const QuantGrid& grid) {
  StateRef r;
  r.format = f;
  r.grid = &grid;
  std::vector<StateSlot> slots = rule.Slots();
  r.slots = static_cast<int>(slots.size());
  for (int k = 0; k < r.slots; ++k) {
    r.slot[k] = lease->SectionData(slots[k].section);
    r.nonneg[k] = slots[k].nonneg;
    bool ok = r.slot[k] != nullptr;
    if (f == StateFormat::kInt8Moments) {
      r.scale[k] = lease->Section<float>(ScaleSection(slots[k].section));
      ok = ok && r.scale[k] != nullptr;
    }
    if (!ok)
      return absl::DataLossError(absl::StrCat(
          "object ", lease->object(), " lacks section ", slots[k].section,
          " of update rule ", rule.Name(), " in state format ",
          StateFormatName(f)));
  }
  return r;
}

void DecodeSlot(const StateRef& r, int k, uint64_t from, uint64_t n,
                float* out) {
  switch (r.format) {
    case StateFormat::kF32:
      std::memcpy(out, static_cast<const float*>(r.slot[k]) + from, n * 4);
      return;
    case StateFormat::kBF16Moments:
      for (uint64_t i = 0; i < n; ++i)
        out[i] = BF16ToFloat(static_cast<const uint16_t*>(r.slot[k])[from + i]);
      return;
    case StateFormat::kInt8Moments: {
      const uint8_t* c = static_cast<const uint8_t*>(r.slot[k]);
      for (uint64_t i = 0; i < n;) {
        uint64_t e = from + i;
        uint64_t b = r.grid->Block(e);
        uint64_t end = std::min(r.grid->BlockEnd(e), from + n);
        for (; e < end; ++e, ++i) {
          if (r.nonneg[k]) {
            float q = DecodeV8(c[e], r.scale[k][b]);
            out[i] = q * q;
          } else {
            out[i] = DecodeM8(c[e], r.scale[k][b]);
          }
        }
      }
      return;
    }
  }
}

void EncodeSlot(const StateRef& r, int k, uint64_t numel, const float* in) {
  switch (r.format) {
    case StateFormat::kF32:
      std::memcpy(r.slot[k], in, numel * 4);
      return;
    case StateFormat::kBF16Moments:
      for (uint64_t i = 0; i < numel; ++i)
        static_cast<uint16_t*>(r.slot[k])[i] = FloatToBF16(in[i]);
      return;
    case StateFormat::kInt8Moments: {
      uint8_t* c = static_cast<uint8_t*>(r.slot[k]);
      std::vector<float> root(kQuantBlock);
      for (uint64_t a = 0; a < numel;) {
        uint64_t b = r.grid->Block(a), end = r.grid->BlockEnd(a);
        uint32_t amax = 0;
        for (uint64_t e = a; e < end; ++e) {
          root[e - a] = r.nonneg[k] ? std::sqrt(in[e]) : in[e];
          amax = std::max(amax, FloatBits(root[e - a]) & 0x7fffffffu);
        }
        r.scale[k][b] = BlockScale(amax, r.nonneg[k] ? kV8Max : kM8Max);
        for (uint64_t e = a; e < end; ++e)
          c[e] = r.nonneg[k] ? EncodeV8(root[e - a], r.scale[k][b])
                             : EncodeM8(root[e - a], r.scale[k][b]);
        a = end;
      }
      return;
    }
  }
}

std::string ParamStepsObject(size_t params) {
  return absl::StrCat("param_steps.n", params);
}

absl::StatusOr<ObjectLayout> ParamStepsLayout(size_t params) {
  return ObjectLayout::Make({{"t", DType::kF32, 2 * uint64_t{params}}});
}

absl::StatusOr<std::vector<uint64_t>> ParamStepsIn(const CheckoutLease& lease,
                                                   size_t params) {
  auto want = ParamStepsLayout(params);
  if (!want.ok() || !(lease.layout() == *want))
    return absl::DataLossError(absl::StrCat(
        lease.object(), " is laid out as ", lease.layout().DebugString(),
        ", not as the step counts of ", params, " parameters"));
  std::vector<uint64_t> out(params);
  std::memcpy(out.data(), lease.data() + lease.layout().Find("t")->offset,
              params * sizeof(uint64_t));
  return out;
}

absl::StatusOr<MomentsRef> MomentsIn(StateFormat f, CheckoutLease* lease,
                                     const QuantGrid& grid) {
  MomentsRef r;
  r.format = f;
  r.m = lease->SectionData("m");
  r.v = lease->SectionData("v");
  r.grid = &grid;
  if (f == StateFormat::kInt8Moments) {
    r.ms = lease->Section<float>("ms");
    r.vs = lease->Section<float>("vs");
  }
  if (!r.m || !r.v || (f == StateFormat::kInt8Moments && (!r.ms || !r.vs)))
    return absl::DataLossError(absl::StrCat(
        "object ", lease->object(), " lacks the sections of state format ",
        StateFormatName(f)));
  return r;
}

void DecodeMoments(const MomentsRef& r, uint64_t from, uint64_t n, float* m,
                   float* v) {
  switch (r.format) {
    case StateFormat::kF32:
      std::memcpy(m, static_cast<const float*>(r.m) + from, n * 4);
      std::memcpy(v, static_cast<const float*>(r.v) + from, n * 4);
      return;
    case StateFormat::kBF16Moments:
      for (uint64_t i = 0; i < n; ++i) {
        m[i] = BF16ToFloat(static_cast<const uint16_t*>(r.m)[from + i]);
        v[i] = BF16ToFloat(static_cast<const uint16_t*>(r.v)[from + i]);
      }
      return;
    case StateFormat::kInt8Moments: {
      const uint8_t* mc = static_cast<const uint8_t*>(r.m);
      const uint8_t* vc = static_cast<const uint8_t*>(r.v);
      for (uint64_t i = 0; i < n;) {
        uint64_t e = from + i;
        uint64_t b = r.grid->Block(e);
        uint64_t end = std::min(r.grid->BlockEnd(e), from + n);
        for (; e < end; ++e, ++i) {
          m[i] = DecodeM8(mc[e], r.ms[b]);
          float q = DecodeV8(vc[e], r.vs[b]);
          v[i] = q * q;
        }
      }
      return;
    }
  }
}

void EncodeMoments(const MomentsRef& r, uint64_t numel, const float* m,
                   const float* v) {
  switch (r.format) {
    case StateFormat::kF32:
      std::memcpy(r.m, m, numel * 4);
      std::memcpy(r.v, v, numel * 4);
      return;
    case StateFormat::kBF16Moments:
      for (uint64_t i = 0; i < numel; ++i) {
        static_cast<uint16_t*>(r.m)[i] = FloatToBF16(m[i]);
        static_cast<uint16_t*>(r.v)[i] = FloatToBF16(v[i]);
      }
      return;
    case StateFormat::kInt8Moments: {
      uint8_t* mc = static_cast<uint8_t*>(r.m);
      uint8_t* vc = static_cast<uint8_t*>(r.v);
      std::vector<float> root(kQuantBlock);
      for (uint64_t a = 0; a < numel;) {
        uint64_t b = r.grid->Block(a), end = r.grid->BlockEnd(a);
        uint32_t am = 0, ar = 0;
        for (uint64_t e = a; e < end; ++e) {
          root[e - a] = std::sqrt(v[e]);
          am = std::max(am, FloatBits(m[e]) & 0x7fffffffu);
          ar = std::max(ar, FloatBits(root[e - a]) & 0x7fffffffu);
        }
        r.ms[b] = BlockScale(am, kM8Max);
        r.vs[b] = BlockScale(ar, kV8Max);
        for (uint64_t e = a; e < end; ++e) {
          mc[e] = EncodeM8(m[e], r.ms[b]);
          vc[e] = EncodeV8(root[e - a], r.vs[b]);
        }
        a = end;
      }
      return;
    }
  }
}

}  // namespace mlpo
