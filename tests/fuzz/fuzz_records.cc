// libFuzzer: the index's record decoders (object layouts, version records,
// names). Anything decodes to an error or to a record that encodes back to
// something that decodes to the same record.
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "store/meta/layout.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  absl::string_view in(reinterpret_cast<const char*>(data), size);
  auto layout = mlpo::ObjectLayout::Decode(in);
  if (layout.ok()) {
    auto again = mlpo::ObjectLayout::Decode(layout->Encode());
    if (!again.ok() || !(*again == *layout)) std::abort();
    if (layout->total_bytes() % 4096) std::abort();
  }
  auto rec = mlpo::VersionRecord::Decode(in);
  if (rec.ok()) {
    auto again = mlpo::VersionRecord::Decode(rec->Encode());
    if (!again.ok() || again->version != rec->version ||
        again->blob_bytes != rec->blob_bytes ||
        again->extents.size() != rec->extents.size() ||
        again->replica.size() != rec->replica.size())
      std::abort();
  }
  (void)mlpo::ValidateName("object", in);
  return 0;
}
