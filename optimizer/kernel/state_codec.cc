#include "optimizer/kernel/state_codec.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "base/dtype.h"

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

void DecodeBlock(StateFormat f, bool nonneg, const void* codes,
                 const float* scale, size_t n, float* out) {
  switch (f) {
    case StateFormat::kF32:
      std::memcpy(out, codes, n * 4);
      return;
    case StateFormat::kBF16Moments: {
      const uint16_t* h = static_cast<const uint16_t*>(codes);
      for (size_t i = 0; i < n; ++i) out[i] = BF16ToFloat(h[i]);
      return;
    }
    case StateFormat::kInt8Moments: {
      const uint8_t* q = static_cast<const uint8_t*>(codes);
      if (nonneg) {
        for (size_t i = 0; i < n; ++i) {
          float r = DecodeV8(q[i], *scale);
          out[i] = r * r;
        }
      } else {
        for (size_t i = 0; i < n; ++i) out[i] = DecodeM8(q[i], *scale);
      }
      return;
    }
  }
}

void EncodeBlock(StateFormat f, bool nonneg, const float* in, size_t n,
                 void* codes, float* scale) {
  switch (f) {
    case StateFormat::kF32:
      std::memcpy(codes, in, n * 4);
      return;
    case StateFormat::kBF16Moments: {
      uint16_t* h = static_cast<uint16_t*>(codes);
      for (size_t i = 0; i < n; ++i) h[i] = FloatToBF16(in[i]);
      return;
    }
    case StateFormat::kInt8Moments: {
      uint8_t* q = static_cast<uint8_t*>(codes);
      uint32_t amax = 0;
      if (nonneg) {
        float root[kQuantBlock];
        for (size_t i = 0; i < n; ++i) {
          root[i] = std::sqrt(in[i]);
          amax = std::max(amax, FloatBits(root[i]) & 0x7fffffffu);
        }
        *scale = BlockScale(amax, kV8Max);
        for (size_t i = 0; i < n; ++i) q[i] = EncodeV8(root[i], *scale);
      } else {
        for (size_t i = 0; i < n; ++i)
          amax = std::max(amax, FloatBits(in[i]) & 0x7fffffffu);
        *scale = BlockScale(amax, kM8Max);
        for (size_t i = 0; i < n; ++i) q[i] = EncodeM8(in[i], *scale);
      }
      return;
    }
  }
}

void DecodeSlot(const StateRef& r, int k, uint64_t from, uint64_t n,
                float* out) {
  const size_t bytes = MomentBytes(r.format);
  const char* codes = static_cast<const char*>(r.slot[k]);
  if (r.format != StateFormat::kInt8Moments)
    return DecodeBlock(r.format, r.nonneg[k], codes + from * bytes, nullptr,
                       n, out);
  for (uint64_t e = from; e < from + n;) {
    const uint64_t end = std::min(r.grid->BlockEnd(e), from + n);
    DecodeBlock(r.format, r.nonneg[k], codes + e, &r.scale[k][r.grid->Block(e)],
                end - e, out + (e - from));
    e = end;
  }
}

void EncodeSlot(const StateRef& r, int k, uint64_t numel, const float* in) {
  char* codes = static_cast<char*>(r.slot[k]);
  if (r.format != StateFormat::kInt8Moments)
    return EncodeBlock(r.format, r.nonneg[k], in, numel, codes, nullptr);
  for (uint64_t a = 0; a < numel;) {
    const uint64_t end = r.grid->BlockEnd(a);
    EncodeBlock(r.format, r.nonneg[k], in + a, end - a, codes + a,
                &r.scale[k][r.grid->Block(a)]);
    a = end;
  }
}

}  // namespace mlpo
