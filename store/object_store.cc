// ObjectStore: declare, checkout and commit. Reading and checking a
// version lives in object_store_read.cc; opening (identity, the index's
// checks) in object_store_open.cc; tags, restore and drop-tag in
// object_store_lineage.cc; statistics and listing in
// object_store_inspect.cc; placement, spill-over and degraded mode in
// object_store_placement.cc; the writes store/admin/ makes through
// StoreMaintenance in object_store_maintenance.cc.
//
// A commit runs in three stages: the caller's thread allocates extents on
// every path, checksums the blob and submits the writes; the paths' engine
// threads complete them; the last completion posts the commit to the
// finalizer thread, which syncs the touched paths (durability "step"),
// writes one RocksDB batch that moves the head, and only then frees the
// extents of the version that lost its last reference. Freed extents are
// never reused before the batch that unreferences them is durable, so every
// committed version stays readable at every instant.
#include "store/object_store.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>

#include "absl/strings/str_cat.h"
#include "base/status_reason.h"
#include "base/trace.h"
#include "base/status_macros.h"

namespace mlpo {
namespace fs = std::filesystem;

void* CheckoutLease::SectionData(absl::string_view name) {
  const mlpo::Section* s = layout_.Find(name);
  return s ? buf_.data() + s->offset : nullptr;
}

ObjectStore::~ObjectStore() {
  bool open_txn = false;
  if (meta_ != nullptr) {
    MutexLock l(&mu_);
    open_txn = txn_.open;
  }
  if (open_txn) {
    // A step never ended: nothing of it is applied.
    std::fprintf(stderr, "mlpo: %s: closing with a transaction open: it is "
                 "discarded (the store stays at the state before it)\n",
                 Where().c_str());
    (void)AbortTransaction();
  }
  if (meta_ != nullptr) {  // an ended one's batch lands first
    MutexLock l(&mu_);
    mu_.Await(Condition(
        +[](Transaction* t) { return !t->ending; }, &txn_));
  }
  if (cache_ && !options_.read_only) {
    // Durability "tag": versions committed since the last tag live in DRAM;
    // a clean close writes them as a close without the tier would have.
    absl::Status st = WriteBack();
    if (!st.ok())
      std::fprintf(stderr, "mlpo: %s: closing: %s (the last tag is intact)\n",
                   Where().c_str(), std::string(st.message()).c_str());
  }
  if (dirty_home_) dirty_home_->Detach();  // leases outliving the store
  {
    MutexLock l(&mu_);
    mu_.Await(Condition(
        +[](int* n) { return *n == 0; }, &commits_in_flight_));
  }
  // Every commit is in the index now: seal it and copy the seal.
  if (meta_ && !options_.read_only) WriteSealCopies();
  // Reads still in flight complete into the hasher; drain the engines
  // first, then the hasher (verification uses the paths), then the rest.
  for (auto& p : paths_) p->engine()->Close();
  hasher_.reset();
  finalizer_.reset();
  paths_.clear();  // closes engines: drains any reads in flight
  meta_.reset();
  lock_.Release();
  // Unpin while every pinned buffer is alive (the DRAM tier frees its own
  // when its members go, after this body).
  if (pool_) pool_->ClearRegistrar();
}

absl::Status ObjectStore::CheckWritable(absl::string_view what) const {
  if (!options_.read_only) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      what, ": store ", options_.meta_dir, " is open read-only"));
}

absl::Status ObjectStore::Declare(const std::string& object,
                                  const ObjectLayout& layout) {
  MLPO_RETURN_IF_ERROR(ValidateName("object", object));
  MutexLock l(&mu_);
  auto it = objects_.find(object);
  if (it == objects_.end()) MLPO_RETURN_IF_ERROR(CheckWritable("declare"));
  if (it != objects_.end()) {
    if (it->second.layout == layout) return absl::OkStatus();
    return WithReason(absl::FailedPreconditionError(absl::StrCat(
        "object ", object, " is declared as {", it->second.layout.DebugString(),
        "}, not {", layout.DebugString(), "}")),
        kReasonLayoutMismatch, it->second.layout.DebugString());
  }
  MetaIndex::Batch b = meta_->NewBatch();
  b.PutObject(object, layout);
  MLPO_RETURN_IF_ERROR(
      meta_->Apply(&b, options_.durability == Durability::kStep));
  objects_[object].layout = layout;
  ResizeCache();
  return absl::OkStatus();
}

