// The store's metadata index in RocksDB. Column families:
//   objects  name                    -> ObjectLayout
//   versions name \0 BE64(version)   -> VersionRecord (big-endian: in order)
//   heads    name                    -> BE64(version)
//   tags     tag \0 name             -> BE64(version)
//   paths    BE32(id)                -> "uuid\troot\tkind\tsegment_bytes"
//   meta     "format"                -> format number
//            "store_uuid"            -> the store's identity
//            "attr/<key>"            -> a user attribute (e.g. the adapter's
//                                       parameter manifest)
//            "next_version"          -> BE64: the next commit's sequence
//                                       number (versions are never reused)
// The whole index is small (a record per object version) and is loaded into
// memory on open; every change is one WriteBatch.
//
// The seal. RocksDB's default WAL recovery stops at the first damaged record
// without an error, and a deleted WAL simply replays nothing: either way the
// index silently rolls back. So every synced batch also records RocksDB's
// sequence number in <dir>/MLPO-SEAL (two checksummed slots written in turn,
// not fsynced: a seal older than the WAL after a power loss only weakens the
// check, a torn slot is ignored). An index that opens behind its seal has
// lost acknowledged writes, and opening it is an error (DataLoss) until
// `mlpo recover` accepts the loss.
//
// Thread-safe (RocksDB is; the seal has its own lock); the store serialises
// writers.
// Layer store/meta: may include base/, store/io (alignment), store/fs and
// store/checksum.h only.
#ifndef MLPO_STORE_META_META_INDEX_H_
#define MLPO_STORE_META_META_INDEX_H_

#include <atomic>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "base/mutex.h"
#include "rocksdb/db.h"
#include "rocksdb/write_batch.h"
#include "store/fs/file_system.h"
#include "store/meta/layout.h"

namespace mlpo {

inline constexpr int kStoreFormat = 1;
inline constexpr char kSealFile[] = "MLPO-SEAL";
// Blocks the index keeps for a full disk: a writable open that fails for
// want of space gives them back and opens, so that `mlpo drop-tag` and
// `mlpo gc` can free space on a disk other files filled to the last byte.
// Taken again by the next writable open with room for them.
inline constexpr char kIndexReserveFile[] = "MLPO-RESERVE";
inline constexpr uint64_t kIndexReserveBytes = 1 << 20;

struct PathRecord {
  std::string uuid, root, kind;
  uint64_t segment_bytes = 0;  // 0: not recorded (stores made before it was)
};

struct MetaSnapshot {
  std::string store_uuid;  // empty: never initialised (or records lost)
  std::map<std::string, ObjectLayout> objects;
  std::map<std::string, uint64_t> heads;
  std::map<std::string, std::map<std::string, uint64_t>> tags;  // tag->obj->v
  std::map<std::pair<std::string, uint64_t>, VersionRecord> versions;
  std::vector<PathRecord> paths;
  std::map<std::string, std::string> attributes;
  uint64_t next_version = 0;  // 0: not recorded (stores made before it)
};

// The newest valid sequence number recorded in <dir>/MLPO-SEAL for `uuid`
// (0 when there is no seal). A seal of another store is FailedPrecondition;
// an empty `uuid` accepts any.
absl::StatusOr<uint64_t> ReadSeal(const std::string& dir, FileSystem* fs,
                                  const std::string& uuid);

// Copies of the seal in each path's store directory, written at every tag
// (and drop-tag, restore), at a clean close and, under durability "step",
// after every step (WriteSealCopyInPlace): the seal in a second place,
// so that losing the index's write-ahead log together with MLPO-SEAL is a
// refused open, not a silent rollback to the last flush.
inline constexpr char kSealCopyFile[] = "INDEX-SEAL";
// The newest sequence the copies in `dirs` record for `uuid` (empty: any
// store); 0 where there is none. Unreadable or damaged copies, and copies of
// another store (a copy given an identity of its own), count as none.
uint64_t ReadSealCopies(const std::vector<std::string>& dirs, FileSystem* fs,
                        const std::string& uuid);
absl::Status WriteSealCopy(const std::string& dir, FileSystem* fs,
                           const std::string& uuid, uint64_t sequence);
// The same copy written in place, into slot `turn % 2` (two slots in turn,
// as MLPO-SEAL): what durability "step" writes after each step's index
// write, so that the copies follow every acknowledged step and a lost
// write-ahead log together with MLPO-SEAL is seen at the step, not only at
// the last tag. Not synced and no rename (a few microseconds): a torn slot
// leaves the other, older one. Refuses a file a hard-linked copy shares.
absl::Status WriteSealCopyInPlace(const std::string& dir, FileSystem* fs,
                                  const std::string& uuid, uint64_t sequence,
                                  uint64_t turn);
// Removes the copies (recover, which changes what the index holds).
void RemoveSealCopies(const std::vector<std::string>& dirs, FileSystem* fs);

// Opens the index copy in `dir` read-only and checks every block's checksum
// (RocksDB's VerifyChecksum) and that its records decode. DataLoss naming
// `dir` when it does not hold.
absl::Status VerifyIndexCopy(const std::string& dir, FileSystem* fs = nullptr);

class MetaIndex {
 public:
  enum class Mode {
    kCreate,    // a new index in an empty directory
    kWrite,     // an existing index, for writing
    kReadOnly,  // RocksDB's read-only mode: no lock, nothing written
    // Beside a writer: RocksDB's secondary instance (every file it needs
    // held open, so the writer's flushes and compactions cannot pull one
    // away mid-read), caught up with the writer once when opened. Its own
    // info log goes to a private temporary directory, removed at close.
    kSecondary,
    kRecover,   // writing, WAL replayed to its last consistent point
  };
  // Opens the index in `dir`. A format other than kStoreFormat is
  // FailedPrecondition.
  // `fs`: where the index's files (RocksDB's, through fs->RocksEnv(), and
  // the seal) go; nullptr = DefaultFileSystem().
  static absl::StatusOr<std::unique_ptr<MetaIndex>> Open(
      const std::string& dir, Mode mode, FileSystem* fs = nullptr);
  ~MetaIndex();

