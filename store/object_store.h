// ObjectStore: one rank's versioned, striped, checksummed object store.
//
// What a training step uses (the data plane): Open, Declare, Checkout,
// Commit, Blank/Return, DeclareAccessOrder, Tag, Restore and WriteBack; the
// placement they stripe by is placement() (store/placement/placement.h).
// Maintenance is not here: store/admin/ holds it as functions over two
// narrow interfaces this class implements, StoreView (store/store_view.h:
// reads) and StoreMaintenance (store/store_maintenance.h: a replica's
// extents written and recorded, unreferenced versions deleted): Verify,
// CheckExtentMap, Gc, CopyTagTo, Salvage, and, on a store that is not
// open, RepairIndex/Recover and Relocate. What stays is what changes the
// lineage: DropTag, DropHeads (salvage's) and BackupIndex. Read-only
// inspection: List, Tags, GetVersion, ReadVersion, Stats, PathTraffic.
//
// Invariants (docs/design.md "The store"):
//  1. Copy-on-write: a commit writes new extents, then one RocksDB WriteBatch
//     moves the head. A crash at any instant leaves every committed version
//     readable.
//  2. Every extent carries an xxh3-64; every read verifies it. A mismatch is
//     DataLoss naming object, version, path, file and offset.
//  3. Free space is derived: on open, each path's allocator is rebuilt from
//     the extents that heads and tags reference; crash orphans become free.
//  4. Tags record versions; they copy no data.
//  6. One writer: an flock in the metadata directory; a second opener gets
//     FailedPrecondition naming the holder's pid.
//  7. Errors leave the last committed state intact.
//
// Thread-safety: all methods are thread-safe. Futures complete on internal
// threads; a lease's buffer stays valid while any copy of the lease lives.
#ifndef MLPO_STORE_OBJECT_STORE_H_
#define MLPO_STORE_OBJECT_STORE_H_

#include <atomic>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "base/mutex.h"
#include "store/buffer_pool.h"
#include "store/cache/object_cache.h"
#include "store/fs/file_system.h"
#include "store/meta/layout.h"
#include "store/meta/meta_index.h"
#include "store/path/storage_path.h"
#include "store/placement/placement.h"
#include "store/store_files.h"
#include "store/store_options.h"
#include "store/store_maintenance.h"
#include "store/store_view.h"
#include "base/work_queue.h"

namespace mlpo {

class ObjectStore;
struct StoreSurvey;  // what of a store exists on disk (object_store_open.cc)

// Attribute holding `mlpo profile --store`'s figures: a JSON array, one
// {"path", "read_bps", "write_bps", "mixed_bps"} per path in order.
inline constexpr char kBandwidthAttribute[] = "bandwidth";

// Attribute naming the stores this one is a copy of: their identities,
// oldest first, separated by spaces. `mlpo relocate` of a copy (`cp -a`)
// appends the original's, so a state dict the original wrote still loads
// into the copy where the copy holds the same checkpoint.
inline constexpr char kCopiedFromAttribute[] = "copied_from";

// Attribute the PyTorch adapter's keep_checkpoints keeps: the automatic
// tags ("step-<t>", "step-<t>.<k>") state_dict() handed out last, as a JSON
// array. Where it is set, older tags of that form are dropped as new ones
// are taken, so `mlpo tag` refuses such names there.
inline constexpr char kCheckpointOrderAttribute[] = "checkpoint_order";

// Where a checkout lent a dirty version's only copy returns it when the
// lease is dropped without a commit (ObjectCache::PutBack); detached when
// the store closes.
class DirtyHome {
 public:
  explicit DirtyHome(ObjectCache* cache) : cache_(cache) {}
  bool PutBack(const std::string& object, uint64_t version,
               AlignedBuffer* buf) {
    MutexLock l(&mu_);
    return cache_ != nullptr && cache_->PutBack(object, version, buf);
  }
  void Detach() {
    MutexLock l(&mu_);
    cache_ = nullptr;
  }

