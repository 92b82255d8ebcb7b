// ObjectStore: transactions. A step (and a write-back, an import, the
// initial state) is one: its commits write their extents as usual, but
// the index learns of them only in one batch at the end, which records
// every new version and moves every head at once. Until that batch is
// durable, the old heads and their extents stay; after it, the versions
// only the old heads held are freed, as a plain commit frees its
// predecessor. A crash before the batch leaves the new extents
// unreferenced (free at the next open: free space is derived); after it,
// the whole transaction is there. Nothing in between can exist on disk.
//
// In memory, each object committed in the transaction has a pending
// version (ObjectState::pending, its record in txn_versions_), which
// checkouts read (the step's read-ahead, a look at the state between the
// step's return and its batch); and, under durability "tag", the dirty
// version a commit replaced in the DRAM tier is kept aside
// (Transaction::before) so that an abort can put it back.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "base/trace.h"
#include "store/object_store.h"

namespace mlpo {

absl::Status ObjectStore::CheckNoTransaction(absl::string_view what) {
  // An ended transaction's batch is under way and needs nobody: wait for
  // it (a step returns before its batch under write-behind). An open one
  // is somebody's step in progress.
  mu_.Await(Condition(
      +[](Transaction* t) { return !t->ending; }, &txn_));
  if (!txn_.open) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      what, ": a transaction (an optimizer step) is open on store ",
      options_.meta_dir, "; end or abort it first"));
}

void ObjectStore::AwaitEndedTransaction() {
  MutexLock l(&mu_);
  mu_.Await(Condition(
      +[](Transaction* t) { return !t->ending; }, &txn_));
}

absl::Status ObjectStore::BeginTransaction() {
  MLPO_RETURN_IF_ERROR(CheckWritable("begin a transaction"));
  MutexLock l(&mu_);
  if (txn_.open)
    return absl::FailedPreconditionError(absl::StrCat(
        "store ", options_.meta_dir, ": a transaction is open already"));
  // An ended one's batch first: one transaction at a time.
  mu_.Await(Condition(
      +[](Transaction* t) { return !t->ending; }, &txn_));
  txn_ = Transaction();
  txn_.open = true;
  return absl::OkStatus();
}

std::future<absl::Status> ObjectStore::EndTransaction() {
  auto done = std::make_shared<std::promise<absl::Status>>();
  std::future<absl::Status> fut = done->get_future();
  MutexLock l(&mu_);
  if (!txn_.open) {
    done->set_value(absl::FailedPreconditionError(absl::StrCat(
        "store ", options_.meta_dir, ": no transaction is open")));
    return fut;
  }
  txn_.open = false;
  txn_.ending = true;
  txn_.done = done;
  ++commits_in_flight_;  // the batch: a close waits for it
  if (txn_.inflight == 0) finalizer_->Post([this] { FinishTransaction(); });
  return fut;
}

void ObjectStore::TransactionCommitDone() {
  if (--txn_.inflight == 0 && txn_.ending)
    finalizer_->Post([this] { FinishTransaction(); });
}

void ObjectStore::FinalizePending(const std::string& object,
                                  const VersionRecord& rec, bool write_back,
                                  absl::Status* st,
                                  std::vector<ExtentRef>* to_free) {
  ObjectState& os = objects_[object];
  if (!st->ok()) return;
  if (os.has_head && rec.version <= os.head) {
    *st = absl::FailedPreconditionError(absl::StrCat(
        "a newer version ", os.head, " was committed meanwhile"));
    return;
  }
  if (os.pending != 0) {
    // Committed twice in one transaction: the earlier one was never
    // anybody's.
    auto old = txn_versions_.find({object, os.pending});
    if (old != txn_versions_.end()) {
      old->second.deleted = true;
      if (old->second.pins == 0) {
        std::vector<ExtentRef> all = old->second.rec.AllExtents();
        to_free->insert(to_free->end(), all.begin(), all.end());
        txn_versions_.erase(old);
      }
    }
  }
  if (!write_back && os.dirty != 0 && cache_) {
    // The dirty version this one replaces leaves the tier for the
    // transaction's keeping (an abort puts it back).
    Transaction::Before& b = txn_.before[object];
    if (!b.buf && b.dirty == os.dirty) b.buf = cache_->TakeDirty(object, os.dirty);
  }
  VersionState& vs = txn_versions_[{object, rec.version}];
  vs.rec = rec;
  os.pending = rec.version;
  os.pending_step = rec.step;
  if (!write_back) ++commits_;
}

