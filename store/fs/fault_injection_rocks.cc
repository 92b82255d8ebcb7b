#include "store/fs/fault_injection_rocks.h"

#include <filesystem>
#include <memory>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "rocksdb/file_system.h"
#include "store/fs/fault_injection_fs.h"
#include "store/fs/file_util.h"
#include "store/fs/private_rocks_fs.h"

namespace mlpo {
namespace fs = std::filesystem;
namespace {

rocksdb::IOStatus ToIo(const absl::Status& s) {
  if (s.ok()) return rocksdb::IOStatus::OK();
  if (absl::IsResourceExhausted(s))
    return rocksdb::IOStatus::NoSpace(std::string(s.message()));
  return rocksdb::IOStatus::IOError(std::string(s.message()));
}

using Op = FaultInjectionFileSystem::Op;

// RocksDB's files through the same bookkeeping: appends can fail, syncs can
// fail and record what is durable, renames and directory syncs are tracked.
class RocksFile final : public rocksdb::FSWritableFileOwnerWrapper {
 public:
  RocksFile(std::unique_ptr<rocksdb::FSWritableFile> t, std::string path,
            FaultInjectionFileSystem* owner)
      : FSWritableFileOwnerWrapper(std::move(t)),
        path_(std::move(path)),
        owner_(owner) {}
  rocksdb::IOStatus Append(const rocksdb::Slice& d, const rocksdb::IOOptions& o,
                           rocksdb::IODebugContext* g) override {
    auto s = ToIo(owner_->Check(Op::kWriteFile, path_));
    return s.ok() ? target()->Append(d, o, g) : s;
  }
  rocksdb::IOStatus Append(const rocksdb::Slice& d, const rocksdb::IOOptions& o,
                           const rocksdb::DataVerificationInfo& v,
                           rocksdb::IODebugContext* g) override {
    auto s = ToIo(owner_->Check(Op::kWriteFile, path_));
    return s.ok() ? target()->Append(d, o, v, g) : s;
  }
  rocksdb::IOStatus Sync(const rocksdb::IOOptions& o,
                         rocksdb::IODebugContext* g) override {
    return Synced(target()->Sync(o, g));
  }
  rocksdb::IOStatus Fsync(const rocksdb::IOOptions& o,
                          rocksdb::IODebugContext* g) override {
    return Synced(target()->Fsync(o, g));
  }
  rocksdb::IOStatus RangeSync(uint64_t, uint64_t, const rocksdb::IOOptions&,
                              rocksdb::IODebugContext*) override {
    return rocksdb::IOStatus::OK();  // not a durability point
  }

 private:
  rocksdb::IOStatus Synced(rocksdb::IOStatus s) {
    if (!s.ok()) return s;
    s = ToIo(owner_->Check(Op::kSync, path_));
    if (!s.ok()) return s;
    // Durable: everything appended so far (flushed by the sync above).
    owner_->Snapshot(path_);
    return s;
  }
  std::string path_;
  FaultInjectionFileSystem* owner_;
};

class RocksDir final : public rocksdb::FSDirectoryWrapper {
 public:
  RocksDir(std::unique_ptr<rocksdb::FSDirectory> t, std::string dir,
           FaultInjectionFileSystem* owner)
      : FSDirectoryWrapper(std::move(t)), dir_(std::move(dir)), owner_(owner) {}
  rocksdb::IOStatus Fsync(const rocksdb::IOOptions& o,
                          rocksdb::IODebugContext* g) override {
    auto s = ToIo(owner_->Check(Op::kSyncDir));
    if (s.ok()) s = FSDirectoryWrapper::Fsync(o, g);
    if (s.ok()) owner_->DirSynced(dir_);
    return s;
  }
  rocksdb::IOStatus FsyncWithDirOptions(
      const rocksdb::IOOptions& o, rocksdb::IODebugContext* g,
      const rocksdb::DirFsyncOptions& d) override {
    auto s = ToIo(owner_->Check(Op::kSyncDir));
    if (s.ok()) s = FSDirectoryWrapper::FsyncWithDirOptions(o, g, d);
    if (s.ok()) owner_->DirSynced(dir_);
    return s;
  }

