// ObjectStore: the lineage: tags, restore, reset, drop-tag, the heads
// salvage drops (store/admin/salvage.cc decides which), and the index
// backup taken after each.
#include <algorithm>
#include <set>

#include <cstdio>
#include <filesystem>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "store/fs/file_util.h"
#include "store/object_store.h"
#include "base/status_macros.h"

namespace mlpo {

absl::Status ObjectStore::SyncAllPaths() {
  for (auto& p : paths_) MLPO_RETURN_IF_ERROR(p->Sync());
  return absl::OkStatus();
}

namespace {

// RocksDB's checkpoint makes its directory 0755 and hard-links the index's
// files (0644 under the usual umask): the backup is the index, so it is the
// owner's alone, like every other file of the store. (The links share
// their inodes with the index's files, which become 0600 too.)
absl::Status MakeOwnerOnly(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::permissions(dir, fs::perms::owner_all, fs::perm_options::replace, ec);
  if (ec)
    return absl::InternalError(absl::StrCat("chmod ", dir, ": ", ec.message()));
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    fs::permissions(e.path(),
                    e.is_directory() ? fs::perms::owner_all
                                     : fs::perms::owner_read |
                                           fs::perms::owner_write,
                    fs::perm_options::replace, ec);
    if (ec)
      return absl::InternalError(
          absl::StrCat("chmod ", e.path().string(), ": ", ec.message()));
  }
  return ec ? absl::InternalError(absl::StrCat("list ", dir, ": ",
                                               ec.message()))
            : absl::OkStatus();
}

// RocksDB's checkpoint hard-links every file it can: on the index's own file
// system (the default layout, any one-disk setup) the "backup" was the
// live index's inodes, so one flipped byte damaged the index and every
// backup at once. Each file with another link is replaced by a copy of its
// own (written, synced, renamed over the link).
absl::Status CopyLinkedFiles(FileSystem* fsys, const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    if (!e.is_regular_file() || fs::hard_link_count(e.path(), ec) <= 1)
      continue;
    std::string file = e.path().string(), tmp = file + ".copy";
    MLPO_ASSIGN_OR_RETURN(std::string data,
                          fsys->ReadFile(file, uint64_t{1} << 32));
    MLPO_RETURN_IF_ERROR(fsys->WriteFileSynced(tmp, data));
    MLPO_RETURN_IF_ERROR(fsys->Rename(tmp, file));
  }
  if (ec)
    return absl::InternalError(absl::StrCat("list ", dir, ": ", ec.message()));
  return fsys->SyncDir(dir);
}

}  // namespace

void ObjectStore::BackupIndex() {
  for (auto& p : paths_) {
    std::string dir = p->dir() + "/" + kIndexBackupDir;
    std::string tmp = dir + ".tmp", old = dir + ".old";
    // Leftovers of a backup cut short (RocksDB stages a checkpoint in
    // "<dir>.tmp") would block every later one.
    absl::Status st = fs()->RemoveTree(tmp);
    if (st.ok()) st = fs()->RemoveTree(tmp + ".tmp");
    if (st.ok()) st = meta_->Checkpoint(tmp);
    if (st.ok()) st = CopyLinkedFiles(fs(), tmp);
    if (st.ok()) st = MakeOwnerOnly(tmp);
    // Checked as written: a backup that does not open with every block's
    // checksum good never replaces the last good one.
    if (st.ok()) st = VerifyIndexCopy(tmp, fs());
    if (st.ok()) {
      // Keep a complete copy at every instant: meta-backup or, during the
      // swap, meta-backup.old.
      st = fs()->RemoveTree(old);
      if (st.ok() && fs()->Exists(dir)) st = fs()->Rename(dir, old);
      if (st.ok()) st = fs()->Rename(tmp, dir);
      if (st.ok()) st = fs()->SyncDir(p->dir());
      if (st.ok()) st = fs()->RemoveTree(old);
    }
    if (!st.ok())
      std::fprintf(stderr, "mlpo: %s: index backup on %s failed: %s\n",
                   Where().c_str(), p->root().c_str(),
                   std::string(st.message()).c_str());
  }
  WriteSealCopies();
}

void ObjectStore::WriteSealCopies() {
  if (options_.read_only || store_uuid_.empty() || !meta_->poisoned().ok())
    return;
  absl::StatusOr<uint64_t> seq = meta_->SyncAndSeal();
  absl::Status st = seq.status();
  for (auto& p : paths_) {
    if (!st.ok() || *seq == 0) break;
    st = WriteSealCopy(p->dir(), fs(), store_uuid_, *seq);
  }
  if (!st.ok())
    std::fprintf(stderr, "mlpo: %s: the index seal's copies: %s\n",
                 Where().c_str(), std::string(st.message()).c_str());
}