void ObjectStore::FinishTransaction() {
  std::vector<ExtentRef> to_free;
  std::vector<AlignedBuffer> released;
  std::shared_ptr<std::promise<absl::Status>> done;
  absl::Status st;
  bool seal_copies = false;
  {
    MutexLock l(&mu_);
    done = std::move(txn_.done);
    st = txn_.error;
    if (st.ok()) st = meta_->poisoned();
    bool index_failed = false;
    if (st.ok()) {
      TraceSpan span("transaction batch", "store", "index");
      MetaIndex::Batch b = meta_->NewBatch();
      std::map<VKey, int> dec;
      int n = 0;
      for (auto& [obj, os] : objects_) {
        if (os.pending == 0) continue;
        auto v = txn_versions_.find({obj, os.pending});
        b.PutVersion(obj, v->second.rec);
        b.PutHead(obj, os.pending);
        if (os.has_head) dec[{obj, os.head}] += 1;
        ++n;
      }
      if (n > 0) {
        b.PutNextVersion(next_version_);
        st = ApplyRefChanges(&b, dec, /*free_now=*/true,
                             options_.durability == Durability::kStep,
                             &to_free);
        index_failed = !st.ok();
        seal_copies = st.ok() && options_.durability == Durability::kStep;
      }
      if (st.ok()) {
        for (auto& [obj, os] : objects_) {
          if (os.pending == 0) continue;
          auto v = txn_versions_.find({obj, os.pending});
          VersionState& nv = versions_[{obj, os.pending}];
          nv.rec = v->second.rec;
          nv.pins += v->second.pins;
          nv.refs = 1;
          txn_versions_.erase(v);
          os.has_head = true;
          os.head = os.pending;
          os.head_step = os.pending_step;
          if (os.dirty != 0 && os.dirty <= os.pending) {
            // Written back now, or superseded by a write-through commit.
            if (cache_ && os.dirty == os.pending)
              cache_->MarkClean(obj, os.dirty);
            os.dirty = os.dirty_step = 0;
          }
          os.pending = os.pending_step = 0;
        }
        // The dirty versions the transaction replaced are nobody's now.
        for (auto& [obj, b] : txn_.before)
          if (b.buf) {
            if (cache_) cache_->NoteWriteSaved(b.buf->size());
            released.push_back(std::move(*b.buf));
          }
        txn_.before.clear();
      }
    }
    if (!st.ok()) {
      // Nothing of it applies. After a failed index write its extents
      // may be referenced once reopened: they stay allocated (the index
      // is poisoned until then).
      DropTransaction(/*free_extents=*/!index_failed, &to_free, &released);
      st = Annotate(st, absl::StrCat("transaction on store ",
                                     options_.meta_dir,
                                     " (nothing of it was applied)"));
    }
    txn_.ending = false;
    --commits_in_flight_;
  }
  Recycle(&released);
  FreeExtents(to_free);
  if (seal_copies && st.ok()) WriteStepSealCopies();
  if (done) done->set_value(st);
}

void ObjectStore::DropTransaction(bool free_extents,
                                  std::vector<ExtentRef>* to_free,
                                  std::vector<AlignedBuffer>* released) {
  for (auto& [obj, os] : objects_) {
    if (os.pending == 0) continue;
    if (cache_ && cache_->Contains(obj, os.pending) &&
        os.pending != os.dirty)
      cache_->Invalidate(obj, released);
    os.pending = os.pending_step = 0;
  }
  for (auto it = txn_versions_.begin(); it != txn_versions_.end();) {
    it->second.deleted = true;
    if (it->second.pins > 0 || !free_extents) {
      // (a reader's Unpin frees it; after a failed index write, nobody)
      if (!free_extents) it = txn_versions_.erase(it);
      else ++it;
      continue;
    }
    std::vector<ExtentRef> all = it->second.rec.AllExtents();
    to_free->insert(to_free->end(), all.begin(), all.end());
    it = txn_versions_.erase(it);
  }
  for (auto& [obj, b] : txn_.before) {
    ObjectState& os = objects_[obj];
    if (os.dirty == b.dirty) {
      if (b.buf) {  // (taken, but its replacement was refused)
        if (cache_) cache_->PutDirty(obj, b.dirty, std::move(*b.buf), released);
      }
      continue;
    }
    // A dirty version of the transaction: gone; the one before it back.
    if (cache_ && os.dirty != 0) cache_->Invalidate(obj, released);
    if (b.dirty != 0 && b.buf && cache_) {
      cache_->PutDirty(obj, b.dirty, std::move(*b.buf), released);
      os.dirty = b.dirty;
      os.dirty_step = b.dirty_step;
    } else {
      if (b.dirty != 0)
        std::fprintf(stderr,
                     "mlpo: %s: object %s: its dirty version %llu was lent "
                     "to a checkout the aborted transaction committed; it "
                     "is lost (the object is at its head)\n",
                     Where().c_str(), obj.c_str(),
                     static_cast<unsigned long long>(b.dirty));
      os.dirty = os.dirty_step = 0;
    }
  }
  txn_.before.clear();
  txn_.open = false;
}

absl::Status ObjectStore::AbortTransaction() {
  std::vector<ExtentRef> to_free;
  std::vector<AlignedBuffer> released;
  {
    MutexLock l(&mu_);
    if (!txn_.open)
      return absl::FailedPreconditionError(absl::StrCat(
          "store ", options_.meta_dir, ": no transaction is open"));
    // Its commits in flight land first (they hold its buffers).
    mu_.Await(Condition(
        +[](Transaction* t) { return t->inflight == 0; }, &txn_));
    DropTransaction(/*free_extents=*/true, &to_free, &released);
    txn_ = Transaction();
  }
  Recycle(&released);
  FreeExtents(to_free);
  return absl::OkStatus();
}

}  // namespace mlpo
