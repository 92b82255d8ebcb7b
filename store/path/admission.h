// Admission control of one storage path: a bandwidth cap per direction (token
// buckets) and node-wide I/O slots (flock-held slot files).
//
// Caps are a real feature (good citizenship on a shared PFS) and also how the
// benchmarks emulate paths of different speeds on a one-disk machine.
#ifndef MLPO_STORE_PATH_ADMISSION_H_
#define MLPO_STORE_PATH_ADMISSION_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "store/fs/file_system.h"
#include "store/io/io_engine.h"

namespace mlpo {

// Pay-before token bucket: a request of n bytes is admitted once the bucket
// has paid n / rate seconds for it, so moving X bytes takes at least
// X / rate - burst. A refused request is charged at once (a reservation):
// the caller asks again after the returned wait and is then admitted.
// Thread-compatible.
class TokenBucket {
 public:
  // rate_bytes_per_s == 0 means unlimited. burst: credit an idle bucket keeps.
  TokenBucket(uint64_t rate_bytes_per_s, absl::Duration burst);
  // Zero when admitted (and charged), else how long to wait.
  absl::Duration Take(uint64_t bytes, absl::Time now);
  uint64_t rate() const { return rate_.load(std::memory_order_relaxed); }
  // A new rate from now on (e.g. other jobs started on a shared PFS); safe
  // while another thread takes.
  void SetRate(uint64_t rate) { rate_.store(rate, std::memory_order_relaxed); }

 private:
  std::atomic<uint64_t> rate_;
  absl::Duration burst_;
  absl::Time paid_until_ = absl::InfinitePast();
  bool reserved_ = false;
};

// N slot files under `dir` (created). A process holds a slot through an
// exclusive flock on one of them; the kernel drops it when the process dies,
// so a killed holder never blocks the others. Thread-compatible.
class IoSlots {
 public:
  // `fs`: where the slot files and their locks go (nullptr: the default).
  static absl::StatusOr<std::unique_ptr<IoSlots>> Open(const std::string& dir,
                                                       int count,
                                                       FileSystem* fs = nullptr);
  ~IoSlots();
  // Non-blocking. The holder writes its pid into the slot's file.
  bool TryAcquire();
  void Release();
  // The pid each slot's holder wrote (0: none written), for a waiter that
  // looks at who keeps it waiting.
  std::vector<int> Holders() const;
  bool held() const { return held_ >= 0; }
  int count() const { return static_cast<int>(fds_.size()); }

 private:
  IoSlots() = default;
  std::vector<int> fds_;
  int held_ = -1;
  FileSystem* fs_ = nullptr;
  std::vector<std::string> files_;
};

// True when process `pid` is stopped (SIGSTOP or SIGTSTP: a batch
// scheduler's suspend, Ctrl-Z) or traced to a stop: /proc/<pid>/stat's
// state 'T' or 't'.
bool ProcessStopped(int pid);

// A waiter for a slot looks at the holders after this long; when every
// slot's holder is a stopped process, it goes on without a slot (as if
// slots were off), and says so once, naming them: a suspended job must not
// block every other job on the path for as long as it is suspended.
inline constexpr absl::Duration kSlotHolderCheck = absl::Seconds(1);
// A holder that is running but has not handed its slot on for this long is
// passed over the same way (a slot turn is milliseconds to seconds).
inline constexpr absl::Duration kSlotWaitLimit = absl::Seconds(120);

// Combines both for one path's engine. Not thread-safe on its own: engines
// serialise calls.
class PathAdmission final : public IoAdmission {
 public:
  // `slot_turn`: the longest a slot is held while busy before it is handed
  // on (0 = until idle).
  PathAdmission(uint64_t read_cap, uint64_t write_cap, absl::Duration burst,
                std::unique_ptr<IoSlots> slots,
                absl::Duration slot_turn = absl::ZeroDuration());
  absl::Duration Admit(const IoRequest& req) override;
  void Idle() override;
  // Changes the caps while the engine runs (0 = unlimited).
  void SetCaps(uint64_t read_cap, uint64_t write_cap) {
    read_.SetRate(read_cap);
    write_.SetRate(write_cap);
  }

 private:
  // Waiting since waiting_since_: true when every holder is stopped, or
  // the wait passed kSlotWaitLimit (named on stderr once per holder).
  bool PassOverHolders(absl::Time now);

  TokenBucket read_, write_;
  std::unique_ptr<IoSlots> slots_;
  absl::Duration slot_turn_;
  absl::Time held_since_ = absl::InfinitePast();
  absl::Time cooldown_until_ = absl::InfinitePast();
  // Waiting for a slot since; passing over stopped holders until.
  absl::Time waiting_since_ = absl::InfiniteFuture();
  absl::Time bypass_until_ = absl::InfinitePast();
  absl::Time next_look_ = absl::InfinitePast();
  std::vector<int> told_;  // holders already named on stderr
};

}  // namespace mlpo

#endif  // MLPO_STORE_PATH_ADMISSION_H_
