// The store's metadata index in RocksDB. Column families:
//   objects  name                    -> ObjectLayout
//   versions name \0 BE64(version)   -> VersionRecord (big-endian: in order)
//   heads    name                    -> BE64(version)
//   tags     tag \0 name             -> BE64(version)
//   paths    BE32(id)                -> "uuid\troot\tkind"
//   meta     "format"                -> format number
// The whole index is small (a record per object version) and is loaded into
// memory on open; every change is one WriteBatch.
//
// Thread-safe (RocksDB is); the store serialises writers.
#ifndef MLPO_STORE_META_INDEX_H_
#define MLPO_STORE_META_INDEX_H_

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "rocksdb/db.h"
#include "rocksdb/write_batch.h"
#include "store/layout.h"

namespace mlpo {

inline constexpr int kStoreFormat = 1;

struct PathRecord {
  std::string uuid, root, kind;
};

struct MetaSnapshot {
  std::map<std::string, ObjectLayout> objects;
  std::map<std::string, uint64_t> heads;
  std::map<std::string, std::map<std::string, uint64_t>> tags;  // tag->obj->v
  std::map<std::pair<std::string, uint64_t>, VersionRecord> versions;
  std::vector<PathRecord> paths;
};

class MetaIndex {
 public:
  // Opens (creating when `create`) the index in `dir`. A format other than
  // kStoreFormat is FailedPrecondition.
  // `read_only`: RocksDB's read-only mode (no lock; safe beside a writer).
  static absl::StatusOr<std::unique_ptr<MetaIndex>> Open(const std::string& dir,
                                                         bool create,
                                                         bool read_only = false);
  ~MetaIndex();

  absl::StatusOr<MetaSnapshot> Load();

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
    bool empty() const { return batch_.Count() == 0; }

   private:
    friend class MetaIndex;
    explicit Batch(MetaIndex* m) : m_(m) {}
    MetaIndex* m_;
    rocksdb::WriteBatch batch_;
  };
  Batch NewBatch() { return Batch(this); }
  // One atomic write; `sync` makes it durable before returning.
  absl::Status Apply(Batch* b, bool sync);
  const std::string& dir() const { return dir_; }

 private:
  MetaIndex() = default;
  std::string dir_;
  std::unique_ptr<rocksdb::DB> db_;
  std::vector<rocksdb::ColumnFamilyHandle*> cf_;  // order of kCfNames
};

}  // namespace mlpo

#endif  // MLPO_STORE_META_INDEX_H_
