// RocksDB's files through FaultInjectionFileSystem's bookkeeping: the
// rocksdb::FileSystem wrapper behind its RocksEnv(). Appends and syncs of
// RocksDB's files can fail and record what is durable; creations, renames,
// deletions and directory syncs are tracked, so a simulated power cut
// loses what RocksDB had not made durable, as it would lose the store's
// own files.
//
// Layer store/fs: may include base/ and store/io.
#ifndef MLPO_STORE_FS_FAULT_INJECTION_ROCKS_H_
#define MLPO_STORE_FS_FAULT_INJECTION_ROCKS_H_

#include <memory>

#include "rocksdb/env.h"

namespace mlpo {

class FaultInjectionFileSystem;

// An Env whose file system reports to `owner` (which must outlive it).
std::unique_ptr<rocksdb::Env> NewFaultInjectionRocksEnv(
    FaultInjectionFileSystem* owner);

}  // namespace mlpo

#endif  // MLPO_STORE_FS_FAULT_INJECTION_ROCKS_H_