 private:
  Mutex mu_;
  ObjectCache* cache_ ABSL_GUARDED_BY(mu_);
};

// A checked-out object: its blob in an aligned host buffer, and the version
// it holds (0 and is_new() for an object never committed) with the step that
// version was committed at.
class CheckoutLease {
 public:
  ~CheckoutLease() {
    // A lent dirty version dropped without a commit goes back unchanged.
    if (home_ && buf_.data()) home_->PutBack(object_, version_, &buf_);
    if (pool_) pool_->Put(std::move(buf_));
  }
  const std::string& object() const { return object_; }
  // The store-wide sequence number of the version read (never reused).
  uint64_t version() const { return version_; }
  // The caller's step the version was committed at (0 for a new object).
  uint64_t step() const { return step_; }
  bool is_new() const { return is_new_; }
  const ObjectLayout& layout() const { return layout_; }
  char* data() { return buf_.data(); }
  const char* data() const { return buf_.data(); }
  size_t size() const { return layout_.total_bytes(); }
  // Start of a section, or nullptr when the layout has no such section.
  void* SectionData(absl::string_view name);
  template <typename T>
  T* Section(absl::string_view name) {
    return static_cast<T*>(SectionData(name));
  }

 private:
  friend class ObjectStore;
  std::string object_;
  uint64_t version_ = 0;
  uint64_t step_ = 0;
  bool is_new_ = true;
  ObjectLayout layout_;
  AlignedBuffer buf_;
  std::shared_ptr<BufferPool> pool_;  // where buf_ returns
  // Set when buf_ is a dirty version lent by the DRAM tier; a commit
  // clears it (the buffer is the commit's then, changed or not).
  std::shared_ptr<DirtyHome> home_;
};
using Lease = std::shared_ptr<CheckoutLease>;



class ObjectStore final : public StoreMaintenance {
 public:
  static absl::StatusOr<std::unique_ptr<ObjectStore>> Open(
      const StoreOptions& options);
  ~ObjectStore();  // waits for commits in flight

  // Declares an object's layout. Idempotent; a different layout for an
  // existing object is FailedPrecondition.
  absl::Status Declare(const std::string& object, const ObjectLayout& layout);

  // Reads the newest version (striped reads from every path, checksums
  // verified), or the initializer's blob for a new object. With the DRAM
  // tier on, a version kept since its commit is handed over with no I/O.
  // Inside a transaction the newest version is its pending one, once
  // committed. `for_update`: the caller will commit a newer version
  // outside a transaction: a version only the DRAM tier holds (durability
  // "tag") is lent, not copied; until the lease is committed or dropped no
  // other checkout or write-back can read that object
  // (FailedPrecondition). A failed commit of such a lease loses that
  // version (the object stays at its last written one: restore a tag).
  // While a transaction is open or ending nothing is lent: the
  // transaction keeps the version its commit replaces.
  std::future<absl::StatusOr<Lease>> Checkout(const std::string& object,
                                              bool for_update = false);
  // A checkout given back unchanged (nothing to commit): when it still is
  // the object's clean head, its buffer goes back to the DRAM tier (no
  // copy), as a commit's would, so that looking does not cost a re-read.
  void Return(Lease lease);
  // A lease for writing a whole new version without reading the old one
  // (contents unspecified). NotFound for an undeclared object.
  absl::StatusOr<Lease> Blank(const std::string& object);
  // Writes `lease`'s blob as a new version made at `step` (not below the
  // head's step; equal rewrites a step, e.g. edited masters) to new extents, then moves the head. The version gets the
  // store's next sequence number, never used before (not even by a version
  // a restore left behind), so a commit after a restore starts a new
  // lineage beside the old one and every tagged record stays as it was.
  // On error the previous head stays.
  std::future<absl::Status> Commit(Lease lease, uint64_t step);
  // Writes every version the DRAM tier holds dirty (durability "tag") to
  // the paths and moves their heads, all in one index write (a
  // transaction of its own); Tag and close do it first. A failure leaves
  // the dirty versions in DRAM, untouched. FailedPrecondition inside a
  // transaction.
  absl::Status WriteBack();

