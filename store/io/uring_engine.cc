// io_uring implementation of IoEngine.
//
// One thread owns the ring: it is the only task that submits or reaps, which
// is what IORING_SETUP_SINGLE_ISSUER | DEFER_TASKRUN require. Other threads
// hand requests over through a mutex-protected queue and wake the ring thread
// by writing an eventfd whose read is always armed in the ring, so a single
// io_uring_enter both waits for completions and notices new work.
//
// Files are registered lazily into a sparse fixed-file table by the ring
// thread (a generation per handle keeps a reused descriptor number from
// aliasing the old file). Buffers registered with RegisterBuffers are found by
// address, so any request inside one uses READ_FIXED/WRITE_FIXED.
//
// Each completion is checked for its full length: short transfers are
// resubmitted with the offset advanced, EAGAIN/EINTR are requeued, and a
// transfer that makes no progress fails with EIO.
//
// Reads and writes wait in separate queues and are admitted independently:
// a write held back by its bandwidth cap must not block reads (the caps of
// the two directions add up), and reads, which the pipeline waits on, are
// offered the free queue slots first.
#include <liburing.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <deque>
#include <future>
#include <map>
#include <thread>

#include "absl/strings/str_cat.h"
#include "store/io/io_engine_impl.h"
#include "base/status_macros.h"

namespace mlpo {
namespace {

constexpr uint64_t kWakeTag = 1;  // user_data of the eventfd read

struct Op {
  IoRequest req;
  size_t done = 0;      // bytes completed so far
  bool admitted = false;
  int zero_progress = 0;
};

class UringEngine final : public IoEngine {
 public:
  explicit UringEngine(const IoEngineOptions& o) : IoEngine(o) {}
  ~UringEngine() override { Close(); }

  absl::Status Start() {
    wake_fd_ = eventfd(0, EFD_CLOEXEC);
    if (wake_fd_ < 0) return ErrnoStatus(errno, "eventfd");
    std::promise<absl::Status> started;
    auto f = started.get_future();
    thread_ = std::thread([this, &started] { Run(&started); });
    absl::Status s = f.get();
    if (!s.ok()) {
      thread_.join();
      ::close(wake_fd_);
      wake_fd_ = -1;
    }
    return s;
  }

  absl::Status RegisterBuffers(const std::vector<iovec>& buffers) override {
    std::promise<absl::Status> p;
    auto f = p.get_future();
    RunOnRing([this, &buffers, &p] {
      if (!regions_.empty()) {
        p.set_value(absl::FailedPreconditionError(
            "io engine: buffers already registered"));
        return;
      }
      int r = io_uring_register_buffers(&ring_, buffers.data(),
                                        static_cast<unsigned>(buffers.size()));
      if (r < 0) {
        // Registration is an optimisation (pinned pages); run without it.
        static std::once_flag once;
        std::call_once(once, [&] {
          std::fprintf(stderr,
                       "mlpo: io_uring refused to register buffers (%s); "
                       "using unregistered buffers\n",
                       std::strerror(-r));
        });
        p.set_value(absl::OkStatus());
        return;
      }
      for (size_t i = 0; i < buffers.size(); ++i) {
        auto base = reinterpret_cast<uintptr_t>(buffers[i].iov_base);
        regions_[base] = {base + buffers[i].iov_len, static_cast<int>(i)};
      }
      p.set_value(absl::OkStatus());
    });
    return f.get();
  }

  void Close() override {
    if (!thread_.joinable()) return;
    {
      std::lock_guard<std::mutex> l(mu_);
      closing_ = true;
      WakeLocked();
    }
    thread_.join();
    // Under mu_: a submitter still finishing its wake-up (its request may
    // have completed, and the store be closing, before its write to the
    // eventfd) must not write to a closed, perhaps reused, descriptor.
    std::lock_guard<std::mutex> l(mu_);
    ::close(wake_fd_);
    wake_fd_ = -1;
  }

  const char* KindName() const override { return "io_uring"; }

 protected:
  void SubmitImpl(std::vector<IoRequest> reqs) override {
    {
      std::lock_guard<std::mutex> l(mu_);
      if (!closing_) {
        for (auto& r : reqs) {
          auto op = std::make_unique<Op>();
          op->req = std::move(r);
          incoming_.push_back(std::move(op));
        }
        reqs.clear();
      }
      WakeLocked();
    }
    for (auto& r : reqs) {  // engine closed
      CountDone(r, false);
      if (r.done) r.done(absl::FailedPreconditionError(
          absl::StrCat("io engine '", options_.name, "' is closed")));
    }
  }

  void OnFileRegistered(int handle, int fd) override
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(files_mu_) {
    // Called with files_mu_ held; the ring thread picks the change up.
    if (static_cast<size_t>(handle) >= generation_.size())
      generation_.resize(handle + 1, 0);
    ++generation_[handle];
  }