void ObjectStore::ResizeCache() {
  if (cache_ == nullptr || options_.cache_bytes != 0) return;
  uint64_t state = 0;
  for (auto& [name, os] : objects_) state += os.layout.total_bytes();
  std::vector<AlignedBuffer> released;
  cache_->SetBudget(
      static_cast<uint64_t>(static_cast<double>(state) *
                            options_.cache_percent / 100.0),
      &released);
  Recycle(&released);
}

void ObjectStore::Recycle(std::vector<AlignedBuffer>* released) {
  for (AlignedBuffer& b : *released) pool_->Put(std::move(b));
  released->clear();
}

void ObjectStore::DeclareAccessOrder(const std::vector<std::string>& objects) {
  if (cache_) cache_->DeclareOrder(objects);
}

// Long (about 105 lines): which version a checkout gets (the
// transaction's, the DRAM tier's dirty one, the head) is decided under one
// hold of mu_, then served from the tier, a copy, a blank or a read; the
// cases share the lease being built.
std::future<absl::StatusOr<Lease>> ObjectStore::Checkout(
    const std::string& object, bool for_update) {
  auto promise = std::make_shared<std::promise<absl::StatusOr<Lease>>>();
  auto fut = promise->get_future();
  auto lease = std::make_shared<CheckoutLease>();
  lease->object_ = object;
  VersionRecord rec;
  std::optional<AlignedBuffer> cached;
  bool dirty = false;  // the newest version is dirty in the DRAM tier
  std::vector<AlignedBuffer> released;
  {
    MutexLock l(&mu_);
    auto it = objects_.find(object);
    if (it == objects_.end()) {
      promise->set_value(absl::NotFoundError(
          absl::StrCat("object ", object, " is not declared")));
      return fut;
    }
    ++checkouts_;
    lease->layout_ = it->second.layout;
    if (txn_.open || txn_.ending) for_update = false;  // (never lend)
    if (it->second.pending != 0 && it->second.pending > it->second.dirty) {
      // The transaction's version: kept clean in the tier since its
      // commit, or read from its extents.
      const uint64_t v = it->second.pending;
      lease->version_ = v;
      lease->step_ = it->second.pending_step;
      lease->is_new_ = false;
      if (cache_) cached = cache_->Take(object, v, &released);
      if (!cached) {
        VersionState& vs = txn_versions_[{object, v}];
        ++vs.pins;
        rec = vs.rec;
      }
    } else if (it->second.dirty != 0) {
      // The newest version is in DRAM only: copied out below, outside the
      // store's lock (never hand over the only copy to a lease that may be
      // dropped).
      lease->version_ = it->second.dirty;
      lease->step_ = it->second.dirty_step;
      lease->is_new_ = false;
      dirty = true;
    } else if (it->second.has_head) {
      lease->version_ = it->second.head;
      lease->step_ = it->second.head_step;
      lease->is_new_ = false;
      if (cache_) cached = cache_->Take(object, it->second.head, &released);
      if (!cached) {
        VersionState& vs = versions_[{object, it->second.head}];
        ++vs.pins;
        rec = vs.rec;
      }
    }
  }
  Recycle(&released);
  if (dirty && for_update) {
    // The update will commit a newer version: lend the only copy (no
    // copy); it comes back if the lease is dropped uncommitted.
    cached = cache_->LendDirty(object, lease->version_);
    if (cached) lease->home_ = dirty_home_;
  }
  if (dirty && !cached) {
    if (cache_->IsOut(object, lease->version_)) {
      promise->set_value(absl::FailedPreconditionError(absl::StrCat(
          "object ", object, " is checked out for an update (its newest "
          "version is in that checkout until it is committed or dropped)")));
      return fut;
    }
    AlignedBuffer b = pool_->Get(lease->layout_.total_bytes());
    if (!cache_->CopyDirty(object, lease->version_, b.data(),
                           lease->layout_.total_bytes())) {
      // Written back or replaced since the lock was let go: look again.
      pool_->Put(std::move(b));
      return Checkout(object, for_update);
    }
    cached = std::move(b);
  }
  if (cached) {
    Trace::Get()->Instant("hit " + object, "cache", "DRAM tier", absl::Now(),
                          lease->layout_.total_bytes());
    // The DRAM tier had this very version (written through at its commit,
    // or dirty and copied out).
    lease->buf_ = std::move(*cached);
    lease->pool_ = pool_;
    promise->set_value(lease);
    return fut;
  }
  lease->buf_ = pool_->Get(lease->layout_.total_bytes());
  lease->pool_ = pool_;
  if (lease->is_new_) {
    if (options_.initializer)
      options_.initializer(object, lease->layout_, lease->buf_.data());
    else
      std::memset(lease->buf_.data(), 0, lease->layout_.total_bytes());
    promise->set_value(lease);
    return fut;
  }
  ReadRecord(object, rec, lease->buf_.data(),
             [this, lease, promise, v = rec.version](std::vector<BadExtent> bad) {
               Unpin({lease->object_, v});
               if (!bad.empty())
                 promise->set_value(BadExtentStatus(bad.front()));
               else
                 promise->set_value(lease);
             });
  return fut;
}