  // Transactions: an optimizer step is one. Every Commit made between
  // BeginTransaction and EndTransaction writes its extents (synced under
  // durability "step") but moves no head: checkouts and NewestVersion see
  // the new version at once, the index does not. EndTransaction writes one
  // RocksDB batch that records every new version and moves every head
  // together once the last of its commits has landed (its future says
  // when: the caller may go on meanwhile), then frees the versions the
  // old heads alone held. Until then every old version stays, so a crash
  // at any instant leaves the store at the state before the transaction
  // or after it, never between; the price is disk space for a second
  // version of every object the transaction writes (docs/design.md
  // "Steps as transactions"). A commit that fails fails the transaction:
  // EndTransaction's future reports it and nothing of it is applied.
  // Under durability "tag" the dirty versions the transaction replaces in
  // the DRAM tier are kept aside (outside its budget) until it ends.
  // AbortTransaction waits for the commits in flight and drops every
  // version the transaction made; the heads, the dirty versions and the
  // DRAM tier are as before it. One transaction at a time: Begin waits
  // for an ended one's batch. Tag, Restore, ResetHeads, DropHeads and
  // WriteBack are refused while one is open (FailedPrecondition). Closing
  // the store aborts an open one and waits for an ended one.
  absl::Status BeginTransaction();
  std::future<absl::Status> EndTransaction();
  absl::Status AbortTransaction();
  bool in_transaction() const {
    MutexLock l(&mu_);
    return txn_.open;
  }

  // The coming checkouts, in order (the update pipeline declares this step's
  // and the next step's): the DRAM tier keeps the blobs used soonest. A
  // no-op when the tier is off.
  void DeclareAccessOrder(const std::vector<std::string>& objects);
  // The object's newest version (a dirty one in the DRAM tier, else the
  // head); 0 when it has none or is not declared.
  uint64_t NewestVersion(const std::string& object) const;
  // The DRAM tier holds the object's newest version (a checkout is a hit).
  bool Resident(const std::string& object) const;

  absl::Status Tag(const std::string& name);
  // Moves every head back to the tag's versions, all or nothing: every
  // extent of the tag is read and checked first (a replica stands in for a
  // bad first copy); a failure changes nothing and names what is bad.
  // Versions only the old heads referenced are freed; versions of other
  // tags stay. The next commit starts a new lineage.
  absl::Status Restore(const std::string& name);
  // Drops every head (a new lineage from nothing: the next checkout of each
  // object gets the initializer's blob). Versions tags hold stay; versions
  // only the heads held are freed. For a fresh run in an existing store.
  absl::Status ResetHeads();
  absl::Status DropTag(const std::string& name);
  // Drops the heads of `objects` (each is left without a committed version,
  // as before its first commit; its records stay until `Gc`) in one durable
  // index write. Salvage drops the heads that no longer read back with it.
  absl::Status DropHeads(const std::set<std::string>& objects);
  // Copies the index into <store dir>/meta-backup on every path (after each
  // tag and drop-tag), so that `Recover` can rebuild a lost or damaged index
  // with every tag. A failure is reported on stderr; the tag stands.
  void BackupIndex() override;
  // Syncs and seals the index and writes the seal's copy (INDEX-SEAL) on
  // every path: after each backup and at a clean close. Best effort (a
  // failure is reported on stderr).
  void WriteSealCopies();
  std::map<std::string, std::map<std::string, uint64_t>> Tags() const override;
  // The options in force: meta_dir filled in, and each path's segment_bytes
  // the store's own.
  const StoreOptions& options() const override { return options_; }
  size_t num_paths() const override { return paths_.size(); }

  // Small named values kept in the index with the store (e.g. the PyTorch
  // adapter's parameter manifest). Set is durable when it returns; Get of an
  // unknown key is NotFound.
  absl::Status SetAttribute(const std::string& key, const std::string& value);
  absl::StatusOr<std::string> GetAttribute(
      const std::string& key) const override;

  // Pins the buffer pool's buffers (those idle now and every one made from
  // now on) with `r`, a GPU backend: lease buffers then serve O_DIRECT I/O
  // and device copies with no bounce copy. nullptr unpins them all. Not
  // owned; `r` must outlive the store or a call with nullptr.
  absl::Status RegisterHostMemory(HostRegistrar* r) {
    return r ? pool_->SetRegistrar(r) : (pool_->ClearRegistrar(),
                                         absl::OkStatus());
  }
  uint64_t pinned_bytes() const { return pool_->pinned_bytes(); }
  // A buffer as the store's checkouts get them (from the pool; pinned when
  // a registrar is set). Give it back with ReturnBuffer.
  AlignedBuffer BorrowBuffer(size_t size) { return pool_->Get(size); }
  void ReturnBuffer(AlignedBuffer b) { pool_->Put(std::move(b)); }

  StoreStats Stats() const override;
  // The DRAM tier's counters alone (cheap; all zero when it is off).
  CacheStats cache_stats() const {
    return cache_ ? cache_->stats() : CacheStats{};
  }
  std::vector<ObjectInfo> List() const override;
  absl::StatusOr<VersionRecord> GetVersion(const std::string& object,
                                           uint64_t version) const override;
  // Reads a version's blob (head when version == 0), verifying checksums.
  absl::StatusOr<Lease> ReadVersion(const std::string& object,
                                    uint64_t version);

