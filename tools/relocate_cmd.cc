// `mlpo relocate DIR`: a moved or copied store becomes a store at its new
// place (store/admin/relocate.h). The new roots are worked out from DIR (one
// of the store's directories at the new place) by replacing the prefix the
// old roots share; --root and --meta-dir say it where that guess fails.
// DIR may be a path root holding one store, or with --all several (each
// relocated from its own directory). Also `mlpo unshare STORE [--all]`
// (store/admin/unshare.h), which relocate runs on a hard-linked copy.
#include <algorithm>
#include <chrono>
#include <filesystem>
#include <functional>
#include <iostream>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "nlohmann/json.hpp"
#include "store/admin/relocate.h"
#include "store/admin/unshare.h"
#include "store/object_store.h"
#include "store/store_target.h"
#include "tools/commands.h"
#include "tools/cli_util.h"
#include "tools/ownership.h"
#include "tools/store_cmd_util.h"

namespace mlpo {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

struct RelocateArgs {
  std::string dir, meta_dir;
  std::vector<std::string> roots;  // "I=PATH"
  bool copy = false, move = false, json = false, all = false;
};

std::string Norm(const fs::path& p) {
  return fs::absolute(p).lexically_normal().string();
}

// `path` with its leading `from` replaced by `to`, or "" when `path` is not
// under `from`.
std::string Rebase(const std::string& path, const fs::path& from,
                   const fs::path& to) {
  fs::path rel = fs::path(path).lexically_relative(from);
  if (rel.empty() || *rel.begin() == "..") return "";
  return Norm(rel == "." ? to : to / rel);
}

// The root a store directory <root>/<ns> lies in.
fs::path RootOf(const std::string& dir, const std::string& ns) {
  fs::path root = fs::path(Norm(dir));
  for (const auto& part : fs::path(ns)) {
    (void)part;
    root = root.parent_path();  // one level per component of <ns>
  }
  return root;
}

// The old roots and index as they would be under the directory DIR lies
// in: DIR is <new root k>/<ns> for a path k whose old root, rebased, is
// DIR's root; every other old root and the index move by the same prefix,
// except those `fixed` names (--root: a non-empty entry per path) and the
// index when `fixed_meta` does (--meta-dir).
bool Infer(const StoreOptions& old, const std::string& dir,
           const std::vector<std::string>& fixed,
           const std::string& fixed_meta, std::vector<std::string>* roots,
           std::string* meta) {
  std::string ns = StoreNamespace(old);
  fs::path new_root = RootOf(dir, ns);
  // DIR is on the path --root names with its root, if one does; else on a
  // path --root does not name.
  int named = -1;
  for (size_t j = 0; j < fixed.size(); ++j)
    if (!fixed[j].empty() && Norm(fixed[j]) == Norm(new_root))
      named = static_cast<int>(j);
  for (size_t k = 0; k < old.paths.size(); ++k) {
    if (named >= 0 ? static_cast<int>(k) != named : !fixed[k].empty())
      continue;
    // Old root k = P/rel and new root k = P'/rel: find the longest common
    // tail, whose heads are the old and new prefixes.
    fs::path a = fs::path(Norm(old.paths[k].path.root)), b = new_root;
    while (!a.filename().empty() && a.filename() == b.filename() &&
           a.has_parent_path() && b.has_parent_path() &&
           a.parent_path() != a && b.parent_path() != b) {
      a = a.parent_path();
      b = b.parent_path();
    }
    std::vector<std::string> r;
    bool ok = true;
    for (size_t j = 0; j < old.paths.size(); ++j) {
      std::string moved = !fixed[j].empty()
                              ? fixed[j]
                              : Rebase(Norm(old.paths[j].path.root), a, b);
      std::error_code ec;
      if (moved.empty() ||
          !fs::exists(fs::path(moved) / ns / "STORE", ec)) {
        ok = false;
        break;
      }
      r.push_back(moved);
    }
    std::string m =
        !fixed_meta.empty() ? fixed_meta : Rebase(Norm(old.meta_dir), a, b);
    std::error_code ec;
    if (ok && !m.empty() && fs::exists(fs::path(m) / "CURRENT", ec)) {
      *roots = r;
      *meta = m;
      return true;
    }
  }
  return false;
}

// Progress lines (at most two a second) while shared files are copied.
UnshareProgress UnshareProgressLines() {
  auto last = std::make_shared<std::chrono::steady_clock::time_point>();
  return [last](const std::string& file, size_t i, size_t n, uint64_t done,
                uint64_t total) {
    auto now = std::chrono::steady_clock::now();
    if (done < total && now - *last < std::chrono::milliseconds(500)) return;
    *last = now;
    Progress(absl::StrFormat("unshare: %s (%d of %d files), %s of %s",
                             file, i + 1, n, FormatBytes(double(done)),
                             FormatBytes(double(total))));
  };
}

// Why one store was not relocated, and the exit code that says so.
struct RelocateError {
  absl::Status status;
  int code = 1;
};

[[noreturn]] void Refuse(const absl::Status& s, int code = 1) {
  throw RelocateError{s, code};
}

// Runs `one` on the store `dir` names (a store directory, or a path root
// holding only it) or, with `all`, on each store of the root `dir`, going
// on past one that fails (named on stderr and in the JSON under `key`,
// with "error"). Prints the JSON (one report, or {"stores": [...]}) when
// `as_json`; fails the command `cmd` with the error's code.
void ForEachStore(const std::string& cmd, const std::string& dir, bool all,
                  bool as_json, const char* key,
                  const std::function<json(const std::string&)>& one) {
  std::vector<std::string> dirs = FindStoreDirs(dir);
  if (!all) {
    if (dirs.size() > 1)
      Fail(cmd, absl::InvalidArgumentError(absl::StrCat(
                    dir, " holds ", dirs.size(), " stores (",
                    absl::StrJoin(dirs, ", "), "); pass --all to ", cmd,
                    " every one, or the one meant")));
    try {
      json out = one(dirs.size() == 1 ? dirs[0] : dir);
      if (as_json) std::cout << out.dump(2) << "\n";
    } catch (const RelocateError& e) {
      Fail(cmd, e.status, e.code);
    }
    return;
  }
  if (dirs.empty()) Fail(cmd, ResolveStoreDir(dir).status());
  json each = json::array();
  int rc = 0;
  for (const std::string& d : dirs) {
    try {
      each.push_back(one(d));
    } catch (const RelocateError& e) {
      rc = std::max(rc, e.code);
      std::string msg(e.status.message());
      std::cerr << "mlpo " << cmd << ": " << d << ": " << msg << "\n";
      each.push_back({{key, d}, {"error", msg}});
    }
  }
  if (as_json) std::cout << json{{"stores", each}}.dump(2) << "\n";
  if (rc != 0) throw CLI::RuntimeError(rc);
}

// Relocates the store at `dir` (a store directory at its new place); the
// report, also printed unless --json. Throws RelocateError.
json RelocateOne(const RelocateArgs& a, const std::string& dir) {
  auto old = StoreOptionsForTarget(dir, /*any_location=*/true);
  if (!old.ok()) Refuse(old.status());
  std::vector<std::string> fixed(old->paths.size());
  for (const std::string& r : a.roots) {
    size_t eq = r.find('=');
    int i = -1;
    try {
      i = std::stoi(r.substr(0, eq));
    } catch (...) {
    }
    if (eq == std::string::npos || i < 0 ||
        i >= static_cast<int>(fixed.size()))
      Refuse(absl::InvalidArgumentError(
                 absl::StrCat("--root ", r, ": expected I=PATH with I in 0..",
                              fixed.size() - 1)),
             2);
    fixed[i] = Norm(r.substr(eq + 1));
  }
  const std::string fixed_meta = a.meta_dir.empty() ? "" : Norm(a.meta_dir);
  std::vector<std::string> roots;
  std::string meta;
  bool guessed = Infer(*old, dir, fixed, fixed_meta, &roots, &meta);
  if (!guessed) {
    // What --root and --meta-dir name; a path neither names stays where
    // its record says (a store moved in part).
    roots.clear();
    for (size_t i = 0; i < fixed.size(); ++i)
      roots.push_back(fixed[i].empty() ? old->paths[i].path.root : fixed[i]);
    meta = fixed_meta.empty() ? old->meta_dir : fixed_meta;
    // The index lived under a path that --root moves: it moved with it
    // (the default layout keeps it in path 0's directory). Left at its
    // recorded place, a copy's relocate took the original's index and
    // lock.
    for (size_t i = 0; fixed_meta.empty() && i < fixed.size(); ++i) {
      if (fixed[i].empty()) continue;
      std::string moved = Rebase(Norm(old->meta_dir),
                                 Norm(old->paths[i].path.root), fixed[i]);
      if (!moved.empty()) meta = moved;
    }
  }
  if (!guessed && a.roots.empty())
    Refuse(absl::InvalidArgumentError(absl::StrCat(
               "cannot tell where the store's other directories and index "
               "are from ", dir, " (recorded roots: ",
               absl::StrJoin(roots, ", "), "; index ", old->meta_dir,
               "); name them with --root I=PATH and --meta-dir")),
           2);
  // DIR is the store's directory on one of the new roots.
  const std::string ns = StoreNamespace(*old);
  bool dir_named = false;
  for (const std::string& r : roots)
    dir_named = dir_named || SameDirectory(dir, absl::StrCat(r, "/", ns));
  if (!dir_named)
    Refuse(absl::InvalidArgumentError(absl::StrCat(
               dir, " is not the store's directory on any of the roots it "
               "would be relocated to (", absl::StrJoin(roots, ", "),
               "; index ", meta, "): name its path too with --root I=",
               RootOf(dir, ns).string())),
           2);
  // Pointed at the store where its records already say it lives.
  bool unmoved = SameDirectory(meta, old->meta_dir);
  for (size_t i = 0; i < roots.size(); ++i)
    unmoved = unmoved && SameDirectory(roots[i], old->paths[i].path.root);
  if (unmoved)
    Refuse(absl::FailedPreconditionError(absl::StrCat(
        "nothing was moved or copied: the store's records already name ",
        absl::StrJoin(roots, ", "), " (index ", meta,
        "); relocate is for a store at a new place")));
  // A copy when the original is still at its recorded place: a recorded
  // directory, other than the one that path has now, still holding this
  // store (a path left where it was is not the original).
  bool original_there = false;
  for (size_t i = 0; i < old->paths.size(); ++i) {
    std::string d = absl::StrCat(old->paths[i].path.root, "/", ns);
    auto there = StoreOptionsForTarget(d);
    if (there.ok() && there->store_uuid == old->store_uuid &&
        !SameDirectory(d, absl::StrCat(roots[i], "/", ns)))
      original_there = true;
  }
  bool copy = a.copy || (!a.move && original_there);
  if (copy && SameDirectory(meta, old->meta_dir))
    Refuse(absl::FailedPreconditionError(absl::StrCat(
        "the index named for the copy, ", meta, ", is the original's (the "
        "store still lives at its recorded place): a copy needs an index of "
        "its own. Nothing was changed; copy the index too and name it with "
        "--meta-dir")));
  StoreOptions o = *old;
  for (size_t i = 0; i < roots.size(); ++i) o.paths[i].path.root = roots[i];
  o.meta_dir = meta;
  WillWrite(o);  // run as root: the owner keeps the files
  auto rep = Relocate(o, copy, UnshareProgressLines());
  Progress("");
  if (!rep.ok()) Refuse(rep.status());
  json out{{"dir", dir},
           {"copy", copy},
           {"old_uuid", rep->old_uuid},
           {"new_uuid", rep->new_uuid},
           {"old_roots", rep->old_roots},
           {"new_roots", rep->new_roots},
           {"new_meta_dir", rep->new_meta_dir},
           {"unshared_files", rep->unshared_files},
           {"unshared_bytes", rep->unshared_bytes}};
  if (a.json) return out;
  if (!rep->unshared_files.empty())
    std::printf("relocate: %zu file(s) were shared with the original "
                "through hard links (a `cp -al` copy); each has an inode of "
                "its own now (%s copied)\n",
                rep->unshared_files.size(),
                FormatBytes(double(rep->unshared_bytes)).c_str());
  std::printf("relocate: store %s is now at %s (index %s)%s\n",
              old->name.c_str(), absl::StrJoin(rep->new_roots, ", ").c_str(),
              rep->new_meta_dir.c_str(),
              copy ? absl::StrCat("; a copy: new identity ", rep->new_uuid,
                                  " (the original keeps ", rep->old_uuid,
                                  ")")
                         .c_str()
                   : "; moved: identity kept");
  return out;
}

}  // namespace

