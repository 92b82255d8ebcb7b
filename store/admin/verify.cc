#include "store/admin/verify.h"

#include <sys/stat.h>

#include <chrono>
#include <thread>

#include <algorithm>
#include <filesystem>
#include <map>
#include <set>
#include <tuple>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/aligned_buffer.h"
#include "base/status_macros.h"
#include "store/meta/meta_index.h"
#include "store/store_files.h"

namespace mlpo {

std::vector<BadExtent> CheckExtentMap(const StoreView& store) {
  const size_t np = store.num_paths();
  struct Placed {
    uint64_t offset, length;
    std::string object;
    uint64_t version;
  };
  std::vector<std::vector<Placed>> by_path(np);
  std::vector<BadExtent> bad;
  auto problem = [&](const std::string& obj, uint64_t v, const ExtentRef& e,
                     const std::string& what) {
    if (e.path < np) {
      bad.push_back(store.DescribeExtent(obj, v, e, "index: " + what,
                             absl::StatusCode::kDataLoss));
    } else {
      BadExtent b;
      b.object = obj;
      b.version = v;
      b.length = e.length;
      b.error = "index: " + what;
      bad.push_back(std::move(b));
    }
  };
  // Each segment file's size, once.
  std::map<std::string, uint64_t> sizes;
  auto size_of = [&](const std::string& f) -> uint64_t {
    auto it = sizes.find(f);
    if (it != sizes.end()) return it->second;
    auto st = store.fs()->Stat(f);
    return sizes[f] = st.ok() ? st->size : 0;
  };
  for (const RecordOf& r : store.AllVersions()) {
   const std::string& obj = r.object;
   const VersionRecord& rec = r.rec;
   uint64_t v = rec.version;
   for (const std::vector<ExtentRef>* list : {&rec.extents, &rec.replica}) {
    if (list->empty()) continue;
    uint64_t covered = 0;
    std::vector<std::pair<uint64_t, uint64_t>> blob;
    for (const ExtentRef& e : *list) {
      if (e.path >= np) {
        problem(obj, v, e, absl::StrCat("extent on unknown path ", e.path));
        continue;
      }
      const StoragePath* p = &store.path_at(e.path);
      const uint64_t seg = p->options().segment_bytes;
      if (e.length == 0 || e.offset % seg + e.length > seg) {
        problem(obj, v, e, "extent crosses a segment boundary or is empty");
        continue;
      }
      std::string file = p->SegmentFile(e.offset);
      uint64_t have = size_of(file);
      if (have < p->SegmentOffset(e.offset) + e.length)
        problem(obj, v, e,
                absl::StrCat("segment file is ", have, " bytes, shorter than "
                             "the extent's end (missing or truncated)"));
      by_path[e.path].push_back({e.offset, e.length, obj, v});
      blob.emplace_back(e.blob_offset, e.length);
      covered += e.length;
    }
    std::sort(blob.begin(), blob.end());
    uint64_t at = 0;
    bool tiles = covered == rec.blob_bytes;
    for (auto& [off, len] : blob) {
      tiles &= off == at;
      at = off + len;
    }
    if (!tiles)
      problem(obj, v, list->front(),
              absl::StrCat("the record's ",
                           list == &rec.replica ? "replica " : "",
                           "extents do not tile its ", rec.blob_bytes,
                           "-byte blob exactly"));
   }
  }
  for (size_t p = 0; p < by_path.size(); ++p) {
    auto& list = by_path[p];
    std::sort(list.begin(), list.end(),
              [](const Placed& a, const Placed& b) { return a.offset < b.offset; });
    for (size_t i = 1; i < list.size(); ++i) {
      const Placed& prev = list[i - 1];
      const Placed& cur = list[i];
      if (cur.offset < prev.offset + prev.length) {
        ExtentRef e;
        e.path = static_cast<uint32_t>(p);
        e.offset = cur.offset;
        e.length = cur.length;
        problem(cur.object, cur.version, e,
                absl::StrCat("extent overlaps one of object ", prev.object,
                             " version ", prev.version));
      }
    }
  }
  return bad;
}

absl::Status CheckLiveIndex(const StoreView& store) {
  // A read-only open (a secondary instance took the damage for a writer's
  // switch); beside a writer a compaction may delete a file under it, so
  // only a failure three times over counts.
  absl::Status st;
  for (int attempt = 0; attempt < 3; ++attempt) {
    auto live = MetaIndex::Open(store.options().meta_dir,
                                MetaIndex::Mode::kReadOnly, store.fs());
    st = live.ok() ? (*live)->VerifyChecksums() : live.status();
    if (st.ok()) break;
  }
  return st;
}

std::vector<std::string> ForeignOwnedFiles(const StoreView& store) {
  namespace fs = std::filesystem;
  std::vector<std::string> out;
  struct stat owner;
  if (store.num_paths() == 0 ||
      ::lstat(store.path_at(0).dir().c_str(), &owner) != 0)
    return out;
  std::vector<std::string> dirs = {store.options().meta_dir};
  for (size_t p = 0; p < store.num_paths(); ++p) {
    dirs.push_back(store.path_at(p).dir());
    dirs.push_back(absl::StrCat(store.path_at(p).root(), "/.mlpo"));
  }
  std::set<std::string> seen;
  auto check = [&](const std::string& f) {
    struct stat st;
    if (!seen.insert(f).second || ::lstat(f.c_str(), &st) != 0 ||
        st.st_uid == owner.st_uid)
      return;
    out.push_back(absl::StrFormat(
        "%s belongs to uid %d, the store to uid %d (a command run as "
        "another user left it; the job cannot write it): `chown %d:%d %s`",
        f, st.st_uid, owner.st_uid, owner.st_uid, owner.st_gid, f));
  };
  for (const std::string& d : dirs) {
    std::error_code ec;
    if (!fs::is_directory(d, ec)) continue;
    check(d);
    for (fs::recursive_directory_iterator it(d, ec), end; !ec && it != end;
         it.increment(ec))
      check(it->path().string());
  }
  return out;
}

// Long (about 120 lines): the structural checks, then the read-back of
// every record with its progress, then the replica fallback of a
// read-only look; one report is filled in that order.
absl::StatusOr<VerifyReport> Verify(
    StoreView& store, const std::string& tag,
    std::function<void(uint64_t, uint64_t)> progress, bool deep) {
  std::vector<BadExtent> structural;
  if (deep) structural = CheckExtentMap(store);
  MLPO_ASSIGN_OR_RETURN(std::vector<RecordOf> todo,
                        store.PinVersions(tag, /*and_tags=*/deep));
  VerifyReport rep;
  rep.bad = std::move(structural);
  for (size_t p = 0; p < store.num_paths(); ++p) {
    const StoragePath& path = store.path_at(p);
    for (auto& f : path.MissingSegments()) rep.missing_segments.push_back(f);
    for (auto& f : path.ShortSegments()) rep.short_segments.push_back(f);
  }
  {
    absl::Status st = CheckLiveIndex(store);
    if (!st.ok()) rep.index_problems.push_back(std::string(st.message()));
  }
  if (deep) {
    for (size_t p = 0; p < store.num_paths(); ++p) {
      std::string dir =
          absl::StrCat(store.path_at(p).dir(), "/", kIndexBackupDir);
      if (!store.fs()->Exists(dir)) continue;  // none taken yet
      // Beside a job that tags, the next tag may replace this backup while
      // it is read (its files renamed away and deleted under the reader):
      // a failure counts only when the backup read is the same directory
      // before and after, and staging of a new one was not under way,
      // three times over. A reader never calls a healthy backup bad.
      absl::Status st;
      for (int attempt = 0; attempt < 5; ++attempt) {
        auto before = store.fs()->Stat(dir);
        const bool staging = store.fs()->Exists(dir + ".tmp") ||
                             store.fs()->Exists(dir + ".old");
        st = VerifyIndexCopy(dir, store.fs());
        if (st.ok()) break;
        auto after = store.fs()->Stat(dir);
        const bool replaced =
            staging || !before.ok() || !after.ok() ||
            before->ino != after->ino || before->dev != after->dev ||
            store.fs()->Exists(dir + ".tmp") ||
            store.fs()->Exists(dir + ".old");
        if (!replaced && attempt >= 2) break;  // the same backup, still bad
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
      if (!st.ok() && !store.fs()->Exists(dir)) continue;  // gone meanwhile
      if (!st.ok())
        rep.backup_problems.push_back(absl::StrCat(
            "index backup ", dir, ": ", st.message()));
    }
  }
  uint64_t total = 0;
  for (auto& [obj, rec] : todo) total += rec.blob_bytes;
  for (auto& [obj, rec] : todo) {
    AlignedBuffer buf(rec.blob_bytes);
    // Each copy on its own: a bad extent of the first copy whose replica
    // reads back whole is "covered" (named, not lost); a bad replica is bad
    // even when the first copy is good (the copy a user counts on).
    VersionRecord first = rec, second = rec;
    first.replica.clear();
    second.extents = rec.replica;
    second.replica.clear();
    std::vector<BadExtent> bad, bad2;
    store.ReadCopy(obj, first, buf.data(), &bad);
    if (!rec.replica.empty()) {
      store.ReadCopy(obj, second, buf.data(), &bad2);
      for (BadExtent& b : bad2) b.error = "replica: " + b.error;
      ++rep.replicas;
      if (!bad.empty() && bad2.empty()) {
        rep.covered.insert(rep.covered.end(), bad.begin(), bad.end());
        bad.clear();
      }
    }
    rep.bad.insert(rep.bad.end(), bad.begin(), bad.end());
    rep.bad.insert(rep.bad.end(), bad2.begin(), bad2.end());
    store.UnpinVersion(obj, rec.version);
    ++rep.objects;
    rep.extents += rec.extents.size() + rec.replica.size();
    rep.bytes += rec.blob_bytes;
    if (progress) progress(rep.bytes, total);
  }
  if (store.options().read_only && !rep.bad.empty()) {
    // A writer may have replaced a version (and reused its space) after this
    // view was opened: read the index again, and a version that is no longer
    // the head (or no longer in the tag) was superseded, not corrupted.
    auto now = MetaIndex::Open(store.options().meta_dir,
                               MetaIndex::Mode::kSecondary, store.fs());
    absl::StatusOr<MetaSnapshot> snap =
        now.ok() ? (*now)->Load() : absl::StatusOr<MetaSnapshot>(now.status());
    if (snap.ok()) {
      std::vector<BadExtent> still_bad;
      for (BadExtent& b : rep.bad) {
        const std::map<std::string, uint64_t>* set = &snap->heads;
        if (!tag.empty()) {
          auto t = snap->tags.find(tag);
          set = t == snap->tags.end() ? nullptr : &t->second;
        }
        bool moved = true;
        if (set != nullptr) {
          auto cur = set->find(b.object);
          moved = cur == set->end() || cur->second != b.version;
        }
        // Deep: a version any tag still holds was not replaced either.
        if (deep && tag.empty())
          for (auto& [t, objs] : snap->tags) {
            auto cur = objs.find(b.object);
            if (cur != objs.end() && cur->second == b.version) moved = false;
          }
        // Structural problems (index: ...) are about the index as loaded.
        if (absl::StartsWith(b.error, "index: ")) moved = false;
        (moved ? rep.superseded : still_bad).push_back(std::move(b));
      }
      rep.bad = std::move(still_bad);
    }
  }
  std::sort(rep.bad.begin(), rep.bad.end(), [](auto& a, auto& b) {
    return std::tie(a.object, a.path, a.file, a.file_offset) <
           std::tie(b.object, b.path, b.file, b.file_offset);
  });
  return rep;
}

}  // namespace mlpo