  // The store's identity (recorded in its index and descriptors).
  const std::string& store_uuid() const override { return store_uuid_; }
  StoragePath* path(size_t i) { return paths_[i].get(); }
  // Bytes each path has read and written since open, and its busy time (in
  // path order): what the update pipeline reports per step.
  std::vector<PathCounters> PathTraffic() const;
  // Where new versions go: the fractions in use (the options' when any is
  // set, else the mixed bandwidths `mlpo profile --store` recorded, else
  // equal), objects pinned to their own (paper mode), and the paths taken
  // out after a failure (degraded mode: a path whose write or sync failed
  // takes no new versions until the store is reopened; the commit that hit
  // the failure is written again on the others, with a warning on stderr).
  Placement* placement() const { return placement_.get(); }
  // Adaptive placement, once a step: fractions f_k proportional to each
  // path's observed rate (UpdateBandwidthEstimates), water-filled over the
  // paths' free capacity for one step's bytes (every declared object).
  // New versions follow at once; nothing already written moves. Paths that
  // moved nothing yet keep the fractions as they are. Returns the fractions
  // now in use.
  std::vector<double> AdaptPlacement();
  // Each path's observed transfer rate (bytes moved / busy time) over the
  // interval since the last call, exponentially weighted (alpha 0.5, so a
  // path whose speed changes shows within a few steps) with the earlier
  // intervals; call once a step (AdaptPlacement does). 0 for a path that moved nothing
  // yet.
  std::vector<double> UpdateBandwidthEstimates();

 private:
  // StoreView: what store/admin/ reads through (Verify, CheckExtentMap,
  // Salvage), reached through a StoreView& only.
  FileSystem* fs() const override {
    return options_.fs ? options_.fs : DefaultFileSystem();
  }
  const StoragePath& path_at(size_t i) const override { return *paths_[i]; }
  std::vector<RecordOf> AllVersions() const override;
  absl::StatusOr<std::vector<RecordOf>> PinVersions(const std::string& tag,
                                                    bool and_tags) override;
  void UnpinVersion(const std::string& object, uint64_t version) override;
  void ReadCopy(const std::string& object, const VersionRecord& rec,
                char* buf, std::vector<BadExtent>* bad) override;
  BadExtent DescribeExtent(const std::string& object, uint64_t version,
                           const ExtentRef& e, const std::string& error,
                           absl::StatusCode code) const override;
  // Restore decides with it too.
  std::map<VersionKey, std::vector<BadExtent>> CheckVersions(
      const std::set<VersionKey>& keys,
      std::function<void(uint64_t, uint64_t)> progress) override;
  // StoreMaintenance: the writes store/admin/'s gc and tag copy make
  // (object_store_maintenance.cc), reached through a StoreMaintenance& only.
  absl::Status CheckWritable(absl::string_view what) const override;
  bool PathDegraded(size_t i) const override {
    return placement_->degraded(i);
  }
  absl::StatusOr<std::vector<ExtentRef>> WriteUnrecorded(
      size_t path, const char* buf, uint64_t bytes) override;
  absl::Status SyncPath(size_t path) override;
  void FreeUnrecorded(const std::vector<ExtentRef>& extents) override {
    FreeExtents(extents);
  }
  absl::StatusOr<uint64_t> RecordReplicas(
      std::vector<ReplicaCopy> copies) override;
  absl::StatusOr<uint64_t> DeleteVersions(
      const std::set<VersionKey>& versions) override;