  absl::StatusOr<MetaSnapshot> Load();
  // RocksDB's last sequence number: grows with every write.
  uint64_t sequence() const { return db_->GetLatestSequenceNumber(); }

  class Batch {
   public:
    void PutObject(const std::string& name, const ObjectLayout& l);
    void PutVersion(const std::string& name, const VersionRecord& r);
    void DeleteVersion(const std::string& name, uint64_t version);
    void PutHead(const std::string& name, uint64_t version);
    void DeleteHead(const std::string& name);
    void PutTag(const std::string& tag, const std::string& name, uint64_t v);
    void DeleteTag(const std::string& tag, const std::string& name);
    void PutPath(uint32_t id, const PathRecord& p);
    void PutStoreUuid(const std::string& uuid);
    void PutAttribute(const std::string& key, const std::string& value);
    void PutNextVersion(uint64_t v);
    bool empty() const { return batch_.Count() == 0; }

   private:
    friend class MetaIndex;
    explicit Batch(MetaIndex* m) : m_(m) {}
    MetaIndex* m_;
    rocksdb::WriteBatch batch_;
  };
  Batch NewBatch() { return Batch(this); }
  // One atomic write; `sync` makes it durable before returning and advances
  // the seal (once the store's uuid is known: see SetSealUuid).
  // A failed write poisons the index: RocksDB's state after a failed WAL
  // write or sync is not to be trusted (a later write can trip its
  // assertions and abort the process), so every later Apply, Checkpoint and
  // seal write returns the first error, unchanged in substance, until the
  // store is reopened. What the index held before the failure stays.
  // `maintenance` (drop-tag, restore, gc, salvage: what frees space): on a
  // disk with less free than the reserve, the reserve is given back first,
  // so that the write lands instead of poisoning the index. Training's own
  // writes never take it: it stays for those remedies.
  absl::Status Apply(Batch* b, bool sync, bool maintenance = false);
  // Reads every block of every index file and checks its checksum.
  absl::Status VerifyChecksums();
  // The first failed write's error, or OK.
  absl::Status poisoned() const;
  // Makes every write so far durable (the write-ahead log synced), seals
  // it and returns the sequence sealed.
  absl::StatusOr<uint64_t> SyncAndSeal();
  // The uuid the seal is written for; writes the seal at the current
  // sequence.
  absl::Status SetSealUuid(const std::string& uuid);
  const std::string& dir() const { return dir_; }
  // This open took the reserve's blocks (a full disk).
  bool used_reserve() const { return used_reserve_; }
  // Writes an openable copy of the index (RocksDB's checkpoint) into `dir`,
  // which must not exist.
  absl::Status Checkpoint(const std::string& dir);

 private:
  MetaIndex() = default;
  absl::Status WriteSeal() ABSL_EXCLUSIVE_LOCKS_REQUIRED(seal_mu_);

  std::string dir_;
  std::string secondary_dir_;  // kSecondary: the private log directory
  std::unique_ptr<rocksdb::DB> db_;
  std::vector<rocksdb::ColumnFamilyHandle*> cf_;  // order of kCfNames
  bool read_only_ = false;
  bool used_reserve_ = false;

  mutable Mutex seal_mu_;
  absl::Status poison_ ABSL_GUARDED_BY(seal_mu_);
  // Set once poison_ is: poisoned() checks it without waiting for seal_mu_,
  // which a synced write holds for as long as its sync takes.
  std::atomic<bool> is_poisoned_{false};
  std::string seal_uuid_ ABSL_GUARDED_BY(seal_mu_);
  int seal_fd_ ABSL_GUARDED_BY(seal_mu_) = -1;
  FileSystem* fs_ = nullptr;
  uint64_t seal_writes_ ABSL_GUARDED_BY(seal_mu_) = 0;
};

}  // namespace mlpo

#endif  // MLPO_STORE_META_META_INDEX_H_
