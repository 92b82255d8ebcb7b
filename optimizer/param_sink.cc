#include "optimizer/param_sink.h"

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "base/trace.h"

namespace mlpo {

absl::StatusOr<std::unique_ptr<DeviceParamSink>> DeviceParamSink::Create(
    DeviceBackend* backend, std::vector<void*> dest, DType dtype,
    uint64_t max_numel, int buffers) {
  std::vector<std::vector<DevicePiece>> pieces(dest.size());
  for (size_t g = 0; g < dest.size(); ++g) {
    if (dest[g] == nullptr)
      return absl::InvalidArgumentError(
          absl::StrCat("device parameter sink: no destination for group ", g));
    pieces[g].push_back({0, UINT64_MAX, dest[g]});
  }
  return Create(backend, std::move(pieces), dtype, max_numel, buffers);
}

absl::StatusOr<std::unique_ptr<DeviceParamSink>> DeviceParamSink::Create(
    DeviceBackend* backend, std::vector<std::vector<DevicePiece>> dest,
    DType dtype, uint64_t max_numel, int buffers) {
  if (backend == nullptr || buffers < 1 || max_numel == 0)
    return absl::InvalidArgumentError(
        "device parameter sink: a backend, a subgroup size and at least one "
        "buffer");
  for (size_t g = 0; g < dest.size(); ++g) {
    auto& ps = dest[g];
    std::sort(ps.begin(), ps.end(), [](const DevicePiece& a,
                                       const DevicePiece& b) {
      return a.offset < b.offset;
    });
    for (size_t i = 0; i < ps.size(); ++i) {
      if (ps[i].dst == nullptr && ps[i].numel > 0)
        return absl::InvalidArgumentError(absl::StrCat(
            "device parameter sink: group ", g, " piece at ", ps[i].offset,
            " has no destination"));
      if (i > 0 && ps[i - 1].offset + ps[i - 1].numel > ps[i].offset)
        return absl::InvalidArgumentError(absl::StrCat(
            "device parameter sink: group ", g, " pieces at ",
            ps[i - 1].offset, " and ", ps[i].offset, " overlap"));
    }
  }
  std::unique_ptr<DeviceParamSink> s(
      new DeviceParamSink(backend, std::move(dest), dtype));
  for (int i = 0; i < buffers; ++i) {
    s->staging_.emplace_back(max_numel * DTypeSize(dtype));
    absl::Status st = backend->RegisterHost(s->staging_.back().data(),
                                            s->staging_.back().size());
    if (!st.ok()) {
      s->staging_.pop_back();
      return Annotate(st, "device parameter sink: staging buffer");
    }
  }
  s->in_flight_.assign(buffers, false);
  return s;
}

DeviceParamSink::~DeviceParamSink() {
  (void)backend_->Synchronize(kParamStream);
  for (auto& b : staging_) backend_->UnregisterHost(b.data());
}

void* DeviceParamSink::Buffer(const Subgroup& s) {
  tiles_done_.store(0, std::memory_order_relaxed);
  current_ = next_;
  next_ = (next_ + 1) % staging_.size();
  if (in_flight_[current_]) {
    // Its copy was started a full round ago; wait for it (stream order: all
    // copies before it are done too).
    TraceSpan span("param copy wait", "wait", "parameters");
    (void)backend_->Synchronize(kParamStream);
    in_flight_.assign(in_flight_.size(), false);
  }
  return staging_[current_].data();
}

template <typename Fn>
absl::Status DeviceParamSink::ForEachPiece(const Subgroup& s, uint64_t first,
                                           uint64_t end, Fn fn) {
  if (s.group < 0 || static_cast<size_t>(s.group) >= dest_.size())
    return absl::InvalidArgumentError(
        absl::StrCat("device parameter sink: no group ", s.group));
  const size_t es = DTypeSize(dtype_);
  const uint64_t lo = s.group_offset + first, hi = s.group_offset + end;
  const auto& ps = dest_[s.group];
  // The first piece that ends after lo, then every one that starts before hi.
  auto it = std::upper_bound(ps.begin(), ps.end(), lo,
                             [](uint64_t v, const DevicePiece& p) {
                               return v < p.offset;
                             });
  if (it != ps.begin()) --it;
  for (; it != ps.end() && it->offset < hi; ++it) {
    uint64_t a = std::max(lo, it->offset);
    uint64_t b = it->numel == UINT64_MAX ? hi : std::min(hi, it->offset + it->numel);
    if (a >= b) continue;
    char* dst = static_cast<char*>(it->dst) + (a - it->offset) * es;
    const char* src = staging_[current_].data() + (a - s.group_offset) * es;
    MLPO_RETURN_IF_ERROR(fn(dst, src, (b - a) * es));
  }
  return absl::OkStatus();
}

void DeviceParamSink::TileDone(const Subgroup& s, uint64_t offset,
                               uint64_t n) {
  if (!per_tile_) return;
  // (A bad group is Publish's to report.)
  if (ForEachPiece(s, offset, offset + n,
                   [](char* dst, const char* src, size_t bytes) {
                     std::memcpy(dst, src, bytes);
                     return absl::OkStatus();
                   }).ok())
    tiles_done_.fetch_add(n, std::memory_order_relaxed);
}

absl::Status DeviceParamSink::Publish(const Subgroup& s) {
  TraceSpan span("param copy", "copy", "parameters",
                 s.numel * DTypeSize(dtype_));
  // Tiles that covered the subgroup copied it already (the ParallelFor that
  // ran them has returned: their copies are visible here).
  const bool copied = per_tile_ && tiles_done_.exchange(0) == s.numel;
  MLPO_RETURN_IF_ERROR(ForEachPiece(
      s, 0, s.numel, [&](char* dst, const char* src, size_t bytes) {
        bytes_copied_ += bytes;
        if (copied) return absl::OkStatus();
        return Annotate(
            backend_->CopyToDevice(dst, src, bytes, kParamStream),
            absl::StrCat("parameters of ", s.object));
      }));
  if (!copied) in_flight_[current_] = true;
  return absl::OkStatus();
}

absl::Status DeviceParamSink::Flush() {
  in_flight_.assign(in_flight_.size(), false);
  TraceSpan span("param flush", "wait", "parameters");
  return backend_->Synchronize(kParamStream);
}

}  // namespace mlpo
