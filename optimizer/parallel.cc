#include "optimizer/parallel.h"

namespace mlpo {

ParallelRunner::ParallelRunner(int threads) {
  if (threads <= 0) threads = static_cast<int>(std::thread::hardware_concurrency());
  if (threads < 1) threads = 1;
  for (int i = 1; i < threads; ++i) workers_.emplace_back([this] { Work(); });
}

ParallelRunner::~ParallelRunner() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  for (auto& t : workers_) t.join();
}

void ParallelRunner::ParallelFor(size_t tiles,
                                 const std::function<void(size_t)>& fn) {
  if (tiles == 0) return;
  if (workers_.empty() || tiles == 1) {
    for (size_t i = 0; i < tiles; ++i) fn(i);
    return;
  }
  std::lock_guard<std::mutex> turn(call_mu_);
  std::unique_lock<std::mutex> l(mu_);
  fn_ = &fn;
  tiles_ = tiles;
  next_ = 0;
  finished_ = 0;
  ++generation_;
  cv_.notify_all();
  while (next_ < tiles_) {
    size_t t = next_++;
    l.unlock();
    fn(t);
    l.lock();
    ++finished_;
  }
  done_cv_.wait(l, [this] { return finished_ == tiles_; });
  fn_ = nullptr;
}

void ParallelRunner::Work() {
  uint64_t seen = 0;
  std::unique_lock<std::mutex> l(mu_);
  for (;;) {
    cv_.wait(l, [&] { return stop_ || (generation_ != seen && fn_ != nullptr); });
    if (stop_) return;
    seen = generation_;
    while (fn_ != nullptr && next_ < tiles_) {
      size_t t = next_++;
      const auto* fn = fn_;
      l.unlock();
      (*fn)(t);
      l.lock();
      if (++finished_ == tiles_) done_cv_.notify_all();
    }
  }
}

}  // namespace mlpo