void ObjectStore::Return(Lease lease) {
  if (!cache_ || !lease || lease.use_count() != 1 || lease->is_new_) return;
  {
    MutexLock l(&mu_);
    auto it = objects_.find(lease->object_);
    if (it == objects_.end()) return;
    const ObjectState& os = it->second;
    const bool newest_clean =
        os.pending != 0 ? os.pending == lease->version_ && os.pending > os.dirty
                        : os.has_head && os.head == lease->version_ &&
                              os.dirty == 0;
    if (!newest_clean) return;
  }
  std::vector<AlignedBuffer> released;
  cache_->Offer(lease->object_, lease->version_, &lease->buf_,
                /*dirty=*/false, &released);
  Recycle(&released);
}

absl::StatusOr<Lease> ObjectStore::Blank(const std::string& object) {
  auto lease = std::make_shared<CheckoutLease>();
  lease->object_ = object;
  {
    MutexLock l(&mu_);
    auto it = objects_.find(object);
    if (it == objects_.end())
      return absl::NotFoundError(
          absl::StrCat("object ", object, " is not declared"));
    lease->layout_ = it->second.layout;
    lease->version_ = it->second.head;
    lease->step_ = it->second.head_step;
    lease->is_new_ = !it->second.has_head;
  }
  lease->buf_ = pool_->Get(lease->layout_.total_bytes());
  lease->pool_ = pool_;
  return lease;
}

struct ObjectStore::CommitOp {
  Lease lease;
  uint64_t version;  // the store-wide sequence number given to it
  uint64_t step;     // the caller's
  bool write_back = false;  // a dirty version from the DRAM tier
  bool txn = false;         // made in the open transaction
  int failed_path = -1;     // the path whose write failed first
  int retries = 0;          // degraded-mode rewrites so far
  VersionRecord rec;
  std::vector<bool> touched;
  std::atomic<int> left{0};
  Mutex mu;
  absl::Status error;
  std::promise<absl::Status> promise;
};

std::future<absl::Status> ObjectStore::Commit(Lease lease, uint64_t step) {
  // A lent dirty version is the commit's now, whatever becomes of it: its
  // buffer may hold the newer version already, so it never goes back.
  if (lease) lease->home_.reset();
  return CommitImpl(std::move(lease), step, /*write_back=*/false);
}

absl::Status ObjectStore::WriteBack() {
  {
    MutexLock l(&mu_);
    MLPO_RETURN_IF_ERROR(CheckNoTransaction("write-back"));
  }
  if (cache_ == nullptr) return absl::OkStatus();
  if (cache_->DirtyEntries().empty()) return absl::OkStatus();
  // One transaction: every head moves to its dirty version at once, so a
  // crash in the middle leaves the store at the last write-back or tag,
  // not at a mix of steps.
  MLPO_RETURN_IF_ERROR(BeginTransaction());
  std::vector<std::future<absl::Status>> writes;
  absl::Status out_error;
  for (auto& [object, version] : cache_->DirtyEntries()) {
    auto lease = std::make_shared<CheckoutLease>();
    lease->object_ = object;
    lease->version_ = version;
    lease->is_new_ = false;
    {
      MutexLock l(&mu_);
      auto it = objects_.find(object);
      if (it == objects_.end() || it->second.dirty != version) continue;
      lease->layout_ = it->second.layout;
      lease->step_ = it->second.dirty_step;
    }
    lease->buf_ = pool_->Get(lease->layout_.total_bytes());
    lease->pool_ = pool_;
    if (!cache_->CopyForWriteBack(object, version, lease->buf_.data(),
                                  lease->layout_.total_bytes())) {
      if (cache_->IsOut(object, version) && out_error.ok())
        out_error = absl::FailedPreconditionError(absl::StrCat(
            "object ", object, " version ", version, " is checked out for "
            "an update and cannot be written back until it is committed or "
            "dropped"));
      continue;  // replaced meanwhile by a newer dirty version
    }
    writes.push_back(CommitImpl(std::move(lease), version, true));
  }
  absl::Status first;
  for (auto& w : writes) {
    absl::Status st = w.get();
    if (first.ok() && !st.ok()) first = st;
  }
  if (first.ok()) first = out_error;
  if (first.ok()) {
    first = EndTransaction().get();
  } else {
    (void)AbortTransaction();
  }
  return Annotate(first, "write-back of the DRAM tier's dirty versions");
}

