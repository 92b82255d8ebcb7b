#include "tools/ownership.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"

namespace mlpo {

namespace {

struct Noted {
  std::string dir;
  uid_t uid;
  gid_t gid;
};

std::vector<Noted>& NotedDirs() {
  static std::vector<Noted> noted;
  return noted;
}

void GiveToOwner(const std::string& path, const Noted& n) {
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0 || st.st_uid != 0) return;  // ours only
  if (::lchown(path.c_str(), n.uid, n.gid) != 0)
    std::fprintf(stderr, "mlpo: could not give %s to its store's owner (uid "
                 "%u): %s\n", path.c_str(), static_cast<unsigned>(n.uid),
                 std::strerror(errno));
}

}  // namespace

void WillWrite(const StoreOptions& o) {
  if (::geteuid() != 0 || o.paths.empty()) return;
  struct stat st;
  if (::stat(o.paths[0].path.root.c_str(), &st) != 0 || st.st_uid == 0)
    return;  // root's own store (or none yet: the open says why)
  std::vector<std::string> dirs = {
      o.meta_dir.empty() ? DefaultMetaDir(o) : o.meta_dir};
  for (const auto& pc : o.paths) {
    dirs.push_back(absl::StrCat(pc.path.root, "/", StoreNamespace(o)));
    dirs.push_back(absl::StrCat(pc.path.root, "/.mlpo"));
  }
  for (auto& d : dirs) NotedDirs().push_back({d, st.st_uid, st.st_gid});
}

void GiveFilesToOwners() {
  namespace fs = std::filesystem;
  for (const Noted& n : NotedDirs()) {
    std::error_code ec;
    if (!fs::exists(n.dir, ec)) continue;
    GiveToOwner(n.dir, n);
    for (auto it = fs::recursive_directory_iterator(
             n.dir, fs::directory_options::skip_permission_denied, ec);
         !ec && it != fs::recursive_directory_iterator(); it.increment(ec))
      GiveToOwner(it->path().string(), n);
  }
  NotedDirs().clear();
}

}  // namespace mlpo
