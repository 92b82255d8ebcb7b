#include "store/fs/private_rocks_fs.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <mutex>

#include "store/fs/file_util.h"

namespace mlpo {
namespace {

class PrivateFs final : public rocksdb::FileSystemWrapper {
 public:
  explicit PrivateFs(std::shared_ptr<rocksdb::FileSystem> base)
      : FileSystemWrapper(std::move(base)) {}
  const char* Name() const override { return "MlpoPrivateFS"; }

  rocksdb::IOStatus NewWritableFile(const std::string& f,
                                    const rocksdb::FileOptions& o,
                                    std::unique_ptr<rocksdb::FSWritableFile>* r,
                                    rocksdb::IODebugContext* g) override {
    return Private(f, target()->NewWritableFile(f, o, r, g));
  }
  rocksdb::IOStatus ReopenWritableFile(
      const std::string& f, const rocksdb::FileOptions& o,
      std::unique_ptr<rocksdb::FSWritableFile>* r,
      rocksdb::IODebugContext* g) override {
    return Private(f, target()->ReopenWritableFile(f, o, r, g));
  }
  rocksdb::IOStatus ReuseWritableFile(
      const std::string& f, const std::string& old,
      const rocksdb::FileOptions& o,
      std::unique_ptr<rocksdb::FSWritableFile>* r,
      rocksdb::IODebugContext* g) override {
    return Private(f, target()->ReuseWritableFile(f, old, o, r, g));
  }
  rocksdb::IOStatus NewRandomRWFile(const std::string& f,
                                    const rocksdb::FileOptions& o,
                                    std::unique_ptr<rocksdb::FSRandomRWFile>* r,
                                    rocksdb::IODebugContext* g) override {
    return Private(f, target()->NewRandomRWFile(f, o, r, g));
  }

  rocksdb::IOStatus LockFile(const std::string& f, const rocksdb::IOOptions& o,
                             rocksdb::FileLock** l,
                             rocksdb::IODebugContext* g) override {
    return Private(f, target()->LockFile(f, o, l, g));
  }

 private:
  // The file exists once the open succeeded; nothing was written to it yet.
  static rocksdb::IOStatus Private(const std::string& f, rocksdb::IOStatus s) {
    if (s.ok() && ::chmod(f.c_str(), kPrivateFileMode) != 0 && errno != ENOENT)
      return rocksdb::IOStatus::IOError("chmod 0600 " + f,
                                        std::strerror(errno));
    return s;
  }
};

class IndexLogger final : public rocksdb::Logger {
 public:
  IndexLogger(const std::string& file, size_t max_bytes)
      : rocksdb::Logger(rocksdb::InfoLogLevel::WARN_LEVEL),
        max_bytes_(max_bytes) {
    if (file.empty()) return;
    fd_ = ::open(file.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC,
                 kPrivateFileMode);
    if (fd_ >= 0) ::fchmod(fd_, kPrivateFileMode);  // an older 0644 log
  }
  ~IndexLogger() override {
    if (fd_ >= 0) ::close(fd_);
  }
  using rocksdb::Logger::Logv;
  void Logv(const char* format, va_list ap) override {
    if (fd_ < 0) return;
    char line[1024];
    std::time_t now = std::time(nullptr);
    std::tm tm{};
    ::gmtime_r(&now, &tm);
    size_t n = std::strftime(line, sizeof line, "%Y-%m-%dT%H:%M:%SZ ", &tm);
    int m = std::vsnprintf(line + n, sizeof line - n - 1, format, ap);
    if (m < 0) return;
    n = std::min(sizeof line - 2, n + static_cast<size_t>(m));
    line[n++] = '\n';
    std::lock_guard<std::mutex> l(mu_);
    struct stat st;
    if (::fstat(fd_, &st) == 0 && static_cast<size_t>(st.st_size) > max_bytes_)
      (void)!::ftruncate(fd_, 0);
    (void)!::write(fd_, line, n);  // a full disk loses the line, nothing else
  }

 private:
  const size_t max_bytes_;
  int fd_ = -1;
  std::mutex mu_;
};

}  // namespace

std::shared_ptr<rocksdb::FileSystem> NewPrivateRocksFileSystem(
    std::shared_ptr<rocksdb::FileSystem> base) {
  if (!base) base = rocksdb::FileSystem::Default();
  return std::make_shared<PrivateFs>(std::move(base));
}

rocksdb::Env* PrivateRocksEnv() {
  static rocksdb::Env* env =
      rocksdb::NewCompositeEnv(NewPrivateRocksFileSystem()).release();
  return env;
}

std::shared_ptr<rocksdb::Logger> NewIndexLogger(const std::string& file,
                                                size_t max_bytes) {
  return std::make_shared<IndexLogger>(file, max_bytes);
}

}  // namespace mlpo
