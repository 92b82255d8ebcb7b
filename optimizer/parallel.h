// A fixed pool of worker threads for splitting one kernel call into tiles.
// ParallelFor blocks until every tile ran. Thread-safe: concurrent callers
// (gradient stagers on several threads) take turns; a tile must not call
// ParallelFor on the same pool. No detached threads: the destructor joins.
#ifndef MLPO_OPTIMIZER_PARALLEL_H_
#define MLPO_OPTIMIZER_PARALLEL_H_

#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace mlpo {

class ParallelRunner {
 public:
  // threads <= 0: one per hardware thread.
  explicit ParallelRunner(int threads);
  ~ParallelRunner();
  int threads() const { return static_cast<int>(workers_.size()) + 1; }
  // Runs fn(tile) for tile in [0, tiles), spread over the pool and the caller.
  void ParallelFor(size_t tiles, const std::function<void(size_t)>& fn);

 private:
  void Work();
  std::mutex call_mu_;  // one ParallelFor at a time
  std::mutex mu_;
  std::condition_variable cv_, done_cv_;
  const std::function<void(size_t)>* fn_ = nullptr;
  size_t tiles_ = 0, next_ = 0, finished_ = 0;
  uint64_t generation_ = 0;
  bool stop_ = false;
  std::vector<std::thread> workers_;
};

}  // namespace mlpo

#endif  // MLPO_OPTIMIZER_PARALLEL_H_