 private:
  // Called with mu_ held (Close closes the eventfd under it).
  void WakeLocked() {
    if (wake_fd_ < 0) return;
    uint64_t one = 1;
    ssize_t n = ::write(wake_fd_, &one, sizeof(one));
    (void)n;
  }

  void RunOnRing(std::function<void()> fn) {
    {
      std::lock_guard<std::mutex> l(mu_);
      control_.push_back(std::move(fn));
      WakeLocked();
    }
  }

  absl::Status SetupRing() {
    unsigned flags[] = {
        IORING_SETUP_SUBMIT_ALL | IORING_SETUP_COOP_TASKRUN |
            IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN,
        IORING_SETUP_SUBMIT_ALL | IORING_SETUP_COOP_TASKRUN |
            IORING_SETUP_SINGLE_ISSUER,
        IORING_SETUP_SUBMIT_ALL | IORING_SETUP_COOP_TASKRUN,
        IORING_SETUP_SUBMIT_ALL, 0};
    entries_ = static_cast<unsigned>(options_.queue_depth + 1);
    int r = -EINVAL;
    for (unsigned f : flags) {
      io_uring_params p{};
      p.flags = f;
      r = io_uring_queue_init_params(entries_ * 2, &ring_, &p);
      if (r != -EINVAL) break;
    }
    if (r < 0) return ErrnoStatus(-r, "io_uring_queue_init");
    int fr = io_uring_register_files_sparse(
        &ring_, static_cast<unsigned>(options_.max_files));
    fixed_files_ = fr == 0;
    return absl::OkStatus();
  }

  void ArmWake() {
    io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
    io_uring_prep_read(sqe, wake_fd_, &wake_buf_, sizeof(wake_buf_), 0);
    io_uring_sqe_set_data64(sqe, kWakeTag);
  }

  // Returns the fd or fixed index to use for `handle`, registering lazily.
  bool ResolveFile(int handle, int* fd, bool* fixed) {
    FileEntry f;
    uint64_t gen;
    {
      MutexLock l(&files_mu_);
      if (handle < 0 || static_cast<size_t>(handle) >= files_.size() ||
          !files_[handle].in_use)
        return false;
      f = files_[handle];
      gen = generation_[handle];
    }
    *fd = f.fd;
    *fixed = false;
    if (!fixed_files_) return true;
    if (static_cast<size_t>(handle) >= ring_gen_.size())
      ring_gen_.resize(handle + 1, 0);
    if (ring_gen_[handle] != gen) {
      int one = f.fd;
      if (io_uring_register_files_update(&ring_, handle, &one, 1) != 1)
        return true;  // use the plain descriptor for this request
      ring_gen_[handle] = gen;
    }
    *fd = handle;
    *fixed = true;
    return true;
  }

  int BufferIndex(const void* p, size_t len) const {
    if (regions_.empty()) return -1;
    auto a = reinterpret_cast<uintptr_t>(p);
    auto it = regions_.upper_bound(a);
    if (it == regions_.begin()) return -1;
    --it;
    if (a + len <= it->second.first) return it->second.second;
    return -1;
  }

  bool Prep(Op* op) {
    int fd;
    bool fixed;
    const IoRequest& r = op->req;
    if (!ResolveFile(r.file, &fd, &fixed)) return false;
    io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
    char* buf = static_cast<char*>(r.buf) + op->done;
    unsigned len = static_cast<unsigned>(r.len - op->done);
    uint64_t off = r.offset + op->done;
    int bi = BufferIndex(buf, len);
    if (r.op == IoOp::kRead) {
      if (bi >= 0)
        io_uring_prep_read_fixed(sqe, fd, buf, len, off, bi);
      else
        io_uring_prep_read(sqe, fd, buf, len, off);
    } else {
      if (bi >= 0)
        io_uring_prep_write_fixed(sqe, fd, buf, len, off, bi);
      else
        io_uring_prep_write(sqe, fd, buf, len, off);
    }
    if (fixed) sqe->flags |= IOSQE_FIXED_FILE;
    io_uring_sqe_set_data(sqe, op);
    return true;
  }

  void Finish(std::unique_ptr<Op> op, const absl::Status& s) {
    CountDone(op->req, s.ok());
    if (op->req.done) op->req.done(s);
  }

  // Handles one completion of `op`; requeues it into ready_ when more remains.
  void Complete(Op* raw, int res) {
    std::unique_ptr<Op> op(raw);
    const IoRequest& r = op->req;
    uint64_t off = r.offset + op->done;
    size_t len = r.len - op->done;
    res = FilterResult(r, off, len, res);
    if (res == -EAGAIN || res == -EINTR) {
      retries_.fetch_add(1, std::memory_order_relaxed);
      ready_[Dir(op->req)].push_front(std::move(op));
      return;
    }
    if (res < 0) return Finish(std::move(op), RequestError(r, off, len, -res));
    if (res == 0) {
      if (r.op == IoOp::kRead || ++op->zero_progress > 3)
        return Finish(std::move(op),
                      absl::DataLossError(absl::StrCat(
                          RequestError(r, off, len, EIO).message(),
                          r.op == IoOp::kRead ? " (read past end of file)"
                                              : " (no progress)")));
    }
    op->done += static_cast<size_t>(std::min<int>(res, static_cast<int>(len)));
    if (op->done < r.len) {
      short_resubmits_.fetch_add(1, std::memory_order_relaxed);
      ready_[Dir(op->req)].push_front(std::move(op));
      return;
    }
    Finish(std::move(op), absl::OkStatus());
  }