std::future<absl::Status> ObjectStore::CommitImpl(Lease lease, uint64_t number,
                                                  bool write_back) {
  auto op = std::make_shared<CommitOp>();
  op->write_back = write_back;
  auto fut = op->promise.get_future();
  // Moved, not copied: the parameter lives until the caller's full
  // expression ends (often a .get() on this future), and a lease only op
  // holds can move into the DRAM tier at the end.
  op->lease = std::move(lease);
  op->version = write_back ? number : 0;
  op->step = write_back ? 0 : number;
  const std::string& object = op->lease->object();
  {
    MutexLock l(&mu_);
    auto it = objects_.find(object);
    absl::Status bad;
    if (it == objects_.end())
      bad = absl::NotFoundError(absl::StrCat("object ", object, " is not declared"));
    else if (!(it->second.layout == op->lease->layout()))
      bad = absl::FailedPreconditionError(absl::StrCat(
          "commit of ", object, ": lease layout differs from the declared one"));
    else if (options_.read_only)
      bad = CheckWritable(absl::StrCat("commit of ", object));
    else if (absl::Status p = meta_->poisoned(); !p.ok())
      bad = Annotate(p, absl::StrCat("commit of ", object));
    else if (!write_back &&
             ((it->second.has_head && op->step < it->second.head_step) ||
              (it->second.dirty != 0 && op->step < it->second.dirty_step) ||
              (it->second.pending != 0 && op->step < it->second.pending_step)))
      bad = absl::FailedPreconditionError(absl::StrCat(
          "commit of ", object, " at step ", op->step,
          ": steps never go back (the head is at step ",
          std::max({it->second.head_step, it->second.dirty_step,
                    it->second.pending_step}),
          ")"));
    if (!bad.ok()) {
      op->promise.set_value(bad);
      return fut;
    }
    if (write_back) {
      op->step = op->lease->step();
    } else {
      op->version = next_version_++;
    }
    const uint64_t version = op->version;
    op->txn = txn_.open;
    ObjectState& os = it->second;
    if (op->txn && !write_back) {
      // The first commit of the object in the transaction: what an abort
      // puts back.
      auto [b, first] = txn_.before.try_emplace(object);
      if (first) {
        b->second.dirty = os.dirty;
        b->second.dirty_step = os.dirty_step;
      }
    }
    if (!write_back && cache_ && options_.durability == Durability::kTag &&
        op->lease.use_count() == 1) {
      // Write-back: the version stays in DRAM, dirty, until the next tag
      // (or close) writes it, or a newer version replaces it unwritten.
      std::vector<AlignedBuffer> released;
      std::optional<AlignedBuffer> replaced;
      if (op->txn && os.dirty != 0) {
        // Kept aside until the transaction ends (an abort puts it back).
        replaced = cache_->TakeDirty(object, os.dirty);
      }
      if (cache_->Offer(object, version, &op->lease->buf_, /*dirty=*/true,
                        &released)) {
        if (replaced) txn_.before[object].buf = std::move(replaced);
        os.dirty = version;
        os.dirty_step = op->step;
        ++commits_;
        for (AlignedBuffer& b : released) pool_->Put(std::move(b));
        op->promise.set_value(absl::OkStatus());
        return fut;
      }
      if (replaced)  // refused: the old one goes back, as it was
        cache_->PutDirty(object, os.dirty, std::move(*replaced), &released);
      for (AlignedBuffer& b : released) pool_->Put(std::move(b));
    }
    if (op->txn) ++txn_.inflight;
    ++commits_in_flight_;
  }
  op->rec.version = op->version;
  op->rec.step = op->step;
  absl::Status st = StartWrites(op);
  if (!st.ok()) {
    {
      MutexLock l(&mu_);
      --commits_in_flight_;
      if (op->txn) {
        if (txn_.error.ok()) txn_.error = Annotate(st, "a commit");
        TransactionCommitDone();
      }
    }
    op->promise.set_value(st);
  }
  return fut;
}

