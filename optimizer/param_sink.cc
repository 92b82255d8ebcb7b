#include "optimizer/param_sink.h"

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace mlpo {

absl::StatusOr<std::unique_ptr<DeviceParamSink>> DeviceParamSink::Create(
    DeviceBackend* backend, std::vector<void*> dest, DType dtype,
    uint64_t max_numel, int buffers) {
  if (backend == nullptr || buffers < 1 || max_numel == 0)
    return absl::InvalidArgumentError(
        "device parameter sink: a backend, a subgroup size and at least one "
        "buffer");
  for (size_t g = 0; g < dest.size(); ++g)
    if (dest[g] == nullptr)
      return absl::InvalidArgumentError(
          absl::StrCat("device parameter sink: no destination for group ", g));
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
  current_ = next_;
  next_ = (next_ + 1) % staging_.size();
  if (in_flight_[current_]) {
    // Its copy was started a full round ago; wait for it (stream order: all
    // copies before it are done too).
    (void)backend_->Synchronize(kParamStream);
    in_flight_.assign(in_flight_.size(), false);
  }
  return staging_[current_].data();
}

absl::Status DeviceParamSink::Publish(const Subgroup& s) {
  if (s.group < 0 || static_cast<size_t>(s.group) >= dest_.size())
    return absl::InvalidArgumentError(
        absl::StrCat("device parameter sink: no group ", s.group));
  size_t es = DTypeSize(dtype_);
  char* dst = static_cast<char*>(dest_[s.group]) + s.group_offset * es;
  MLPO_RETURN_IF_ERROR(Annotate(
      backend_->CopyToDevice(dst, staging_[current_].data(), s.numel * es,
                             kParamStream),
      absl::StrCat("parameters of ", s.object)));
  in_flight_[current_] = true;
  bytes_copied_ += s.numel * es;
  return absl::OkStatus();
}

absl::Status DeviceParamSink::Flush() {
  in_flight_.assign(in_flight_.size(), false);
  return backend_->Synchronize(kParamStream);
}

}  // namespace mlpo