 private:
  std::string dir_;
  FaultInjectionFileSystem* owner_;
};

class RocksFs final : public rocksdb::FileSystemWrapper {
 public:
  explicit RocksFs(FaultInjectionFileSystem* owner)
      : FileSystemWrapper(NewPrivateRocksFileSystem()), owner_(owner) {}
  const char* Name() const override { return "MlpoFaultInjectionFS"; }

  rocksdb::IOStatus NewWritableFile(const std::string& f,
                                    const rocksdb::FileOptions& o,
                                    std::unique_ptr<rocksdb::FSWritableFile>* r,
                                    rocksdb::IODebugContext* g) override {
    return Tracked(f, r, [&](std::unique_ptr<rocksdb::FSWritableFile>* t) {
      return target()->NewWritableFile(f, o, t, g);
    });
  }
  rocksdb::IOStatus ReopenWritableFile(
      const std::string& f, const rocksdb::FileOptions& o,
      std::unique_ptr<rocksdb::FSWritableFile>* r,
      rocksdb::IODebugContext* g) override {
    return Tracked(f, r, [&](std::unique_ptr<rocksdb::FSWritableFile>* t) {
      return target()->ReopenWritableFile(f, o, t, g);
    });
  }
  rocksdb::IOStatus ReuseWritableFile(const std::string&, const std::string&,
                                      const rocksdb::FileOptions&,
                                      std::unique_ptr<rocksdb::FSWritableFile>*,
                                      rocksdb::IODebugContext*) override {
    return rocksdb::IOStatus::NotSupported("reuse of WAL files");
  }
  rocksdb::IOStatus NewDirectory(const std::string& name,
                                 const rocksdb::IOOptions& io,
                                 std::unique_ptr<rocksdb::FSDirectory>* r,
                                 rocksdb::IODebugContext* g) override {
    std::unique_ptr<rocksdb::FSDirectory> t;
    auto s = target()->NewDirectory(name, io, &t, g);
    if (!s.ok()) return s;
    *r = std::make_unique<RocksDir>(std::move(t), AbsolutePath(name), owner_);
    return s;
  }
  rocksdb::IOStatus RenameFile(const std::string& src, const std::string& dst,
                               const rocksdb::IOOptions& io,
                               rocksdb::IODebugContext* g) override {
    auto s = ToIo(owner_->Check(Op::kRename));
    if (s.ok()) owner_->BeforeRename(AbsolutePath(dst));
    if (s.ok()) s = target()->RenameFile(src, dst, io, g);
    if (s.ok()) owner_->Renamed(AbsolutePath(src), AbsolutePath(dst));
    return s;
  }
  rocksdb::IOStatus DeleteFile(const std::string& f,
                               const rocksdb::IOOptions& io,
                               rocksdb::IODebugContext* g) override {
    auto s = ToIo(owner_->Check(Op::kUnlink, f));
    if (!s.ok()) return s;
    owner_->BeforeDelete(AbsolutePath(f));
    s = target()->DeleteFile(f, io, g);
    if (s.ok()) owner_->Deleted(AbsolutePath(f));
    return s;
  }

 private:
  // Opens a writable file through `open` and wraps it so that its appends
  // and syncs go through the owner's bookkeeping.
  template <typename Open>
  rocksdb::IOStatus Tracked(const std::string& f,
                            std::unique_ptr<rocksdb::FSWritableFile>* r,
                            Open open) {
    auto s = ToIo(owner_->Check(Op::kOpen));
    if (!s.ok()) return s;
    std::error_code ec;
    bool existed = fs::exists(f, ec);
    std::unique_ptr<rocksdb::FSWritableFile> t;
    s = open(&t);
    if (!s.ok()) return s;
    owner_->Track(AbsolutePath(f), !existed);
    *r = std::make_unique<RocksFile>(std::move(t), AbsolutePath(f), owner_);
    return s;
  }

  FaultInjectionFileSystem* owner_;
};

}  // namespace

std::unique_ptr<rocksdb::Env> NewFaultInjectionRocksEnv(
    FaultInjectionFileSystem* owner) {
  return rocksdb::NewCompositeEnv(std::make_shared<RocksFs>(owner));
}

}  // namespace mlpo
