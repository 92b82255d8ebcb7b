#include "store/path/admission.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>


#include "absl/strings/str_cat.h"
#include "store/fs/file_util.h"
#include "base/status_macros.h"

namespace mlpo {

TokenBucket::TokenBucket(uint64_t rate, absl::Duration burst)
    : rate_(rate), burst_(burst) {}

absl::Duration TokenBucket::Take(uint64_t bytes, absl::Time now) {
  const uint64_t rate = rate_.load(std::memory_order_relaxed);
  if (rate == 0) return absl::ZeroDuration();
  if (reserved_) {
    // The refused request asks again; it was charged when refused.
    if (now < paid_until_) return paid_until_ - now;
    reserved_ = false;
    return absl::ZeroDuration();
  }
  if (paid_until_ < now - burst_) paid_until_ = now - burst_;
  paid_until_ += absl::Seconds(static_cast<double>(bytes) / rate);
  if (paid_until_ <= now) return absl::ZeroDuration();
  reserved_ = true;
  return paid_until_ - now;
}

absl::StatusOr<std::unique_ptr<IoSlots>> IoSlots::Open(const std::string& dir,
                                                       int count,
                                                       FileSystem* fs) {
  if (fs == nullptr) fs = DefaultFileSystem();
  MLPO_RETURN_IF_ERROR(fs->CreateDirs(dir));
  std::unique_ptr<IoSlots> s(new IoSlots());
  s->fs_ = fs;
  for (int i = 0; i < count; ++i) {
    std::string f = absl::StrCat(dir, "/slot-", i);
    auto fd = fs->OpenLockFile(f, /*create=*/true);
    if (!fd.ok()) return Annotate(fd.status(), "I/O slot");
    s->fds_.push_back(*fd);
    s->files_.push_back(f);
  }
  return s;
}

IoSlots::~IoSlots() {
  Release();
  for (int fd : fds_) ::close(fd);
}

bool IoSlots::TryAcquire() {
  if (held_ >= 0) return true;
  for (size_t i = 0; i < fds_.size(); ++i) {
    auto got = fs_->TryLock(fds_[i], files_[i], /*exclusive=*/true);
    // A lock that cannot be taken at all (ENOLCK, a fault) must not stall
    // the path forever: go ahead without a slot, as if slots were off.
    if (!got.ok()) return true;
    if (*got) {
      held_ = static_cast<int>(i);
      // Who holds it, for a waiter (best effort: a slot works without).
      char pid[16];
      int n = std::snprintf(pid, sizeof pid, "%-15d", ::getpid());
      pid[15] = '\n';
      (void)!::pwrite(fds_[i], pid, n > 0 ? 16 : 0, 0);
      return true;
    }
  }
  return false;
}

std::vector<int> IoSlots::Holders() const {
  std::vector<int> out;
  for (int fd : fds_) {
    char buf[17] = {};
    int pid = 0;
    if (::pread(fd, buf, 16, 0) > 0) pid = std::atoi(buf);
    out.push_back(pid);
  }
  return out;
}

bool ProcessStopped(int pid) {
  if (pid <= 0) return false;
  std::FILE* f = std::fopen(absl::StrCat("/proc/", pid, "/stat").c_str(), "r");
  if (f == nullptr) return false;
  char buf[512];
  size_t n = std::fread(buf, 1, sizeof buf - 1, f);
  std::fclose(f);
  buf[n] = '\0';
  // "pid (comm) S ...": comm may hold spaces and parentheses.
  const char* close = std::strrchr(buf, ')');
  return close != nullptr && close[1] == ' ' &&
         (close[2] == 'T' || close[2] == 't');
}

void IoSlots::Release() {
  if (held_ < 0) return;
  fs_->Unlock(fds_[held_]);
  held_ = -1;
}

PathAdmission::PathAdmission(uint64_t read_cap, uint64_t write_cap,
                             absl::Duration burst,
                             std::unique_ptr<IoSlots> slots,
                             absl::Duration slot_turn)
    : read_(read_cap, burst), write_(write_cap, burst),
      slots_(std::move(slots)), slot_turn_(slot_turn) {}

// How long a process that handed its slot on waits before asking again:
// long enough for a waiting rank (which asks every millisecond) to take it.
constexpr absl::Duration kHandOff = absl::Milliseconds(3);

absl::Duration PathAdmission::Admit(const IoRequest& req) {
  absl::Time now = absl::Now();
  if (slots_) {
    if (slots_->held() && slot_turn_ > absl::ZeroDuration() &&
        now - held_since_ > slot_turn_) {
      // Our turn is over: hand the slot on. Requests already in flight
      // finish; new ones wait for the next turn.
      slots_->Release();
      cooldown_until_ = now + kHandOff;
    }
    if (!slots_->held() && now >= bypass_until_) {
      if (now < cooldown_until_) return cooldown_until_ - now;
      if (!slots_->TryAcquire()) {
        if (waiting_since_ > now) waiting_since_ = now;
        if (now - waiting_since_ < kSlotHolderCheck || now < next_look_)
          return absl::Milliseconds(1);
        next_look_ = now + absl::Milliseconds(250);
        if (!PassOverHolders(now)) return absl::Milliseconds(1);
        bypass_until_ = now + kSlotHolderCheck;  // looked at again then
      } else {
        held_since_ = now;
        waiting_since_ = absl::InfiniteFuture();
      }
    }
  }
  TokenBucket& b = req.op == IoOp::kRead ? read_ : write_;
  return b.Take(req.len, now);
}

bool PathAdmission::PassOverHolders(absl::Time now) {
  std::vector<int> pids = slots_->Holders();
  bool stopped = !pids.empty();
  for (int pid : pids) stopped = stopped && ProcessStopped(pid);
  bool stuck = now - waiting_since_ >= kSlotWaitLimit;
  if (!stopped && !stuck) return false;
  for (int pid : pids) {
    if (std::find(told_.begin(), told_.end(), pid) != told_.end()) continue;
    told_.push_back(pid);
    std::fprintf(stderr,
                 "mlpo: the node-wide I/O slot of this path is held by pid "
                 "%d, which %s; going on without a slot until it moves again "
                 "(kill -CONT %d resumes it, or end that job)\n",
                 pid,
                 stopped ? "is stopped (SIGSTOP: a suspended job?)"
                         : "has not handed it on for 120 s",
                 pid);
  }
  return true;
}

void PathAdmission::Idle() {
  if (slots_) slots_->Release();
}
}  // namespace mlpo
