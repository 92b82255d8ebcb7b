// pread/pwrite thread-pool implementation of IoEngine: the fallback where
// io_uring cannot be set up. queue_depth workers (at most 64) each take one
// request and loop until it is complete, with the same rules as the ring:
// short transfers continue at the advanced offset, EAGAIN/EINTR retry, no
// progress is an error.
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <deque>
#include <thread>

#include "absl/strings/str_cat.h"
#include "store/io/io_engine_impl.h"
#include "base/status_macros.h"

namespace mlpo {
namespace {

class ThreadPoolEngine final : public IoEngine {
 public:
  explicit ThreadPoolEngine(const IoEngineOptions& o) : IoEngine(o) {
    int n = std::min(o.queue_depth, 64);
    for (int i = 0; i < n; ++i) workers_.emplace_back([this] { Work(); });
  }
  ~ThreadPoolEngine() override { Close(); }

  absl::Status RegisterBuffers(const std::vector<iovec>&) override {
    return absl::OkStatus();  // nothing to gain without a ring
  }

  void Close() override {
    {
      MutexLock l(&mu_);
      if (closing_) return;
      closing_ = true;
    }
    for (auto& t : workers_) t.join();
  }

  const char* KindName() const override { return "threadpool"; }

 protected:
  void SubmitImpl(std::vector<IoRequest> reqs) override {
    {
      MutexLock l(&mu_);
      if (!closing_) {
        for (auto& r : reqs) queue_.push_back(std::move(r));
        reqs.clear();
      }
    }
    for (auto& r : reqs) {
      CountDone(r, false);
      if (r.done) r.done(absl::FailedPreconditionError(
          absl::StrCat("io engine '", options_.name, "' is closed")));
    }
  }

 private:
  void Admit(const IoRequest& r) {
    if (options_.admission == nullptr) return;
    for (;;) {
      absl::Duration d;
      {
        MutexLock l(&admit_mu_);
        d = options_.admission->Admit(r);
      }
      if (d <= absl::ZeroDuration()) return;
      absl::SleepFor(d);
    }
  }

  absl::Status Transfer(const IoRequest& r) {
    FileEntry f = FileAt(r.file);
    if (!f.in_use)
      return absl::InvalidArgumentError(absl::StrCat(
          "io engine '", options_.name, "': file handle ", r.file,
          " was unregistered with a request pending"));
    size_t done = 0;
    int zero_progress = 0;
    while (done < r.len) {
      char* buf = static_cast<char*>(r.buf) + done;
      size_t len = r.len - done;
      uint64_t off = r.offset + done;
      ssize_t n = r.op == IoOp::kRead ? ::pread(f.fd, buf, len, off)
                                      : ::pwrite(f.fd, buf, len, off);
      int res = n < 0 ? -errno : static_cast<int>(std::min<ssize_t>(n, len));
      res = FilterResult(r, off, len, res);
      if (res == -EAGAIN || res == -EINTR) {
        retries_.fetch_add(1, std::memory_order_relaxed);
        continue;
      }
      if (res < 0) return RequestError(r, off, len, -res);
      if (res == 0) {
        if (r.op == IoOp::kRead || ++zero_progress > 3)
          return absl::DataLossError(absl::StrCat(
              RequestError(r, off, len, EIO).message(),
              r.op == IoOp::kRead ? " (read past end of file)"
                                  : " (no progress)"));
        continue;
      }
      if (static_cast<size_t>(res) < len)
        short_resubmits_.fetch_add(1, std::memory_order_relaxed);
      done += static_cast<size_t>(res);
    }
    return absl::OkStatus();
  }

  void Work() {
    for (;;) {
      IoRequest r;
      {
        MutexLock l(&mu_);
        mu_.Await(Condition(this, &ThreadPoolEngine::HasWorkOrClosing));
        if (queue_.empty()) return;  // closing and drained
        r = std::move(queue_.front());
        queue_.pop_front();
        ++active_;
      }
      Admit(r);
      absl::Status s = Transfer(r);
      CountDone(r, s.ok());
      if (r.done) r.done(s);
      bool idle;
      {
        MutexLock l(&mu_);
        idle = --active_ == 0 && queue_.empty();
      }
      if (idle && options_.admission != nullptr) {
        MutexLock l(&admit_mu_);
        options_.admission->Idle();
      }
    }
  }

  bool HasWorkOrClosing() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return closing_ || !queue_.empty();
  }

  Mutex mu_;
  std::deque<IoRequest> queue_ ABSL_GUARDED_BY(mu_);
  int active_ ABSL_GUARDED_BY(mu_) = 0;
  bool closing_ ABSL_GUARDED_BY(mu_) = false;
  Mutex admit_mu_;  // serialises IoAdmission calls
  std::vector<std::thread> workers_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<IoEngine>> CreateThreadPoolEngine(
    const IoEngineOptions& options) {
  return std::unique_ptr<IoEngine>(new ThreadPoolEngine(options));
}

}  // namespace mlpo