void AddUnshareCommand(CLI::App& app) {
  struct Args {
    std::string store;
    bool json = false, all = false;
  };
  auto a = std::make_shared<Args>();
  auto* c = app.add_subcommand(
      "unshare",
      "Give a store files of its own where it shares them with another "
      "directory through hard links (a copy made with `cp -al`, `cp -l` or "
      "`rsync --link-dest`). The store writes its segments and index seal "
      "in place, so while they are shared a writable open is refused: every "
      "write would change the other copy too. Copies each shared file to a "
      "private one that replaces it (the other directory keeps the old "
      "one); needs that much free space; safe to interrupt and run again. "
      "`mlpo relocate` does this for a copy by itself");
  c->add_option("store", a->store,
                "The store: a TOML config or one of its directories "
                "(<root>/<store>/rank-<r>), or a path root holding only it")
      ->required();
  c->add_flag("--json", a->json,
              "Print one JSON object on stdout: store, files, bytes (with "
              "--all: {\"stores\": [...]}, {\"store\", \"error\"} for one "
              "that failed)");
  c->add_flag("--all", a->all,
              "STORE is a path root holding several stores (the adapter's "
              "store= with several namespaces): unshare each; one that "
              "fails is named and the others go on");
  c->callback([a] {
    // One store: its report, printed unless --json; throws RelocateError.
    auto one = [&](const std::string& target) {
      auto o = StoreOptionsForTarget(target);
      if (!o.ok()) Refuse(o.status());
      WillWrite(*o);
      auto rep = Unshare(*o, UnshareProgressLines());
      Progress("");
      if (!rep.ok()) Refuse(rep.status());
      json out{{"store", target}, {"files", rep->files},
               {"bytes", rep->bytes}};
      if (a->json) return out;
      if (rep->files.empty())
        std::printf("unshare: %s shares no file with another directory; "
                    "nothing to do\n",
                    target.c_str());
      else
        std::printf("unshare: %zu file(s) of %s have an inode of their own "
                    "now (%s copied); the other directory keeps the old "
                    "ones\n",
                    rep->files.size(), target.c_str(),
                    FormatBytes(double(rep->bytes)).c_str());
      return out;
    };
    ForEachStore("unshare", a->store, a->all, a->json, "store", one);
  });
}

