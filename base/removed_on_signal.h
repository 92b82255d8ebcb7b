// RemovedOnSignal: a file or directory tree removed if SIGINT, SIGTERM or
// SIGHUP ends the process while the guard lives (a ^C, a job scheduler's
// stop). `mlpo profile`'s probe files and mlpo-bench's stores and test
// files are gigabytes each; they were left behind on every stopped run.
//
// One handler for the process: it unlinks each registered file and runs
// `rm -rf` (fork + exec, async-signal-safe) on each registered directory,
// then the signal's default action ends the process. A normal exit is the
// owner's to clean up; the guard only forgets its path. Thread-safe: at
// most 16 paths at a time (more are not guarded), each under 4 KiB.
#ifndef MLPO_BASE_REMOVED_ON_SIGNAL_H_
#define MLPO_BASE_REMOVED_ON_SIGNAL_H_

#include <string>

namespace mlpo {

class RemovedOnSignal {
 public:
  explicit RemovedOnSignal(const std::string& path, bool directory = false);
  ~RemovedOnSignal();
  RemovedOnSignal(const RemovedOnSignal&) = delete;
  RemovedOnSignal& operator=(const RemovedOnSignal&) = delete;

 private:
  int slot_ = -1;
};

}  // namespace mlpo

#endif  // MLPO_BASE_REMOVED_ON_SIGNAL_H_
