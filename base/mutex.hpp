// A std::mutex the thread-safety analysis understands (thread_annotations.hpp), its scoped
// lock, and a condition variable that waits on that lock. Same cost as std::mutex /
// std::unique_lock / std::condition_variable, which they wrap.
//
//   base::Mutex mu_;
//   int count_ STOKER_GUARDED_BY(mu_);
//   void add() { base::MutexLock lock(mu_); ++count_; }
//   void bump() STOKER_REQUIRES(mu_) { ++count_; }   // the caller holds mu_
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>

#include "base/thread_annotations.hpp"

namespace stoker::base {

class STOKER_CAPABILITY("mutex") Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void lock() STOKER_ACQUIRE() { mu_.lock(); }
  void unlock() STOKER_RELEASE() { mu_.unlock(); }
  bool try_lock() STOKER_TRY_ACQUIRE(true) { return mu_.try_lock(); }
  // Tells the analysis the caller holds this mutex where it cannot see it (a callback run
  // under the lock by code the analysis does not follow).
  void assert_held() const STOKER_ASSERT_CAPABILITY(this) {}

 private:
  friend class MutexLock;
  std::mutex mu_;
};

// Holds `mu` for its scope; unlock()/lock() in between for work done without it.
class STOKER_SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex& mu) STOKER_ACQUIRE(mu) : lock_(mu.mu_) {}
  ~MutexLock() STOKER_RELEASE() {}
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

  void unlock() STOKER_RELEASE() { lock_.unlock(); }
  void lock() STOKER_ACQUIRE() { lock_.lock(); }

 private:
  friend class CondVar;
  std::unique_lock<std::mutex> lock_;
};

// std::condition_variable over a MutexLock: the mutex is held again whenever wait returns,
// so the analysis's view (held throughout) stays true at every line the caller writes.
// Prefer `while (!ready_) cv.wait(lock);` to a predicate lambda: the analysis checks a lambda
// as a function of its own, which does not hold the lock (a lambda that reads guarded state
// must start with `mu_.assert_held();`).
class CondVar {
 public:
  void notify_one() { cv_.notify_one(); }
  void notify_all() { cv_.notify_all(); }
  void wait(MutexLock& lock) { cv_.wait(lock.lock_); }
  template <class Pred>
  void wait(MutexLock& lock, Pred pred) {
    cv_.wait(lock.lock_, pred);
  }
  template <class Rep, class Period, class Pred>
  bool wait_for(MutexLock& lock, std::chrono::duration<Rep, Period> d, Pred pred) {
    return cv_.wait_for(lock.lock_, d, pred);
  }
  template <class Clock, class Duration, class Pred>
  bool wait_until(MutexLock& lock, std::chrono::time_point<Clock, Duration> t, Pred pred) {
    return cv_.wait_until(lock.lock_, t, pred);
  }
  template <class Rep, class Period>
  std::cv_status wait_for(MutexLock& lock, std::chrono::duration<Rep, Period> d) {
    return cv_.wait_for(lock.lock_, d);
  }

 private:
  std::condition_variable cv_;
};

}  // namespace stoker::base