  void Run(std::promise<absl::Status>* started) {
    absl::Status s = SetupRing();
    started->set_value(s);
    if (!s.ok()) return;
    ArmWake();
    int inflight = 0;
    bool idle_reported = true;
    for (;;) {
      bool closing;
      std::vector<std::function<void()>> control;
      {
        std::lock_guard<std::mutex> l(mu_);
        while (!incoming_.empty()) {
          auto& op = incoming_.front();
          ready_[Dir(op->req)].push_back(std::move(op));
          incoming_.pop_front();
        }
        control.swap(control_);
        closing = closing_;
      }
      for (auto& fn : control) fn();

      absl::Duration delay = absl::InfiniteDuration();
      bool progress = true;
      while (progress && inflight < options_.queue_depth) {
        progress = false;
        for (auto& q : ready_) {  // reads first
          if (q.empty() || inflight >= options_.queue_depth) continue;
          Op* op = q.front().get();
          if (!op->admitted && options_.admission != nullptr) {
            absl::Duration d = options_.admission->Admit(op->req);
            if (d > absl::ZeroDuration()) {
              delay = std::min(delay, d);
              continue;
            }
          }
          op->admitted = true;
          std::unique_ptr<Op> owned = std::move(q.front());
          q.pop_front();
          progress = true;
          if (!Prep(owned.get())) {
            IoRequest& r = owned->req;
            Finish(std::move(owned),
                   absl::InvalidArgumentError(absl::StrCat(
                       "io engine '", options_.name, "': file handle ", r.file,
                       " was unregistered with a request pending")));
            continue;
          }
          owned.release();
          ++inflight;
          idle_reported = false;
        }
      }
      bool queued = !ready_[0].empty() || !ready_[1].empty();
      if (!queued || inflight >= options_.queue_depth)
        delay = absl::ZeroDuration();  // nothing to admit: wait for events
      if (delay == absl::InfiniteDuration()) delay = absl::ZeroDuration();
      if (inflight == 0 && !queued) {
        if (!idle_reported && options_.admission != nullptr)
          options_.admission->Idle();
        idle_reported = true;
        if (closing) break;
      }

      io_uring_cqe* cqe = nullptr;
      int r;
      if (delay > absl::ZeroDuration()) {
        __kernel_timespec ts{};
        int64_t ns = absl::ToInt64Nanoseconds(delay);
        ts.tv_sec = ns / 1000000000;
        ts.tv_nsec = ns % 1000000000;
        r = io_uring_submit_and_wait_timeout(&ring_, &cqe, 1, &ts, nullptr);
      } else {
        r = io_uring_submit_and_wait(&ring_, 1);
      }
      (void)r;  // -ETIME / -EINTR: loop and look again
      unsigned head;
      unsigned seen = 0;
      io_uring_for_each_cqe(&ring_, head, cqe) {
        ++seen;
        uint64_t tag = io_uring_cqe_get_data64(cqe);
        if (tag == kWakeTag) {
          ArmWake();
          continue;
        }
        --inflight;
        Complete(static_cast<Op*>(io_uring_cqe_get_data(cqe)), cqe->res);
      }
      io_uring_cq_advance(&ring_, seen);
    }
    io_uring_queue_exit(&ring_);
  }

  io_uring ring_{};
  unsigned entries_ = 0;
  bool fixed_files_ = false;
  int wake_fd_ = -1;
  uint64_t wake_buf_ = 0;
  std::thread thread_;

  std::mutex mu_;
  std::deque<std::unique_ptr<Op>> incoming_;  // guarded by mu_
  std::vector<std::function<void()>> control_;  // guarded by mu_
  bool closing_ = false;                        // guarded by mu_

  // Ring-thread state.
  static int Dir(const IoRequest& r) { return r.op == IoOp::kRead ? 0 : 1; }
  std::deque<std::unique_ptr<Op>> ready_[2];  // [0] reads, [1] writes
  std::vector<uint64_t> ring_gen_;
  std::map<uintptr_t, std::pair<uintptr_t, int>> regions_;  // base->(end,idx)
  std::vector<uint64_t> generation_ ABSL_GUARDED_BY(files_mu_);
};

}  // namespace

absl::StatusOr<std::unique_ptr<IoEngine>> CreateUringEngine(
    const IoEngineOptions& options) {
  auto e = std::make_unique<UringEngine>(options);
  MLPO_RETURN_IF_ERROR(e->Start());
  return std::unique_ptr<IoEngine>(std::move(e));
}

}  // namespace mlpo
