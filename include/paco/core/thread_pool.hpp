#pragma once
// thread_pool: a fixed set of worker threads that run one function on every thread index and
// wait for all of them (fork-join). Used to split a batch across cores; the caller is thread 0.

#include <condition_variable>
#include <cstddef>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace paco {

class thread_pool {
 public:
  // Requires: threads ≥ 1. Ensures: size() == threads (threads − 1 are spawned).
  explicit thread_pool(int threads = 1) {
    if (threads < 1) threads = 1;
    for (int i = 1; i < threads; ++i) workers_.emplace_back([this, i] { loop(i); });
  }
  ~thread_pool() {
    {
      std::lock_guard lk(m_);
      stop_ = true;
      ++gen_;
    }
    cv_.notify_all();
    for (auto& t : workers_) t.join();
  }
  thread_pool(const thread_pool&) = delete;
  thread_pool& operator=(const thread_pool&) = delete;

  int size() const noexcept { return int(workers_.size()) + 1; }

  // Where part i of n elements split into `parts` contiguous ranges begins: boundaries on
  // multiples of 16 elements (64-byte lines of floats), range_begin(n, parts, parts) == n.
  static std::size_t range_begin(std::size_t n, int i, int parts) {
    if (i >= parts) return n;
    return n * std::size_t(i) / std::size_t(parts) / 16 * 16;
  }

  // Runs f(begin, end) over [0, n) cut into one contiguous range per thread (range_begin's
  // boundaries); returns when all are done.
  template <class F>
  void for_ranges(std::size_t n, F&& f) {
    run([&](int i) { f(range_begin(n, i, size()), range_begin(n, i + 1, size())); });
  }

  // Runs f(i) for i in [0, size()), thread i running f(i); returns when all are done.
  // Ensures: the first exception thrown by any f(i) is rethrown here.
  void run(const std::function<void(int)>& f) {
    if (workers_.empty()) return f(0);
    {
      std::lock_guard lk(m_);
      job_ = &f;
      pending_ = int(workers_.size());
      error_ = nullptr;
      ++gen_;
    }
    cv_.notify_all();
    std::exception_ptr mine;
    try {
      f(0);
    } catch (...) {
      mine = std::current_exception();
    }
    std::unique_lock lk(m_);
    done_.wait(lk, [&] { return pending_ == 0; });
    job_ = nullptr;
    if (mine) std::rethrow_exception(mine);
    if (error_) std::rethrow_exception(error_);
  }

 private:
  void loop(int i) {
    unsigned long long seen = 0;
    for (;;) {
      const std::function<void(int)>* job;
      {
        std::unique_lock lk(m_);
        cv_.wait(lk, [&] { return gen_ != seen; });
        seen = gen_;
        if (stop_) return;
        job = job_;
      }
      std::exception_ptr err;
      try {
        (*job)(i);
      } catch (...) {
        err = std::current_exception();
      }
      std::lock_guard lk(m_);
      if (err && !error_) error_ = err;
      if (--pending_ == 0) done_.notify_one();
    }
  }

  std::vector<std::thread> workers_;
  std::mutex m_;
  std::condition_variable cv_, done_;
  const std::function<void(int)>* job_ = nullptr;
  int pending_ = 0;
  unsigned long long gen_ = 0;
  bool stop_ = false;
  std::exception_ptr error_;
};

}  // namespace paco
