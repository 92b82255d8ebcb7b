#include "tools/output_path.h"

#include <filesystem>
#include <system_error>

#include "absl/strings/str_cat.h"

namespace mlpo {
namespace fs = std::filesystem;

namespace {

// What makes `dir` part of a store, or "" when nothing does.
std::string StoreMarker(const fs::path& dir) {
  std::error_code ec;
  for (const char* f : {"STORE", "MLPO-SEAL", "MLPO-LOCK"})
    if (fs::exists(dir / f, ec)) return f;
  std::string name = dir.filename().string();
  if (name == ".mlpo") return "a path's .mlpo directory";
  if (name.rfind("meta-backup", 0) == 0) return "an index backup";
  return "";
}

}  // namespace

absl::Status CheckOutputPath(const std::string& out, bool force) {
  if (out.empty())
    return absl::InvalidArgumentError("the output path is empty");
  std::error_code ec;
  fs::path p = fs::absolute(out, ec).lexically_normal();
  if (ec) return absl::InvalidArgumentError(absl::StrCat("bad output path ", out));
  if (fs::is_directory(p, ec))
    return absl::InvalidArgumentError(
        absl::StrCat("output ", out, " is a directory; name a file"));
  // Links resolved: a link into a store directory is inside it too.
  fs::path dir = fs::weakly_canonical(p.parent_path(), ec);
  if (ec) dir = p.parent_path();
  for (fs::path d = dir; !d.empty(); d = d.parent_path()) {
    std::string marker = StoreMarker(d);
    if (!marker.empty())
      return absl::InvalidArgumentError(absl::StrCat(
          "output ", out, " is inside the store directory ", d.string(),
          " (it holds ", marker, "): a file written there could replace the "
          "store's own state. Write it elsewhere"));
    if (d == d.parent_path()) break;
  }
  if (!force && fs::symlink_status(p, ec).type() != fs::file_type::not_found &&
      !ec)
    return absl::AlreadyExistsError(absl::StrCat(
        "output ", out, " exists; pass --force to replace it"));
  return absl::OkStatus();
}

}  // namespace mlpo