absl::Status ObjectStore::StartWrites(std::shared_ptr<CommitOp> op) {
  const std::string& object = op->lease->object();
  uint64_t total = op->lease->size();
  op->rec.blob_bytes = total;
  op->rec.extents.clear();
  op->touched.assign(paths_.size(), false);
  op->failed_path = -1;
  op->error = absl::OkStatus();
  std::vector<std::vector<Range>> ranges;
  MLPO_RETURN_IF_ERROR(AllocateStripes(
      absl::StrCat("commit of ", object, " version ", op->version, " (step ",
                   op->step, ")"),
      object,
      total, &ranges));
  uint64_t blob_off = 0;
  for (size_t p = 0; p < paths_.size(); ++p) {
    for (const Range& r : ranges[p]) {
      op->touched[p] = true;
      for (uint64_t o = 0; o < r.length; o += options_.extent_bytes) {
        ExtentRef e;
        e.path = static_cast<uint32_t>(p);
        e.offset = r.offset + o;
        e.length = std::min(options_.extent_bytes, r.length - o);
        e.blob_offset = blob_off;  // checksum: filled by the hasher
        blob_off += e.length;
        op->rec.extents.push_back(e);
      }
    }
  }
  op->left = static_cast<int>(op->rec.extents.size());
  // Hash each extent and start its write at once, on the hasher thread: the
  // caller goes back to computing while the paths write.
  hasher_->Post([this, op] {
    for (ExtentRef& e : op->rec.extents) {
      const char* src = op->lease->data() + e.blob_offset;
      e.checksum = Checksum(src, e.length);
      paths_[e.path]->Write(
          {e.offset, e.length}, src,
          [this, op, path = static_cast<int>(e.path)](const absl::Status& s) {
            if (!s.ok()) {
              MutexLock l(&op->mu);
              if (op->error.ok()) {
                op->error = s;
                op->failed_path = path;
              }
            }
            if (op->left.fetch_sub(1) == 1)
              finalizer_->Post([this, op] { FinalizeCommit(op); });
          });
    }
  });
  return absl::OkStatus();
}

// Long (about 110 lines): the end of one commit as one critical sequence
// (sync, retry on another path, index write or transaction hand-off,
// freeing, the DRAM tier), whose order is the store's crash-safety
// argument (docs/design.md "Durability"); it reads top to bottom.
void ObjectStore::FinalizeCommit(std::shared_ptr<CommitOp> op) {
  const std::string& object = op->lease->object();
  std::string where = absl::StrCat("commit of ", object, " version ",
                                   op->version, " (step ", op->step, ")");
  absl::Status st;
  int failed = -1;
  {
    MutexLock l(&op->mu);
    st = op->error;
    failed = op->failed_path;
  }
  if (st.ok() && options_.durability == Durability::kStep) {
    for (size_t p = 0; p < paths_.size() && st.ok(); ++p)
      if (op->touched[p]) {
        TraceSpan span("path sync", "store", "index");
        st = paths_[p]->Sync();
        if (!st.ok()) failed = static_cast<int>(p);
      }
  }
  if (!st.ok() && op->retries < static_cast<int>(paths_.size()) &&
      Degrade(failed, st)) {
    // Degraded mode: write the version again on the paths still healthy
    // (the extents written so far were never referenced).
    ++op->retries;
    FreeExtents(op->rec.extents);
    absl::Status again = StartWrites(op);
    if (again.ok()) return;  // the new writes finalize this commit
    st = again;
    op->rec.extents.clear();
  }
  std::vector<ExtentRef> to_free;
  // An index write that fails may still have reached the disk (a WAL
  // record written whose sync failed, a seal that failed after the
  // write): the new extents may be referenced after a reopen, so they are
  // not freed (the index is poisoned: nothing else is written until the
  // reopen rebuilds free space from what the index really holds).
  bool index_failed = false;
  if (op->txn) {
    // In a transaction: the version becomes the object's pending one; the
    // transaction's one batch records it (object_store_txn.cc).
    MutexLock l(&mu_);
    FinalizePending(object, op->rec, op->write_back, &st, &to_free);
    if (!st.ok() && txn_.error.ok()) txn_.error = Annotate(st, where);
  } else if (st.ok()) {
    MutexLock l(&mu_);
    ObjectState& os = objects_[object];
    if (os.has_head && op->version <= os.head) {
      st = absl::FailedPreconditionError(absl::StrCat(
          where, ": a newer version ", os.head, " was committed meanwhile"));
    } else {
      MetaIndex::Batch b = meta_->NewBatch();
      b.PutVersion(object, op->rec);
      b.PutHead(object, op->version);
      // Numbers handed out so far (commits in flight included) are never
      // handed out again, even after a reopen.
      b.PutNextVersion(next_version_);
      std::map<VKey, int> dec;
      if (os.has_head) dec[{object, os.head}] = 1;
      st = ApplyRefChanges(&b, dec, /*free_now=*/true,
                           options_.durability == Durability::kStep, &to_free);
      index_failed = !st.ok();
      if (st.ok()) {
        VersionState& nv = versions_[{object, op->version}];
        nv.rec = op->rec;
        nv.refs = 1;
        os.has_head = true;
        os.head = op->version;
        os.head_step = op->step;
        if (!op->write_back) ++commits_;
        if (os.dirty != 0 && os.dirty <= op->version) {
          // The dirty version is on disk now (write-back), or an older one
          // was superseded by this write-through commit.
          if (op->write_back) {
            cache_->MarkClean(object, op->version);
          } else {
            std::vector<AlignedBuffer> released;
            cache_->Invalidate(object, &released);
            Recycle(&released);
          }
          os.dirty = 0;
          os.dirty_step = 0;
        }
      }
    }
  }
  if (!st.ok()) {
    if (!index_failed)
      FreeExtents(op->rec.extents);  // never referenced: free at once
    st = Annotate(st, where);
  }
  FreeExtents(to_free);
  if (st.ok() && cache_ && !op->write_back && op->lease.use_count() == 1) {
    // Nobody else can see this buffer any more: it moves into the DRAM tier
    // as the version just written (no copy), unless refused; a
    // transaction's is clean there too (its extents are written).
    std::vector<AlignedBuffer> released;
    cache_->Offer(object, op->version, &op->lease->buf_, /*dirty=*/false,
                  &released);
    Recycle(&released);
  }
  op->lease.reset();
  {
    // Before the promise: a caller woken by it may Restore at once.
    MutexLock l(&mu_);
    --commits_in_flight_;
    if (op->txn) TransactionCommitDone();
  }
  op->promise.set_value(st);
}

