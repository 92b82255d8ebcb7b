// The project's mutex: absl::Mutex, MutexLock and Condition, except in a
// ThreadSanitizer build (-DMLPO_TSAN=ON), where they are a small
// implementation over std::mutex and std::condition_variable.
//
// Why: TSan sees a lock only when the lock's own code is instrumented or
// goes through pthreads. Debian's abseil is built without TSan and
// absl::Mutex takes its locks with its own futex code, so TSan reported
// every access guarded by an absl::Mutex as a race (193 in one suite). The
// std::mutex of libstdc++ is pthread_mutex, which TSan intercepts. Normal
// builds keep absl::Mutex unchanged (the aliases below).
//
// Only what the project uses is provided: Lock/Unlock, MutexLock, Await on
// a Condition made from a function with an argument or from a member
// function. Conditions must depend only on state guarded by the mutex (as
// absl requires): Await re-evaluates them when a holder unlocks.
//
// Layer base/: includes the standard library and absl only.
#ifndef MLPO_BASE_MUTEX_H_
#define MLPO_BASE_MUTEX_H_

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

#ifdef MLPO_TSAN
#include <condition_variable>
#include <functional>
#include <mutex>
#endif

namespace mlpo {

#ifndef MLPO_TSAN

using Mutex = absl::Mutex;
using MutexLock = absl::MutexLock;
using Condition = absl::Condition;

#else

class Condition {
 public:
  template <typename T>
  Condition(bool (*fn)(T*), T* arg) : eval_([fn, arg] { return fn(arg); }) {}
  template <typename T>
  Condition(T* obj, bool (T::*fn)()) : eval_([obj, fn] { return (obj->*fn)(); }) {}
  template <typename T>
  Condition(const T* obj, bool (T::*fn)() const)
      : eval_([obj, fn] { return (obj->*fn)(); }) {}
  bool Eval() const { return eval_(); }

 private:
  std::function<bool()> eval_;
};

class ABSL_LOCKABLE Mutex {
 public:
  void Lock() ABSL_EXCLUSIVE_LOCK_FUNCTION() { m_.lock(); }
  void Unlock() ABSL_UNLOCK_FUNCTION() {
    // What a waiter's condition reads may have changed. Notified before the
    // unlock: once unlocked, another thread may destroy the mutex (a latch
    // whose last Done wakes its waiter), as absl::Mutex allows.
    cv_.notify_all();
    m_.unlock();
  }
  // Called with the mutex held; returns with it held and `c` true.
  void Await(const Condition& c) ABSL_EXCLUSIVE_LOCKS_REQUIRED(this) {
    std::unique_lock<std::mutex> l(m_, std::adopt_lock);
    while (!c.Eval()) cv_.wait(l);
    l.release();
  }

 private:
  std::mutex m_;
  std::condition_variable cv_;
};

class ABSL_SCOPED_LOCKABLE MutexLock {
 public:
  explicit MutexLock(Mutex* mu) ABSL_EXCLUSIVE_LOCK_FUNCTION(mu) : mu_(mu) {
    mu_->Lock();
  }
  ~MutexLock() ABSL_UNLOCK_FUNCTION() { mu_->Unlock(); }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

 private:
  Mutex* const mu_;
};

#endif  // MLPO_TSAN

}  // namespace mlpo

#endif  // MLPO_BASE_MUTEX_H_
