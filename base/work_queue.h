// One worker thread running posted closures in order. The destructor runs
// what is queued, then joins (no detached threads). Thread-safe.
#ifndef MLPO_BASE_WORK_QUEUE_H_
#define MLPO_BASE_WORK_QUEUE_H_

#include <functional>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "base/mutex.h"

namespace mlpo {

class WorkQueue {
 public:
  WorkQueue() : thread_([this] { Run(); }) {}
  ~WorkQueue() {
    {
      MutexLock l(&mu_);
      stop_ = true;
    }
    thread_.join();
  }
  void Post(std::function<void()> fn) {
    MutexLock l(&mu_);
    queue_.push_back(std::move(fn));
  }

 private:
  void Run() {
    for (;;) {
      std::vector<std::function<void()>> work;
      {
        MutexLock l(&mu_);
        mu_.Await(Condition(
            +[](WorkQueue* q) ABSL_NO_THREAD_SAFETY_ANALYSIS {
              return q->stop_ || !q->queue_.empty();
            },
            this));
        if (queue_.empty()) return;  // stopping and drained
        work.swap(queue_);
      }
      for (auto& fn : work) fn();
    }
  }

  Mutex mu_;
  std::vector<std::function<void()>> queue_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace mlpo

#endif  // MLPO_BASE_WORK_QUEUE_H_
