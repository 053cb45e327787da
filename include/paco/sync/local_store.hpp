#pragma once
// local_store: a module_store shared by worker threads of one process. A round of module m
// closes as soon as every expected worker pushed, or when a waiter's deadline passes (then it
// closes with what arrived: a late or dead worker is left out). Waiters block on a condition
// variable until the round they pushed to is closed.

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <vector>

#include "paco/path/module_store.hpp"

namespace paco::sync {

// What a pull returns besides the parameters: the module's round and the hash of θ.
struct pulled {
  long round = 0;
  std::uint64_t hash = 0;
};

template <class OuterOpt>
class local_store {
 public:
  local_store(std::vector<path::module_info> modules, OuterOpt opt, outer::delta_options d = {})
      : store_(std::move(modules), opt, d) {}

  path::module_store<OuterOpt>& store() noexcept { return store_; }
  const path::module_store<OuterOpt>& store() const noexcept { return store_; }

  result<pulled> pull(int m, std::span<float> dst) const {
    auto [round, hash] = store_.pull(m, dst);
    return pulled{round, hash};
  }

  // Pushes and, if that completes the round, closes it and wakes the waiters.
  status push(int m, int worker, long round, std::span<const float> delta, double weight) {
    std::unique_lock lk(mu_);
    auto s = store_.push(m, worker, round, delta, weight);
    if (s.ok() && store_.complete(m)) close_locked(m);
    return s;
  }

  // Blocks until round `round` of module m is closed; at `until` closes it with what arrived.
  // Ensures: on return store().round(m) > round.
  status wait_closed(int m, long round, std::chrono::steady_clock::time_point until) {
    std::unique_lock lk(mu_);
    if (!cv_.wait_until(lk, until, [&] { return store_.round(m) > round; }) &&
        store_.round(m) == round)
      close_locked(m);
    return {};
  }

  // Summaries of every closed round, in closing order.
  std::vector<path::round_summary> history() const {
    std::lock_guard lk(mu_);
    return history_;
  }

 private:
  void close_locked(int m) {
    history_.push_back(store_.close(m));
    cv_.notify_all();
  }
  path::module_store<OuterOpt> store_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<path::round_summary> history_;
};

}  // namespace paco::sync