void ObjectStore::WriteStepSealCopies() {
  if (options_.read_only || store_uuid_.empty() || !meta_->poisoned().ok())
    return;
  const uint64_t seq = meta_->sequence();
  const uint64_t turn = seal_copy_turn_.fetch_add(1);
  absl::Status st;
  for (auto& p : paths_) {
    st = WriteSealCopyInPlace(p->dir(), fs(), store_uuid_, seq, turn);
    if (!st.ok()) break;
  }
  if (!st.ok())
    std::fprintf(stderr, "mlpo: %s: the index seal's copies: %s\n",
                 Where().c_str(), std::string(st.message()).c_str());
}

absl::Status ObjectStore::Tag(const std::string& name) {
  MLPO_RETURN_IF_ERROR(CheckWritable("tag"));
  MLPO_RETURN_IF_ERROR(ValidateName("tag", name));
  {
    MutexLock l(&mu_);
    if (tags_.count(name))
      return absl::AlreadyExistsError(absl::StrCat("tag ", name, " exists"));
  }
  // Dirty versions in the DRAM tier first: the tag covers them.
  MLPO_RETURN_IF_ERROR(Annotate(WriteBack(), absl::StrCat("tag ", name)));
  MLPO_RETURN_IF_ERROR(TagImpl(name));
  BackupIndex();
  return absl::OkStatus();
}

absl::Status ObjectStore::TagImpl(const std::string& name) {
  MLPO_RETURN_IF_ERROR(CheckWritable("tag"));
  MLPO_RETURN_IF_ERROR(ValidateName("tag", name));
  // Commits finish their own durability; a tag must also cover what was
  // committed under durability "tag", a step's batch still ending included.
  AwaitEndedTransaction();
  MLPO_RETURN_IF_ERROR(SyncAllPaths());
  MutexLock l(&mu_);
  MLPO_RETURN_IF_ERROR(CheckNoTransaction(absl::StrCat("tag ", name)));
  if (tags_.count(name))
    return absl::AlreadyExistsError(absl::StrCat("tag ", name, " exists"));
  MetaIndex::Batch b = meta_->NewBatch();
  b.PutTag(name, "", 0);  // the tag's marker: it exists even when empty
  std::map<std::string, uint64_t> entry;
  for (auto& [obj, st] : objects_) {
    if (!st.has_head) continue;
    b.PutTag(name, obj, st.head);
    entry[obj] = st.head;
  }
  MLPO_RETURN_IF_ERROR(meta_->Apply(&b, true));
  for (auto& [obj, v] : entry) ++versions_[{obj, v}].refs;
  tags_[name] = std::move(entry);
  return absl::OkStatus();
}

absl::Status ObjectStore::Restore(const std::string& name) {
  MLPO_RETURN_IF_ERROR(CheckWritable("restore"));
  {
    MutexLock l(&mu_);
    if (!tags_.count(name))
      return absl::NotFoundError(absl::StrCat("no tag named ", name));
  }
  // All or nothing: every extent of the tag is read and checked (the
  // replica standing in for a bad first copy) before any head moves. The
  // tag's versions cannot go meanwhile: the tag holds them, and only this
  // store (one writer) could drop it.
  std::set<VKey> keys;
  {
    MutexLock l(&mu_);
    for (auto& [obj, v] : tags_[name]) keys.insert({obj, v});
  }
  std::vector<BadExtent> bad;
  for (auto& [k, found] : CheckVersions(keys, nullptr))
    bad.insert(bad.end(), found.begin(), found.end());
  if (!bad.empty()) {
    std::string first = std::string(BadExtentStatus(bad.front()).message());
    return absl::Status(
        bad.front().code == absl::StatusCode::kOk ? absl::StatusCode::kDataLoss
                                                  : bad.front().code,
        absl::StrCat("restore ", name, ": ", bad.size(),
                     " extent(s) of the tag are unreadable (first: ", first,
                     "); nothing was changed: the heads and every version "
                     "are as they were"));
  }
  std::map<std::string, uint64_t> want;
  {
    MutexLock l(&mu_);
    auto t = tags_.find(name);
    if (t == tags_.end())
      return absl::NotFoundError(absl::StrCat("no tag named ", name));
    want = t->second;
  }
  return MoveHeads(want, absl::StrCat("restore ", name));
}

