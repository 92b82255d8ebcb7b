// The asynchronous I/O engine: batches of aligned reads and writes at file
// offsets, each completing with its own Status through a callback.
//
// Two implementations share this interface and one test suite:
//  - io_uring (one ring driven by one engine thread; registered files and
//    buffers; modern setup flags dropped one by one on EINVAL);
//  - a pread/pwrite thread pool, chosen automatically when io_uring cannot be
//    set up (seccomp in containers often refuses it) or by option.
//
// A storage path owns one engine: each path is driven by its own I/O thread
// and ring (docs/design.md "The store", Paths). Admission control
// (bandwidth caps, node-wide slots) plugs in through IoAdmission so that
// neither engine blocks a caller.
//
// Thread-safety: Submit, RegisterFile and UnregisterFile are thread-safe.
// Callbacks run on an engine thread and must not block; they may Submit.
// Layer store/io: may include base/ only.
#ifndef MLPO_STORE_IO_IO_ENGINE_H_
#define MLPO_STORE_IO_IO_ENGINE_H_

#include <sys/uio.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/base/thread_annotations.h"
#include "base/aligned_buffer.h"
#include "absl/status/statusor.h"
#include "base/mutex.h"
#include "absl/time/time.h"

namespace mlpo {


enum class IoOp { kRead, kWrite };

using IoCallback = std::function<void(const absl::Status&)>;

struct IoRequest {
  IoOp op = IoOp::kRead;
  int file = -1;        // handle from IoEngine::RegisterFile
  uint64_t offset = 0;  // multiple of kIoAlignment for O_DIRECT files
  void* buf = nullptr;  // aligned to kIoAlignment for O_DIRECT files
  size_t len = 0;       // multiple of kIoAlignment for O_DIRECT files
  IoCallback done;      // called exactly once
};

// Decides when a request may be dispatched. Called only from engine threads.
class IoAdmission {
 public:
  virtual ~IoAdmission() = default;
  // Returns absl::ZeroDuration() when `req` may go now, else how long to wait
  // before asking again. Once it returned zero the request is charged.
  virtual absl::Duration Admit(const IoRequest& req) = 0;
  // The engine has nothing in flight and nothing queued.
  virtual void Idle() {}
};

// Test hook: sees every completion and may change its result (bytes moved, or
// -errno) to inject EIO, ENOSPC or short transfers.
using IoCompletionFilter = std::function<int(
    IoOp op, const std::string& file_name, uint64_t offset, size_t len,
    int result)>;

enum class IoEngineKind { kAuto, kUring, kThreadPool };

struct IoEngineOptions {
  // kAuto: io_uring, or the thread pool when io_uring cannot be set up.
  IoEngineKind kind = IoEngineKind::kAuto;
  // Requests in flight at once. Range 1..4096. Deep queues pay on NVMe and on
  // these virtual disks; the pool uses this many threads (capped at 64).
  int queue_depth = 32;
  // Size of the registered file table (io_uring); max files open at once.
  int max_files = 1024;
  // Borrowed; must outlive the engine. nullptr admits everything.
  IoAdmission* admission = nullptr;
  // Borrowed test hook; nullptr in production.
  // Set from the path's FileSystem (fault injection in tests); empty in
  // production.
  IoCompletionFilter completion_filter;
  // Name used in log and error messages (e.g. the path's root).
  std::string name = "io";
};

struct IoEngineStats {
  uint64_t reads = 0, writes = 0;
  uint64_t bytes_read = 0, bytes_written = 0;
  uint64_t retries = 0;       // EAGAIN/EINTR requeues
  uint64_t short_resubmits = 0;
  uint64_t errors = 0;
};

class IoEngine {
 public:
  static absl::StatusOr<std::unique_ptr<IoEngine>> Create(
      const IoEngineOptions& options);
  virtual ~IoEngine() = default;
  IoEngine(const IoEngine&) = delete;
  IoEngine& operator=(const IoEngine&) = delete;

  // Registers an open descriptor (borrowed: the caller closes it after
  // UnregisterFile). `direct` files get alignment checks. Returns a handle.
  absl::StatusOr<int> RegisterFile(int fd, std::string name, bool direct);
  // No request on the handle may be in flight.
  absl::Status UnregisterFile(int handle);

  // Registers buffers for READ_FIXED/WRITE_FIXED. Requests whose buffer lies
  // inside one of them use it automatically. At most once per engine, before
  // the buffers are used; the memory must outlive the engine. Engines that
  // cannot register return OK and use ordinary transfers.
  virtual absl::Status RegisterBuffers(const std::vector<iovec>& buffers) = 0;

  // Validates each request (a misaligned or bad one completes at once with
  // InvalidArgument naming file, offset and length), then queues it.
  void Submit(std::vector<IoRequest> reqs);
  void Submit(IoRequest req);

  // Drains queued and in-flight work (callbacks still run), then joins.
  // Idempotent; the destructor calls it. Submit after Close fails requests.
  virtual void Close() = 0;

  virtual const char* KindName() const = 0;
  IoEngineStats Stats() const;
  const std::string& name() const { return options_.name; }

 protected:
  explicit IoEngine(const IoEngineOptions& options) : options_(options) {}

  struct FileEntry {
    int fd = -1;
    std::string name;
    bool direct = false;
    bool in_use = false;
  };
  virtual void SubmitImpl(std::vector<IoRequest> reqs) = 0;
  // Hooks for the implementations: the file table is shared state.
  FileEntry FileAt(int handle) const;
  virtual void OnFileRegistered(int handle, int fd)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(files_mu_) {}
  // Finishes a transfer result; applies the filter. Returns bytes or -errno.
  int FilterResult(const IoRequest& r, uint64_t off, size_t len,
                   int result) const;
  // Error text for a failed request.
  absl::Status RequestError(const IoRequest& r, uint64_t off, size_t len,
                            int err) const;
  void CountDone(const IoRequest& r, bool ok);

  IoEngineOptions options_;
  mutable Mutex files_mu_;
  std::vector<FileEntry> files_ ABSL_GUARDED_BY(files_mu_);

  std::atomic<uint64_t> reads_{0}, writes_{0}, bytes_read_{0},
      bytes_written_{0}, errors_{0}, retries_{0}, short_resubmits_{0};
};

// Counts outstanding requests and keeps the first error; Wait() blocks until
// all are done. Thread-safe. Use: Add(n) before submitting n requests whose
// callbacks call Done().
class IoLatch {
 public:
  void Add(int n = 1);
  void Done(const absl::Status& s);
  absl::Status Wait();
  IoCallback Callback() {
    return [this](const absl::Status& s) { Done(s); };
  }

 private:
  Mutex mu_;
  int pending_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Status first_error_ ABSL_GUARDED_BY(mu_);
};

// Opens `path` for I/O, with O_DIRECT when `want_direct` and the filesystem
// allows it (else buffered, reported through *direct = false).
absl::StatusOr<int> OpenForIo(const std::string& path, bool create,
                              bool want_direct, bool* direct,
                              bool read_only = false);

}  // namespace mlpo

#endif  // MLPO_STORE_IO_IO_ENGINE_H_
