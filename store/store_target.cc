#include "store/store_target.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include <algorithm>
#include <iterator>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "store/fs/file_util.h"

namespace mlpo {
namespace fs = std::filesystem;

bool SameDirectory(const std::string& a, const std::string& b) {
  struct stat x, y;
  if (::stat(a.c_str(), &x) != 0 || ::stat(b.c_str(), &y) != 0) return false;
  return S_ISDIR(x.st_mode) && x.st_dev == y.st_dev && x.st_ino == y.st_ino;
}

std::vector<std::string> FindStoreDirs(const std::string& dir) {
  std::error_code ec;
  if (fs::exists(dir + "/STORE", ec)) return {dir};
  // rank-<r> directories holding STORE, at DIR/rank-<r> (DIR is a store's
  // name directory) or DIR/<store>/rank-<r> (DIR is a path root).
  auto ranks_in = [](const fs::path& d, std::vector<std::string>* out) {
    std::error_code e;
    for (fs::directory_iterator it(d, e), end; !e && it != end;
         it.increment(e)) {
      const std::string name = it->path().filename().string();
      std::error_code e2;
      if (name.rfind("rank-", 0) == 0 && it->is_directory(e2) &&
          fs::exists(it->path() / "STORE", e2))
        out->push_back(it->path().string());
    }
  };
  std::vector<std::string> found;
  ranks_in(dir, &found);
  if (found.empty()) {
    for (fs::directory_iterator it(dir, ec), end; !ec && it != end;
         it.increment(ec)) {
      std::error_code e2;
      if (it->is_directory(e2) && !it->is_symlink(e2))
        ranks_in(it->path(), &found);
    }
  }
  std::sort(found.begin(), found.end());
  return found;
}

std::string ParentOfStoreDir(const std::string& dir) {
  std::error_code ec;
  fs::path p = fs::absolute(dir, ec).lexically_normal();
  if (!p.has_filename()) p = p.parent_path();
  return p.parent_path().string();
}

std::string RanksOfOneStore(const std::vector<std::string>& dirs) {
  if (dirs.size() < 2) return "";
  const std::string parent = ParentOfStoreDir(dirs[0]);
  for (const std::string& d : dirs)
    if (ParentOfStoreDir(d) != parent) return "";
  return parent;
}

std::vector<std::string> RanksOfStoreAt(const std::string& target) {
  std::error_code ec;
  if (!fs::is_directory(target, ec)) return {};
  std::vector<std::string> dirs = FindStoreDirs(target);
  if (RanksOfOneStore(dirs).empty()) return {};
  return dirs;
}

// PermissionDenied naming the first directory on the way to `p` (or `p`
// itself) this user may not enter, and its owner; OK when there is none.
// A store's directories are 0700: another user saw "not a store directory"
// or "no such store".
absl::Status PermissionProblem(const std::string& p) {
  std::error_code ec;
  fs::path path = fs::absolute(p, ec).lexically_normal();
  fs::path at;
  for (auto part = path.begin(); part != path.end(); ++part) {
    at /= *part;
    if (::access(at.c_str(), F_OK) != 0 && errno != EACCES) break;
    bool dir = fs::is_directory(at, ec) || ec.value() == EACCES;
    // On the way only entering counts (a home of mode 0711 is fine); the
    // target itself must be readable too.
    bool last = std::next(part) == path.end();
    int need = !dir ? R_OK : last ? R_OK | X_OK : X_OK;
    if (::access(at.c_str(), need) == 0) continue;
    if (errno != EACCES) break;
    struct stat st;
    std::string owner = ::stat(at.c_str(), &st) == 0
                            ? absl::StrCat(" (owner uid ", st.st_uid, ", mode ",
                                           absl::StrFormat("%04o", st.st_mode & 07777), ")")
                            : "";
    return absl::PermissionDeniedError(absl::StrCat(
        "permission denied: ", at.string(), owner, " cannot be ",
        need == X_OK ? "entered" : "read", " by uid ",
        ::getuid(), ". A store's directories and files are its owner's "
        "alone (0700/0600): run the command as the user who owns the store"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> ResolveStoreDir(const std::string& dir) {
  MLPO_RETURN_IF_ERROR(PermissionProblem(dir));
  std::vector<std::string> found = FindStoreDirs(dir);
  if (found.size() == 1) return found[0];
  if (found.empty()) {
    // A store below that this user may not enter (0700, another owner).
    std::error_code ec;
    for (fs::directory_iterator it(dir, ec), end; !ec && it != end;
         it.increment(ec)) {
      std::error_code e2;
      if (!it->is_directory(e2) || it->is_symlink(e2)) continue;
      MLPO_RETURN_IF_ERROR(PermissionProblem(it->path().string()));
      for (fs::directory_iterator in(it->path(), e2), e; !e2 && in != e;
           in.increment(e2)) {
        std::error_code e3;
        if (in->is_directory(e3))
          MLPO_RETURN_IF_ERROR(PermissionProblem(in->path().string()));
      }
    }
  }
  if (found.empty())
    return absl::NotFoundError(absl::StrCat(
        dir, " is not a store directory (no STORE file) and holds none; "
             "pass the store's TOML config, <path>/<store>/rank-<r>, or a "
             "path root that holds one store"));
  const std::string ranks_of = RanksOfOneStore(found);
  if (!ranks_of.empty())
    return absl::InvalidArgumentError(absl::StrCat(
        dir, " holds the ", found.size(), " ranks of store ", ranks_of, " (",
        absl::StrJoin(found, ", "),
        "), each a store of its own here: pass one rank's directory (`mlpo "
        "tag`, `restore` and `drop-tag` take ",
        ranks_of, " and act on every rank; `mlpo export` reads every rank "
        "from it)"));
  return absl::InvalidArgumentError(absl::StrCat(
      dir, " holds ", found.size(), " stores (", absl::StrJoin(found, ", "),
      "); pass the one meant"));
}

absl::StatusOr<StoreOptions> StoreOptionsForTarget(const std::string& given,
                                                   bool any_location) {
  std::error_code ec;
  if (fs::is_directory(given, ec)) {
    MLPO_ASSIGN_OR_RETURN(const std::string target, ResolveStoreDir(given));
    std::string f = target + "/STORE";
    auto text = ReadSmallFile(f, kMaxConfigBytes);
    if (!text.ok()) return text.status();
    auto o = StoreOptionsFromDescriptor(*text);
    if (!o.ok()) return Annotate(o.status(), f);
    if (any_location) return o;
    std::string roots;
    for (auto& pc : o->paths) {
      if (SameDirectory(target,
                        absl::StrCat(pc.path.root, "/", StoreNamespace(*o))))
        return o;
      absl::StrAppend(&roots, roots.empty() ? "" : ", ", pc.path.root);
    }
    return absl::FailedPreconditionError(absl::StrCat(
        target, " is not where its store lives: its descriptor ", f,
        " records the absolute roots ", roots, " (index ", o->meta_dir,
        "), and this directory is under none of them. It is a copy or a "
        "moved store; nothing was opened (acting on it would change the "
        "store at those roots). `mlpo relocate ", target,
        "` makes it a store at its own place (a copy gets an identity of "
        "its own)"));
  }
  if (!fs::exists(given, ec)) {
    MLPO_RETURN_IF_ERROR(PermissionProblem(given));
    return absl::NotFoundError(absl::StrCat("no such store or config: ", given));
  }
  auto o = LoadStoreOptions(given);
  if (o.ok()) o->create_if_missing = false;
  return o;
}

}  // namespace mlpo
