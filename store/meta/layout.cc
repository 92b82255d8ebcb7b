#include "store/meta/layout.h"

#include "base/status_macros.h"

#include <algorithm>
#include <cstring>
#include <utility>
#include <vector>
#include <set>

#include "absl/strings/str_cat.h"
#include "store/checksum/checksum.h"
#include "store/io/io_engine.h"

namespace mlpo {
namespace {

void PutU64(std::string* out, uint64_t v) {
  char b[8];
  std::memcpy(b, &v, 8);
  out->append(b, 8);
}
bool GetU64(absl::string_view* in, uint64_t* v) {
  if (in->size() < 8) return false;
  std::memcpy(v, in->data(), 8);
  in->remove_prefix(8);
  return true;
}
void PutStr(std::string* out, absl::string_view s) {
  PutU64(out, s.size());
  out->append(s.data(), s.size());
}
bool GetStr(absl::string_view* in, std::string* s) {
  uint64_t n;
  if (!GetU64(in, &n) || in->size() < n) return false;
  s->assign(in->data(), n);
  in->remove_prefix(n);
  return true;
}

// Every record ends with the xxh3-64 of what precedes it, so a damaged
// value is caught here, whatever the storage below did or did not check.
// Records written before the trailer existed (nothing after the fields)
// still read.
void SealRecord(std::string* out) {
  uint64_t c = Checksum(out->data(), out->size());
  PutU64(out, c);
}

absl::Status CheckTrailer(absl::string_view whole, absl::string_view rest,
                          const char* what) {
  if (rest.empty()) return absl::OkStatus();  // written before trailers
  uint64_t want = 0;
  if (rest.size() != 8 || !GetU64(&rest, &want))
    return absl::DataLossError(
        absl::StrCat("corrupt ", what, ": ", rest.size(), " trailing bytes"));
  absl::string_view body = whole.substr(0, whole.size() - 8);
  if (Checksum(body.data(), body.size()) != want)
    return absl::DataLossError(absl::StrCat("corrupt ", what,
                                            ": checksum mismatch"));
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateName(absl::string_view kind, absl::string_view name) {
  bool ok = !name.empty() && name.size() <= 200 && name != "." && name != "..";
  for (char c : name) {
    if (!(isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' ||
          c == '-' || c == ':'))
      ok = false;
  }
  if (name.find("..") != absl::string_view::npos) ok = false;
  if (ok) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "bad ", kind, " name '", name,
      "': use 1..200 characters of A-Z a-z 0-9 . _ : - (no '/' or '..')"));
}

absl::StatusOr<ObjectLayout> ObjectLayout::Make(std::vector<SectionSpec> specs) {
  if (specs.empty())
    return absl::InvalidArgumentError("object layout has no sections");
  ObjectLayout l;
  std::set<std::string> names;
  uint64_t off = 0;
  for (auto& s : specs) {
    if (s.name.empty() || !names.insert(s.name).second)
      return absl::InvalidArgumentError(absl::StrCat(
          "object layout: empty or duplicate section name '", s.name, "'"));
    Section sec;
    sec.spec = s;
    sec.offset = off;
    sec.bytes = s.count * DTypeSize(s.dtype);
    off += (sec.bytes + kIoAlignment - 1) / kIoAlignment * kIoAlignment;
    l.sections_.push_back(sec);
  }
  l.total_ = off;
  if (l.total_ == 0)
    return absl::InvalidArgumentError("object layout: all sections are empty");
  return l;
}

const Section* ObjectLayout::Find(absl::string_view name) const {
  for (auto& s : sections_)
    if (s.spec.name == name) return &s;
  return nullptr;
}

bool ObjectLayout::operator==(const ObjectLayout& o) const {
  if (sections_.size() != o.sections_.size()) return false;
  for (size_t i = 0; i < sections_.size(); ++i)
    if (!(sections_[i].spec == o.sections_[i].spec)) return false;
  return true;
}

std::string ObjectLayout::DebugString() const {
  std::string s;
  for (auto& sec : sections_)
    absl::StrAppend(&s, s.empty() ? "" : ", ", sec.spec.name, ":",
                    DTypeName(sec.spec.dtype), "[", sec.spec.count, "]");
  return s;
}

std::string ObjectLayout::Encode() const {
  std::string out;
  PutU64(&out, sections_.size());
  for (auto& s : sections_) {
    PutStr(&out, s.spec.name);
    PutU64(&out, static_cast<uint64_t>(s.spec.dtype));
    PutU64(&out, s.spec.count);
  }
  SealRecord(&out);
  return out;
}

absl::StatusOr<ObjectLayout> ObjectLayout::Decode(absl::string_view in) {
  const absl::string_view whole = in;
  uint64_t n;
  std::vector<SectionSpec> specs;
  if (!GetU64(&in, &n) || n > 1024)
    return absl::DataLossError("corrupt object layout record");
  for (uint64_t i = 0; i < n; ++i) {
    SectionSpec s;
    uint64_t dt;
    if (!GetStr(&in, &s.name) || !GetU64(&in, &dt) || !GetU64(&in, &s.count) ||
        dt > 3)
      return absl::DataLossError("corrupt object layout record");
    s.dtype = static_cast<DType>(dt);
    specs.push_back(std::move(s));
  }
  if (absl::Status t = CheckTrailer(whole, in, "object layout record");
      !t.ok())
    return t;
  return Make(std::move(specs));
}

namespace {

// Marks a replica list after the extents (before the trailer).
constexpr uint64_t kReplicaMarker = 0x52455045414c5231ull;  // "1RLAEPER"
// Marks the step when it differs from the version (records from before the
// store-wide sequence have none: their step is their version).
constexpr uint64_t kStepMarker = 0x5045545331ull;  // "1STEP"

void PutExtents(std::string* out, const std::vector<ExtentRef>& list) {
  PutU64(out, list.size());
  for (auto& e : list) {
    PutU64(out, e.path);
    PutU64(out, e.offset);
    PutU64(out, e.length);
    PutU64(out, e.blob_offset);
    PutU64(out, e.checksum);
  }
}

bool GetExtents(absl::string_view* in, std::vector<ExtentRef>* list) {
  uint64_t n;
  if (!GetU64(in, &n) || n > (uint64_t{1} << 24)) return false;
  for (uint64_t i = 0; i < n; ++i) {
    ExtentRef e;
    uint64_t p;
    if (!GetU64(in, &p) || !GetU64(in, &e.offset) || !GetU64(in, &e.length) ||
        !GetU64(in, &e.blob_offset) || !GetU64(in, &e.checksum) ||
        p > UINT32_MAX)
      return false;
    e.path = static_cast<uint32_t>(p);
    list->push_back(e);
  }
  return true;
}

// The extents tile the blob exactly: a damaged blob offset would otherwise
// put good bytes in the wrong place, unnoticed by the extents' own
// checksums.
absl::Status CheckTiling(const std::vector<ExtentRef>& list,
                         uint64_t blob_bytes, const char* which) {
  std::vector<std::pair<uint64_t, uint64_t>> spans;
  for (const ExtentRef& e : list) spans.emplace_back(e.blob_offset, e.length);
  std::sort(spans.begin(), spans.end());
  uint64_t at = 0;
  for (auto& [off, len] : spans) {
    if (off != at || len == 0 || off + len < off)
      return absl::DataLossError(absl::StrCat(
          "corrupt version record: ", which, " do not tile the ", blob_bytes,
          "-byte blob (at byte ", at, ")"));
    at = off + len;
  }
  if (!list.empty() && at != blob_bytes)
    return absl::DataLossError(absl::StrCat("corrupt version record: ", which,
                                            " cover ", at, " of ", blob_bytes,
                                            " bytes"));
  return absl::OkStatus();
}

}  // namespace

std::string VersionRecord::Encode() const {
  std::string out;
  PutU64(&out, version);
  PutU64(&out, blob_bytes);
  PutExtents(&out, extents);
  if (!replica.empty()) {
    PutU64(&out, kReplicaMarker);
    PutExtents(&out, replica);
  }
  if (step != version) {
    PutU64(&out, kStepMarker);
    PutU64(&out, step);
  }
  SealRecord(&out);
  return out;
}

absl::StatusOr<VersionRecord> VersionRecord::Decode(absl::string_view in) {
  const absl::string_view whole = in;
  VersionRecord r;
  if (!GetU64(&in, &r.version) || !GetU64(&in, &r.blob_bytes) ||
      !GetExtents(&in, &r.extents))
    return absl::DataLossError("corrupt version record");
  r.step = r.version;
  // More than a trailer left: a replica list, then a step, each optional.
  bool seen_replica = false, seen_step = false;
  while (in.size() > 8) {
    uint64_t marker;
    if (!GetU64(&in, &marker))
      return absl::DataLossError("corrupt version record");
    if (marker == kReplicaMarker && !seen_replica && !seen_step) {
      seen_replica = true;
      if (!GetExtents(&in, &r.replica) || r.replica.empty())
        return absl::DataLossError("corrupt version record (replica)");
    } else if (marker == kStepMarker && !seen_step) {
      seen_step = true;
      if (!GetU64(&in, &r.step) || r.step == r.version)
        return absl::DataLossError("corrupt version record (step)");
    } else {
      return absl::DataLossError("corrupt version record (unknown field)");
    }
  }
  if (absl::Status t = CheckTrailer(whole, in, "version record"); !t.ok())
    return t;
  MLPO_RETURN_IF_ERROR(CheckTiling(r.extents, r.blob_bytes, "extents"));
  MLPO_RETURN_IF_ERROR(CheckTiling(r.replica, r.blob_bytes, "replica extents"));
  return r;
}

}  // namespace mlpo