  struct VersionState {
    VersionRecord rec;
    int refs = 0;  // head + tags
    int pins = 0;  // checkouts reading it
    bool deleted = false;  // record deleted from the index; free when unpinned
  };
  struct ObjectState {
    ObjectLayout layout;
    bool has_head = false;
    uint64_t head = 0;
    uint64_t head_step = 0;
    // Durability "tag" with the DRAM tier: a committed version newer than
    // `head` that lives only in the cache (dirty) until written back.
    uint64_t dirty = 0;
    uint64_t dirty_step = 0;
    // The open (or ending) transaction's write-through version of the
    // object (txn_versions_), the head once the transaction ends.
    uint64_t pending = 0;
    uint64_t pending_step = 0;
  };
  // The transaction open or ending (BeginTransaction).
  struct Transaction {
    bool open = false;    // commits join it
    bool ending = false;  // EndTransaction called: the batch follows
    int inflight = 0;     // its commits not finalized yet
    absl::Status error;   // its first failed commit
    // Each object it committed: the dirty version it had before (restored
    // by an abort), with that version's buffer taken out of the DRAM tier
    // once a commit of the transaction replaced it there.
    struct Before {
      uint64_t dirty = 0, dirty_step = 0;
      std::optional<AlignedBuffer> buf;
    };
    std::map<std::string, Before> before;
    std::shared_ptr<std::promise<absl::Status>> done;
  };
  using VKey = VersionKey;
  struct CommitOp;

  explicit ObjectStore(const StoreOptions& o) : options_(o) {}
  absl::Status OpenImpl();
  absl::Status TagImpl(const std::string& name);
  // Moves every head to `want`'s version (no entry: no head), all at once.
  absl::Status MoveHeads(const std::map<std::string, uint64_t>& want,
                         const std::string& what);
  absl::Status DropTagImpl(const std::string& name);
  // "store N rank R (index DIR)", for messages.
  std::string Where() const { return StoreWhere(options_); }
  // Path identities, store directories and descriptors for a new store.
  absl::Status PreparePaths(const std::string& uuid);
  // The first records of a new index: its identity and its paths.
  absl::Status InitializeIndex(MetaIndex* m, const std::string& uuid);
  absl::Status CheckIndex(const MetaSnapshot& snap, uint64_t seq,
                          const StoreSurvey& survey, bool* empty,
                          const uint64_t* seal_before = nullptr) const;
  // OpenImpl for options_.read_only: beside a writer, never a false alarm.
  absl::Status OpenReadOnly();
  // Opens the paths and builds the in-memory state from the index: each
  // path checked against its record (CheckPath), the paths opened and
  // weighted (OpenPaths), then the records, references, version counter
  // and free space (LoadRecords, mu_ held).
  absl::Status LoadState(const MetaSnapshot& snap);
  // Path i is the one the index records (its identity, mended when only
  // its file is lost; its store directory; its segment size, recorded in
  // *upgrade for a store from before the record).
  absl::Status CheckPath(size_t i, const MetaSnapshot& snap,
                         MetaIndex::Batch* upgrade);
  // Why path i, recorded at `recorded_root`, has no readable identity: a
  // directory gone, an empty one, an unmounted disk, or another store's.
  absl::Status UnidentifiedPathError(size_t i,
                                     const std::string& recorded_root,
                                     const absl::Status& why_not);
  absl::Status OpenPaths(const MetaSnapshot& snap);
  absl::Status LoadRecords(const MetaSnapshot& snap)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A path root whose .mlpo/uuid is gone but whose store directory's
  // descriptor names this store: writes `uuid` (the index's record of the
  // path) back (not when read-only); an error when the descriptor does not
  // prove it.
  absl::Status MendPathIdentity(const std::string& root,
                                const std::string& uuid);
  void FinalizeCommit(std::shared_ptr<CommitOp> op);
  // FinalizeCommit of a commit in a transaction: the version becomes the
  // object's pending one; no index write.
  void FinalizePending(const std::string& object, const VersionRecord& rec,
                       bool write_back, absl::Status* st,
                       std::vector<ExtentRef>* to_free)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A commit of the transaction finished: the batch follows the last one.
  void TransactionCommitDone() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The transaction's one index write (on the finalizer thread), or its
  // abort when a commit failed.
  void FinishTransaction();
  // Durability "step": after a transaction's synced index write, the seal
  // copies in place (WriteSealCopyInPlace) at the index's sequence, so that
  // losing meta/'s log and MLPO-SEAL together is seen at the last step.
  // Best effort, as WriteSealCopies.
  void WriteStepSealCopies();
  std::atomic<uint64_t> seal_copy_turn_{0};
  // Drops every version the transaction made and puts the dirty versions
  // back; the transaction is over.
  void DropTransaction(bool free_extents, std::vector<ExtentRef>* to_free,
                       std::vector<AlignedBuffer>* released)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Waits for an ending transaction's batch; then FailedPrecondition
  // naming `what` while a transaction is open.
  absl::Status CheckNoTransaction(absl::string_view what)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Waits (mu_ not held) until no transaction is ending: its commits'
  // extents are written and its batch is in the index.
  void AwaitEndedTransaction() ABSL_LOCKS_EXCLUDED(mu_);
  // Allocates `op`'s extents (failed paths left out), hashes them and
  // starts their writes; the last completion posts FinalizeCommit.
  absl::Status StartWrites(std::shared_ptr<CommitOp> op);
  // Degraded mode: marks `path` failed after `why` (an I/O error of that
  // path) when another path is healthy, warning once; false when the error
  // is not a path failure or no healthy path is left.
  bool Degrade(int path, const absl::Status& why);
  // Commit; `write_back`: the blob is the dirty version `version` from the
  // DRAM tier, written through (it may equal the dirty version).
  // `number`: the step of a new commit, or the dirty version written back.
  std::future<absl::Status> CommitImpl(Lease lease, uint64_t number,
                                       bool write_back);
  // Writes `b` after adding the deletion of every record whose references
  // all go (when `free_now`), then drops the references in memory and
  // returns in `to_free` the extents to free now that `b` is durable.
  // Without `free_now` unreferenced records stay until Gc().
  // `maintenance`: MetaIndex::Apply's (a remedy may take the reserve).
  absl::Status ApplyRefChanges(MetaIndex::Batch* b,
                               const std::map<VKey, int>& dec, bool free_now,
                               bool sync, std::vector<ExtentRef>* to_free,
                               bool maintenance = false)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Allocates `total` bytes striped by the fractions; a full path's share
  // spills over to the paths with room. ResourceExhausted naming every path
  // when all are full (nothing stays allocated).
  absl::Status AllocateStripes(const std::string& where,
                               const std::string& object, uint64_t total,
                               std::vector<std::vector<Range>>* ranges);
  void Unpin(const VKey& k);
  // Returns buffers the cache let go to the pool.
  void Recycle(std::vector<AlignedBuffer>* released);
  // The cache budget for cache_percent: that share of every declared
  // object's bytes.
  void ResizeCache() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void FreeExtents(const std::vector<ExtentRef>& e);
  absl::Status SyncAllPaths();
  // The one read path: reads `rec`'s extents into `buf` striped over the
  // paths, verifies each on the hashing thread, and calls `done` with every
  // failing extent (empty when all hold). Checkout, ReadVersion and Verify
  // use it.
  void ReadRecord(const std::string& object, const VersionRecord& rec,
                  char* buf, std::function<void(std::vector<BadExtent>)> done);

