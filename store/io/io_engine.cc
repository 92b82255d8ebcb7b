#include "store/io/io_engine.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <iostream>

#include "absl/strings/str_cat.h"
#include "store/io/io_engine_impl.h"
#include "base/path_errno.h"
#include "base/status_macros.h"

namespace mlpo {

absl::StatusOr<std::unique_ptr<IoEngine>> IoEngine::Create(
    const IoEngineOptions& options) {
  if (options.queue_depth < 1 || options.queue_depth > 4096) {
    return absl::InvalidArgumentError(
        absl::StrCat("io engine '", options.name, "': queue_depth ",
                     options.queue_depth, " outside 1..4096"));
  }
  if (options.max_files < 1) {
    return absl::InvalidArgumentError("io engine: max_files must be >= 1");
  }
  if (options.kind != IoEngineKind::kThreadPool) {
    auto uring = CreateUringEngine(options);
    if (uring.ok() || options.kind == IoEngineKind::kUring) return uring;
    static std::once_flag once;
    std::call_once(once, [&] {
      std::cerr << "mlpo: io_uring unavailable (" << uring.status().message()
                << "); using the pread/pwrite thread pool\n";
    });
  }
  return CreateThreadPoolEngine(options);
}

absl::StatusOr<int> IoEngine::RegisterFile(int fd, std::string name,
                                           bool direct) {
  MutexLock l(&files_mu_);
  int handle = -1;
  for (size_t i = 0; i < files_.size(); ++i) {
    if (!files_[i].in_use) {
      handle = static_cast<int>(i);
      break;
    }
  }
  if (handle < 0) {
    if (files_.size() >= static_cast<size_t>(options_.max_files)) {
      return absl::ResourceExhaustedError(
          absl::StrCat("io engine '", options_.name, "': all ",
                       options_.max_files, " file slots in use; cannot add ",
                       name));
    }
    files_.emplace_back();
    handle = static_cast<int>(files_.size() - 1);
  }
  files_[handle] = FileEntry{fd, std::move(name), direct, true};
  OnFileRegistered(handle, fd);
  return handle;
}

absl::Status IoEngine::UnregisterFile(int handle) {
  MutexLock l(&files_mu_);
  if (handle < 0 || static_cast<size_t>(handle) >= files_.size() ||
      !files_[handle].in_use) {
    return absl::InvalidArgumentError(
        absl::StrCat("io engine '", options_.name, "': bad file handle ",
                     handle));
  }
  files_[handle] = FileEntry{};
  OnFileRegistered(handle, -1);
  return absl::OkStatus();
}

IoEngine::FileEntry IoEngine::FileAt(int handle) const {
  MutexLock l(&files_mu_);
  if (handle < 0 || static_cast<size_t>(handle) >= files_.size()) return {};
  return files_[handle];
}

void IoEngine::Submit(IoRequest req) {
  std::vector<IoRequest> v;
  v.push_back(std::move(req));
  Submit(std::move(v));
}

void IoEngine::Submit(std::vector<IoRequest> reqs) {
  std::vector<IoRequest> ok;
  ok.reserve(reqs.size());
  for (auto& r : reqs) {
    FileEntry f = FileAt(r.file);
    absl::Status bad;
    if (!f.in_use) {
      bad = absl::InvalidArgumentError(absl::StrCat(
          "io engine '", options_.name, "': unknown file handle ", r.file));
    } else if (r.buf == nullptr || r.len == 0) {
      bad = absl::InvalidArgumentError(
          absl::StrCat(f.name, ": empty request at offset ", r.offset));
    } else if (r.len > (size_t{1} << 30)) {
      bad = absl::InvalidArgumentError(absl::StrCat(
          f.name, ": request of ", r.len, " bytes at offset ", r.offset,
          " exceeds the 1 GiB limit per request"));
    } else if (f.direct &&
               (r.offset % kIoAlignment != 0 || r.len % kIoAlignment != 0 ||
                reinterpret_cast<uintptr_t>(r.buf) % kIoAlignment != 0)) {
      bad = absl::InvalidArgumentError(absl::StrCat(
          f.name, ": misaligned O_DIRECT ",
          r.op == IoOp::kRead ? "read" : "write", " (offset ", r.offset,
          ", length ", r.len, ", buffer ",
          reinterpret_cast<uintptr_t>(r.buf) % kIoAlignment,
          " bytes past alignment); all must be multiples of ", kIoAlignment));
    }
    if (!bad.ok()) {
      errors_.fetch_add(1, std::memory_order_relaxed);
      if (r.done) r.done(bad);
      continue;
    }
    ok.push_back(std::move(r));
  }
  if (!ok.empty()) SubmitImpl(std::move(ok));
}

int IoEngine::FilterResult(const IoRequest& r, uint64_t off, size_t len,
                           int result) const {
  if (!options_.completion_filter) return result;
  FileEntry f = FileAt(r.file);
  return options_.completion_filter(r.op, f.name, off, len, result);
}

absl::Status IoEngine::RequestError(const IoRequest& r, uint64_t off,
                                    size_t len, int err) const {
  FileEntry f = FileAt(r.file);
  return ErrnoStatus(
      err, absl::StrCat(r.op == IoOp::kRead ? "read " : "write ", f.name,
                        " offset ", off, " length ", len));
}

void IoEngine::CountDone(const IoRequest& r, bool ok) {
  if (!ok) {
    errors_.fetch_add(1, std::memory_order_relaxed);
  } else if (r.op == IoOp::kRead) {
    reads_.fetch_add(1, std::memory_order_relaxed);
    bytes_read_.fetch_add(r.len, std::memory_order_relaxed);
  } else {
    writes_.fetch_add(1, std::memory_order_relaxed);
    bytes_written_.fetch_add(r.len, std::memory_order_relaxed);
  }
}

IoEngineStats IoEngine::Stats() const {
  IoEngineStats s;
  s.reads = reads_.load();
  s.writes = writes_.load();
  s.bytes_read = bytes_read_.load();
  s.bytes_written = bytes_written_.load();
  s.retries = retries_.load();
  s.short_resubmits = short_resubmits_.load();
  s.errors = errors_.load();
  return s;
}

void IoLatch::Add(int n) {
  MutexLock l(&mu_);
  pending_ += n;
}

void IoLatch::Done(const absl::Status& s) {
  MutexLock l(&mu_);
  if (!s.ok() && first_error_.ok()) first_error_ = s;
  --pending_;
}

absl::Status IoLatch::Wait() {
  MutexLock l(&mu_);
  mu_.Await(Condition(
      +[](int* n) { return *n == 0; }, &pending_));
  return first_error_;
}

absl::StatusOr<int> OpenForIo(const std::string& path, bool create,
                              bool want_direct, bool* direct, bool read_only) {
  int flags = (read_only ? O_RDONLY : O_RDWR) | O_CLOEXEC |
              (create && !read_only ? O_CREAT : 0);
  if (want_direct) {
    int fd = ::open(path.c_str(), flags | O_DIRECT, 0600);
    if (fd >= 0) {
      *direct = true;
      return fd;
    }
    if (errno != EINVAL) return PathErrnoStatus(errno, "open", path);
    static std::once_flag once;
    std::call_once(once, [&] {
      std::cerr << "mlpo: O_DIRECT refused for " << path
                << "; using buffered I/O + fdatasync on this filesystem\n";
    });
  }
  int fd = ::open(path.c_str(), flags, 0600);
  if (fd < 0) return PathErrnoStatus(errno, "open", path);
  *direct = false;
  return fd;
}

}  // namespace mlpo