absl::Status ObjectStore::ApplyRefChanges(MetaIndex::Batch* b,
                                          const std::map<VKey, int>& dec,
                                          bool free_now, bool sync,
                                          std::vector<ExtentRef>* to_free,
                                          bool maintenance) {
  for (auto& [k, n] : dec) {
    auto it = versions_.find(k);
    if (free_now && it != versions_.end() && it->second.refs == n &&
        !it->second.deleted)
      b->DeleteVersion(k.first, k.second);
  }
  {
    TraceSpan span(sync ? "index write (synced)" : "index write", "store",
                   "index");
    MLPO_RETURN_IF_ERROR(meta_->Apply(b, sync, maintenance));
  }
  for (auto& [k, n] : dec) {
    auto it = versions_.find(k);
    if (it == versions_.end()) continue;
    it->second.refs -= n;
    if (it->second.refs > 0 || !free_now) continue;
    it->second.deleted = true;
    if (it->second.pins > 0) continue;  // the last Unpin frees it
    std::vector<ExtentRef> all = it->second.rec.AllExtents();
    to_free->insert(to_free->end(), all.begin(), all.end());
    versions_.erase(it);
  }
  return absl::OkStatus();
}

void ObjectStore::Unpin(const VKey& k) {
  std::vector<ExtentRef> free;
  {
    MutexLock l(&mu_);
    auto it = versions_.find(k);
    if (it == versions_.end()) {
      // A transaction's version (dropped by its abort: freed here).
      it = txn_versions_.find(k);
      if (it == txn_versions_.end()) return;
      if (--it->second.pins > 0 || !it->second.deleted) return;
      free = it->second.rec.AllExtents();
      txn_versions_.erase(it);
    } else {
      if (--it->second.pins > 0 || it->second.refs > 0 ||
          !it->second.deleted)
        return;
      free = it->second.rec.AllExtents();
      versions_.erase(it);
    }
  }
  FreeExtents(free);
}

void ObjectStore::FreeExtents(const std::vector<ExtentRef>& extents) {
  for (const ExtentRef& e : extents) {
    absl::Status s = paths_[e.path]->Free({e.offset, e.length});
    if (!s.ok()) std::fprintf(stderr, "mlpo: %s\n", std::string(s.message()).c_str());
  }
}

}  // namespace mlpo
