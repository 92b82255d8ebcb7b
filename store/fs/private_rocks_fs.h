// The index's files private to their owner: RocksDB creates its files with
// 0666 & ~umask (0644 under the usual umask), where every other file of a
// store is 0600. This rocksdb::FileSystem wrapper sets 0600 on each file
// RocksDB creates, whatever the umask. Also the info log the index writes,
// which never takes the process down when its disk is full.
//
// Layer store/fs: may include base/ and store/io.
#ifndef MLPO_STORE_FS_PRIVATE_ROCKS_FS_H_
#define MLPO_STORE_FS_PRIVATE_ROCKS_FS_H_

#include <memory>
#include <string>

#include "rocksdb/env.h"
#include "rocksdb/file_system.h"

namespace mlpo {

// `base` (nullptr: rocksdb::FileSystem::Default()) with every file it
// creates made 0600.
std::shared_ptr<rocksdb::FileSystem> NewPrivateRocksFileSystem(
    std::shared_ptr<rocksdb::FileSystem> base = nullptr);

// One process-wide Env over NewPrivateRocksFileSystem().
rocksdb::Env* PrivateRocksEnv();

// RocksDB's info log, written with plain appends to `file` (0600) that
// ignore every error. RocksDB's own log writer, after one failed append
// (ENOSPC), trips an assertion on the next one and aborts the process
// (librocksdb 7.8 is built with assertions); a full disk under the index
// then killed every command that opened it. The file is cut back to empty
// when it passes `max_bytes`. An empty `file` writes nothing.
std::shared_ptr<rocksdb::Logger> NewIndexLogger(const std::string& file,
                                                size_t max_bytes = 1 << 20);

}  // namespace mlpo

#endif  // MLPO_STORE_FS_PRIVATE_ROCKS_FS_H_