absl::Status ObjectStore::ResetHeads() {
  MLPO_RETURN_IF_ERROR(CheckWritable("reset"));
  return MoveHeads({}, "reset");
}

absl::Status ObjectStore::MoveHeads(const std::map<std::string, uint64_t>& want,
                                    const std::string& what) {
  std::vector<ExtentRef> to_free;
  {
    MutexLock l(&mu_);
    MLPO_RETURN_IF_ERROR(CheckNoTransaction(what));
    if (commits_in_flight_ > 0)
      return absl::FailedPreconditionError(absl::StrCat(
          what, ": ", commits_in_flight_,
          " commits in flight; wait for them first"));
    MetaIndex::Batch b = meta_->NewBatch();
    std::map<VKey, int> dec;
    for (auto& [obj, st] : objects_) {
      auto w = want.find(obj);
      bool tagged = w != want.end();
      if (st.has_head && tagged && st.head == w->second) continue;
      if (st.has_head) dec[{obj, st.head}] += 1;
      if (tagged)
        b.PutHead(obj, w->second);
      else if (st.has_head)
        b.DeleteHead(obj);
    }
    MLPO_RETURN_IF_ERROR(ApplyRefChanges(&b, dec, true, true, &to_free,
                                         /*maintenance=*/true));
    for (auto& [obj, st] : objects_) {
      auto w = want.find(obj);
      bool tagged = w != want.end();
      if (st.has_head && tagged && st.head == w->second) continue;
      st.has_head = tagged;
      st.head = tagged ? w->second : 0;
      st.head_step = tagged ? versions_[{obj, w->second}].rec.step : 0;
      if (tagged) ++versions_[{obj, w->second}].refs;
    }
  }
  if (cache_) {  // heads moved: nothing cached is a head any more
    std::vector<AlignedBuffer> released;
    {
      MutexLock l(&mu_);
      for (auto& [obj, st] : objects_) st.dirty = 0;  // dropped, unwritten
      cache_->Clear(&released);
    }
    Recycle(&released);
  }
  FreeExtents(to_free);
  return absl::OkStatus();
}

absl::Status ObjectStore::DropTag(const std::string& name) {
  MLPO_RETURN_IF_ERROR(DropTagImpl(name));
  BackupIndex();  // before gc can free what the dropped tag held
  return absl::OkStatus();
}

absl::Status ObjectStore::DropTagImpl(const std::string& name) {
  MLPO_RETURN_IF_ERROR(CheckWritable("drop-tag"));
  MutexLock l(&mu_);
  auto t = tags_.find(name);
  if (t == tags_.end())
    return absl::NotFoundError(absl::StrCat("no tag named ", name));
  MetaIndex::Batch b = meta_->NewBatch();
  b.DeleteTag(name, "");
  std::map<VKey, int> dec;
  for (auto& [obj, v] : t->second) {
    b.DeleteTag(name, obj);
    dec[{obj, v}] += 1;
  }
  std::vector<ExtentRef> none;
  MLPO_RETURN_IF_ERROR(ApplyRefChanges(&b, dec, false, true, &none,
                                       /*maintenance=*/true));
  tags_.erase(t);
  return absl::OkStatus();
}

absl::Status ObjectStore::DropHeads(const std::set<std::string>& objects) {
  MLPO_RETURN_IF_ERROR(CheckWritable("drop heads"));
  if (objects.empty()) return absl::OkStatus();
  MutexLock l(&mu_);
  MLPO_RETURN_IF_ERROR(CheckNoTransaction("drop heads"));
  MetaIndex::Batch b = meta_->NewBatch();
  std::map<VKey, int> dec;
  for (const std::string& obj : objects) {
    auto it = objects_.find(obj);
    if (it == objects_.end() || !it->second.has_head) continue;
    b.DeleteHead(obj);
    dec[{obj, it->second.head}] += 1;
  }
  if (dec.empty()) return absl::OkStatus();
  std::vector<ExtentRef> none;
  MLPO_RETURN_IF_ERROR(
      ApplyRefChanges(&b, dec, /*free_now=*/false, /*sync=*/true, &none,
                      /*maintenance=*/true));
  for (auto& [key, n] : dec) {
    ObjectState& st = objects_[key.first];
    st.has_head = false;
    st.head = st.head_step = 0;
  }
  return absl::OkStatus();
}

}  // namespace mlpo