  StoreOptions options_;
  std::string store_uuid_;
  // Set once the paths are open (OpenPaths), never replaced after.
  std::unique_ptr<Placement> placement_;
  std::vector<std::unique_ptr<StoragePath>> paths_;
  std::shared_ptr<BufferPool> pool_;
  // The DRAM tier; null when off (and always for read-only opens).
  std::unique_ptr<ObjectCache> cache_;
  std::shared_ptr<DirtyHome> dirty_home_;  // with cache_
  std::unique_ptr<MetaIndex> meta_;
  WriterLock lock_;  // held by a writable open

  mutable Mutex mu_;
  std::map<std::string, ObjectState> objects_ ABSL_GUARDED_BY(mu_);
  std::map<VKey, VersionState> versions_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::map<std::string, uint64_t>> tags_
      ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::string> attributes_ ABSL_GUARDED_BY(mu_);
  uint64_t commits_ ABSL_GUARDED_BY(mu_) = 0;
  // The next commit's sequence number: above every version the index ever
  // recorded (persisted as "next_version" with each commit).
  uint64_t next_version_ ABSL_GUARDED_BY(mu_) = 1;
  uint64_t checkouts_ ABSL_GUARDED_BY(mu_) = 0;
  int commits_in_flight_ ABSL_GUARDED_BY(mu_) = 0;
  Transaction txn_ ABSL_GUARDED_BY(mu_);
  // The versions the transaction made (not in the index until it ends).
  std::map<VKey, VersionState> txn_versions_ ABSL_GUARDED_BY(mu_);

  // Hashes extents (commits: hash then submit each write; checkouts: verify
  // each extent read), off the caller's and the I/O threads.
  std::unique_ptr<WorkQueue> hasher_;
  // Syncs paths and writes the index batch of each finished commit.
  std::unique_ptr<WorkQueue> finalizer_;
};

}  // namespace mlpo

#endif  // MLPO_STORE_OBJECT_STORE_H_
