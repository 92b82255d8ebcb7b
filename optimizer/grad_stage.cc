#include "optimizer/grad_stage.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "base/trace.h"

namespace mlpo {

GradStage::GradStage(const std::vector<Subgroup>& subgroups, DType dtype,
                     ParallelRunner* runner)
    : subgroups_(subgroups),
      dtype_(dtype),
      bufs_(subgroups.size()),
      borrowed_(subgroups.size()),
      runner_(runner),
      by_group_(SubgroupsByGroup(subgroups)),
      staged_(subgroups.size()) {}

absl::Status GradStage::Stage(int group, uint64_t offset, const void* data,
                              DType dtype, uint64_t count) {
  return StageImpl(group, offset, data, dtype, count, nullptr);
}

absl::Status GradStage::StageFromDevice(DeviceBackend* backend, int group,
                                        uint64_t offset,
                                        const void* device_data, DType dtype,
                                        uint64_t count) {
  if (backend == nullptr)
    return absl::InvalidArgumentError("gradients from the device: no backend");
  return StageImpl(group, offset, device_data, dtype, count,
                   backend->on_device() ? backend : nullptr);
}

void GradStage::AllocateBuffers() {
  for (const Subgroup& s : subgroups_)
    if (bufs_[s.index].size() == 0 && s.numel > 0)
      bufs_[s.index] = AlignedBuffer(s.numel * DTypeSize(dtype_));
}

absl::Status GradStage::RegisterWith(DeviceBackend* backend) {
  if (registered_with_ == backend) return absl::OkStatus();
  Unregister();
  AllocateBuffers();
  for (size_t i = 0; i < bufs_.size(); ++i) {
    if (bufs_[i].size() == 0) continue;
    absl::Status st = backend->RegisterHost(bufs_[i].data(), bufs_[i].size());
    if (!st.ok()) {
      for (size_t j = 0; j < i; ++j)
        if (bufs_[j].size()) backend->UnregisterHost(bufs_[j].data());
      return st;
    }
  }
  registered_with_ = backend;
  return absl::OkStatus();
}

void GradStage::Unregister() {
  if (registered_with_ == nullptr) return;
  for (auto& b : bufs_)
    if (b.size()) registered_with_->UnregisterHost(b.data());
  registered_with_ = nullptr;
}

absl::Status GradStage::Claim(int group, uint64_t offset, DType dtype,
                              uint64_t count) {
  if (dtype != dtype_)
    return absl::InvalidArgumentError(absl::StrCat(
        "gradient for group ", group, " has dtype ", DTypeName(dtype),
        "; this optimizer stages ", DTypeName(dtype_)));
  if (group < 0 || static_cast<size_t>(group) >= by_group_.size() ||
      by_group_[group].empty()) {
    if (count == 0) return absl::OkStatus();
    return absl::InvalidArgumentError(
        absl::StrCat("no parameter group ", group, " with elements"));
  }
  const Subgroup& last = subgroups_[by_group_[group].back()];
  uint64_t group_numel = last.group_offset + last.numel;
  if (offset + count > group_numel || offset + count < offset)
    return absl::InvalidArgumentError(absl::StrCat(
        "gradient slice [", offset, ", ", offset + count, ") of group ", group,
        " exceeds its ", group_numel, " elements"));
  // Validate the whole slice before copying anything.
  {
    MutexLock l(&mu_);
    std::vector<SubgroupSlice> parts = Overlaps(group, offset, count);
    for (const SubgroupSlice& o : parts) {
      auto& m = staged_[o.index];
      auto it = m.upper_bound(o.a);
      bool overlap = (it != m.end() && it->first < o.b) ||
                     (it != m.begin() && std::prev(it)->second > o.a);
      uint64_t base = subgroups_[o.index].group_offset;
      if (overlap)
        return absl::InvalidArgumentError(absl::StrCat(
            "gradient elements [", base + o.a, ", ", base + o.b,
            ") of group ", group, " were already staged this step"));
    }
    for (const SubgroupSlice& o : parts) staged_[o.index][o.a] = o.b;
  }
  return absl::OkStatus();
}

absl::Status GradStage::StageImpl(int group, uint64_t offset, const void* data,
                                  DType dtype, uint64_t count,
                                  DeviceBackend* device) {
  if (data == nullptr && count > 0)
    return absl::InvalidArgumentError(absl::StrCat(
        "gradient for group ", group, " at element ", offset,
        ": null data pointer for ", count, " elements"));
  MLPO_RETURN_IF_ERROR(Claim(group, offset, dtype, count));
  if (count == 0) return absl::OkStatus();
  const char* src = static_cast<const char*>(data);
  size_t es = DTypeSize(dtype);
  // Where each subgroup's part goes in the stage.
  struct Part {
    const char* from;
    char* to;
    uint64_t n;
  };
  std::vector<Part> parts;
  for (const SubgroupSlice& o : Overlaps(group, offset, count)) {
    int si = o.index;
    const Subgroup& s = subgroups_[si];
    uint64_t lo = s.group_offset + o.a, hi = s.group_offset + o.b;
    MutexLock l(&mu_);  // concurrent stagers of one subgroup
    if (bufs_[si].size() == 0)
      bufs_[si] = AlignedBuffer(s.numel * DTypeSize(dtype_));
    parts.push_back({src + (lo - offset) * es,
                     bufs_[si].data() + (lo - s.group_offset) * es, hi - lo});
  }
  std::vector<Counted> counted;
  if (device != nullptr) {
    // Every part's copy on the gradient stream, then one wait: the data
    // needs no synchronisation between them.
    TraceSpan span("stage copy", "copy", "gradients", count * es);
    absl::Status copied;
    for (const Part& part : parts) {
      copied = device->CopyToHost(part.to, part.from, part.n * es,
                                  kGradStream);
      if (!copied.ok()) break;
    }
    absl::Status synced = device->Synchronize(kGradStream);  // none left
    if (copied.ok()) copied = synced;
    if (!copied.ok()) {
      // Nothing of this slice counts as staged: it may be sent again.
      MutexLock l(&mu_);
      for (const SubgroupSlice& o : Overlaps(group, offset, count))
        staged_[o.index].erase(o.a);
      return Annotate(copied, absl::StrCat("gradients of group ", group));
    }
    // Their statistics: FinishStats, reading the host's own copy.
    for (const Part& part : parts) counted.push_back({part.to, part.n, {}});
  } else {
    // Host memory: copied with its statistics in one pass, a chunk per
    // tile over the pool.
    TraceSpan span("stage copy+stats", "copy", "gradients", count * es);
    for (const Part& part : parts) {
      Counted c{part.to, part.n, {}};
      c.chunks.resize(StatsChunks(part.n));
      auto chunk = [&](size_t i) {
        uint64_t a = i * kStatsChunk;
        c.chunks[i] = CopyGradStats(part.to + a * es, part.from + a * es,
                                    dtype_, StatsChunkSize(part.n, i));
      };
      if (runner_ != nullptr) {
        runner_->ParallelFor(c.chunks.size(), chunk);
      } else {
        for (size_t i = 0; i < c.chunks.size(); ++i) chunk(i);
      }
      counted.push_back(std::move(c));
    }
  }
  // Summed in the order slices came, by FinishStats.
  MutexLock l(&mu_);
  for (Counted& c : counted) pending_stats_.push_back(std::move(c));
  return absl::OkStatus();
}

absl::Status GradStage::CheckComplete() const {
  MutexLock l(&mu_);
  for (const Subgroup& s : subgroups_) {
    uint64_t at = 0;
    for (auto& [a, b] : staged_[s.index]) {
      if (a > at) break;
      at = std::max(at, b);
    }
    if (at < s.numel)
      return absl::FailedPreconditionError(absl::StrCat(
          "gradient missing for subgroup ", s.index, " (group ", s.group,
          ", elements [", s.group_offset + at, ", ",
          s.group_offset + s.numel, ") of the group)"));
  }
  return absl::OkStatus();
}

absl::Status GradStage::Borrow(int group, uint64_t offset, const void* data,
                               DType dtype, uint64_t count) {
  MLPO_RETURN_IF_ERROR(Claim(group, offset, dtype, count));
  if (count == 0) return absl::OkStatus();
  const char* src = static_cast<const char*>(data);
  size_t es = DTypeSize(dtype);
  MutexLock l(&mu_);
  for (const SubgroupSlice& o : Overlaps(group, offset, count)) {
    uint64_t base = subgroups_[o.index].group_offset;
    borrowed_[o.index][o.a] = {o.b, src + (base + o.a - offset) * es};
  }
  pending_stats_.push_back({src, count, {}});
  return absl::OkStatus();
}

void GradStage::FinishStats(ParallelRunner* runner) {
  std::vector<Counted> pending;
  {
    MutexLock l(&mu_);
    pending.swap(pending_stats_);
  }
  if (pending.empty()) return;
  TraceSpan span("grad stats", "stats", "gradients");
  // The chunks not counted yet, over the pool.
  struct Piece {
    const char* p;
    uint64_t n;
    GradStats* out;
  };
  std::vector<Piece> pieces;
  size_t es = DTypeSize(dtype_);
  for (Counted& c : pending) {
    if (!c.chunks.empty()) continue;
    c.chunks.resize(StatsChunks(c.n));
    for (size_t i = 0; i < c.chunks.size(); ++i)
      pieces.push_back({c.p + i * kStatsChunk * es, StatsChunkSize(c.n, i),
                        &c.chunks[i]});
  }
  runner->ParallelFor(pieces.size(), [&](size_t i) {
    *pieces[i].out = ComputeGradStats(pieces[i].p, dtype_, pieces[i].n);
  });
  // Summed in the order the slices came, chunk by chunk.
  MutexLock l(&mu_);
  for (const Counted& c : pending)
    for (const GradStats& g : c.chunks) {
      totals_.sum_sq += g.sum_sq;
      totals_.nonfinite += g.nonfinite;
    }
}

const void* GradStage::Span(int subgroup, uint64_t offset,
                            uint64_t* avail) const {
  const Subgroup& s = subgroups_[subgroup];
  const auto& b = borrowed_[subgroup];
  auto it = b.upper_bound(offset);
  if (it != b.begin()) {
    auto prev = std::prev(it);
    if (offset < prev->second.end) {
      *avail = prev->second.end - offset;
      return prev->second.data + (offset - prev->first) * DTypeSize(dtype_);
    }
  }
  *avail = (it == b.end() ? s.numel : it->first) - offset;
  if (bufs_[subgroup].size() == 0) return nullptr;  // nothing staged there
  return bufs_[subgroup].data() + offset * DTypeSize(dtype_);
}

uint64_t GradStage::StagedCount(int group, uint64_t offset,
                                uint64_t count) const {
  if (group < 0 || group >= static_cast<int>(by_group_.size())) return 0;
  MutexLock l(&mu_);
  uint64_t n = 0;
  for (const SubgroupSlice& o : Overlaps(group, offset, count))
    for (auto& [a, b] : staged_[o.index]) {
      uint64_t x = std::max(a, o.a), y = std::min(b, o.b);
      if (x < y) n += y - x;
    }
  return n;
}

GradStats GradStage::Totals() const {
  MutexLock l(&mu_);
  return totals_;
}

void GradStage::Reset() {
  MutexLock l(&mu_);
  for (auto& m : staged_) m.clear();
  for (auto& m : borrowed_) m.clear();
  pending_stats_.clear();
  totals_ = GradStats();
}

}  // namespace mlpo
