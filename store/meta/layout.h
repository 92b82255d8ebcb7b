// Object layouts and version records: the values of the metadata index.
//
// An object is one blob of typed sections (p, m, v, ...), each starting on a
// 4 KiB boundary. A version record lists the extents that hold one version's
// blob: which path, where, how long, where in the blob, and its xxh3-64.
// Encodings are little-endian, length-prefixed, and versioned by the store's
// format number.
#ifndef MLPO_STORE_META_LAYOUT_H_
#define MLPO_STORE_META_LAYOUT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "store/checksum/checksum.h"
#include "base/dtype.h"

namespace mlpo {

struct SectionSpec {
  std::string name;
  DType dtype = DType::kF32;
  uint64_t count = 0;  // elements
  bool operator==(const SectionSpec&) const = default;
};

struct Section {
  SectionSpec spec;
  uint64_t offset = 0;  // in the blob, 4 KiB aligned
  uint64_t bytes = 0;   // count * dtype size
};

class ObjectLayout {
 public:
  ObjectLayout() = default;
  // InvalidArgument for no sections, empty or duplicate names.
  static absl::StatusOr<ObjectLayout> Make(std::vector<SectionSpec> specs);
  static absl::StatusOr<ObjectLayout> Decode(absl::string_view in);
  std::string Encode() const;

  const std::vector<Section>& sections() const { return sections_; }
  const Section* Find(absl::string_view name) const;
  uint64_t total_bytes() const { return total_; }  // multiple of 4 KiB
  bool operator==(const ObjectLayout& o) const;
  std::string DebugString() const;

 private:
  std::vector<Section> sections_;
  uint64_t total_ = 0;
};

struct ExtentRef {
  uint32_t path = 0;         // path id in the store
  uint64_t offset = 0;       // linear offset on the path (segment*size+off)
  uint64_t length = 0;
  uint64_t blob_offset = 0;  // where these bytes sit in the object's blob
  uint64_t checksum = 0;     // xxh3-64 of the bytes
};

struct VersionRecord {
  // The store-wide commit sequence number: the record's key, never reused,
  // so a commit after a restore starts a new lineage beside the old one.
  uint64_t version = 0;
  // The optimizer step (the caller's number) that produced the contents.
  // Records written before the sequence existed have step == version.
  uint64_t step = 0;
  uint64_t blob_bytes = 0;
  std::vector<ExtentRef> extents;
  // A second whole copy of the blob (`mlpo tag --copy-to PATH`), read when
  // an extent of the first fails; empty for most versions. Also tiles the
  // blob. Records with a replica cannot be read by builds before it.
  std::vector<ExtentRef> replica;
  // Every extent the record holds space with: extents, then replica.
  std::vector<ExtentRef> AllExtents() const {
    std::vector<ExtentRef> all = extents;
    all.insert(all.end(), replica.begin(), replica.end());
    return all;
  }
  std::string Encode() const;
  static absl::StatusOr<VersionRecord> Decode(absl::string_view in);
};

// Object and tag names: 1..200 characters of [A-Za-z0-9._:-], not "." or
// "..", and no "/" (names never become file paths, but tools print them).
absl::Status ValidateName(absl::string_view kind, absl::string_view name);


}  // namespace mlpo

#endif  // MLPO_STORE_META_LAYOUT_H_