void AddRelocateCommand(CLI::App& app) {
  auto a = std::make_shared<RelocateArgs>();
  auto* c = app.add_subcommand(
      "relocate",
      "Make a moved or copied store a store at its new place: the index and "
      "the STORE descriptors record absolute roots, so a store opened after "
      "`mv` or `cp -a` is refused until they name the new place. A copy "
      "(the original is still where it was) gets an identity of its own, "
      "so the two never act on each other");
  c->add_option("dir", a->dir,
                "One of the store's directories at its new place "
                "(<root>/<store>/rank-<r>)")
      ->required();
  c->add_option("--root", a->roots,
                "I=PATH: path I's new root, where the guess from DIR is "
                "wrong (repeatable)");
  c->add_option("--meta-dir", a->meta_dir,
                "The index's new place (default: guessed like the roots)");
  auto* cp = c->add_flag("--copy", a->copy,
                         "Treat it as a copy: a new identity (default when "
                         "the original is still at its recorded roots)");
  c->add_flag("--move", a->move,
              "Treat it as a move: keep the identity (default when the "
              "original is gone)")
      ->excludes(cp);
  c->add_flag("--json", a->json, "Print one JSON object on stdout");
  c->add_flag("--all", a->all,
              "DIR is a copied or moved path root holding several stores "
              "(the adapter's store= with several namespaces): relocate "
              "each, from its own directory");
  c->callback([a] {
    if (a->all && (!a->roots.empty() || !a->meta_dir.empty()))
      Fail("relocate",
           absl::InvalidArgumentError(
               "--all works out each store's roots and index from its own "
               "directory: relocate one store at a time to give --root or "
               "--meta-dir"),
           2);
    ForEachStore("relocate", a->dir, a->all, a->json, "dir",
                 [&](const std::string& d) { return RelocateOne(*a, d); });
  });
}

}  // namespace mlpo
