#pragma once
// metered<S>: a module store that forwards to another (a client over TCP, a local_store) and
// records when each push was on its way and how many bytes it put on the wire, so that a run can
// say not only how much it sent but how bursty it was: the bytes sent within any window of time
// (the peak rate a link must carry for the pushes not to queue). A push's bytes are
// wire::push_bytes of its payload (4 bytes per float for fp32), counted whether or not the store
// accepted it; its time runs from the call to the store's reply.
//
//   store::metered m(client);
//   train::run_worker(worker, m, options);          // pushes from any thread
//   for (auto& p : m.take()) ...                    // {start_s, end_s, bytes} since construction
//
// Models ModuleStore, and EncodedModuleStore when S does. Thread-safe where S is (the records
// are guarded by a mutex of their own).

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <mutex>
#include <span>
#include <utility>
#include <vector>

#include "paco/core/error.hpp"
#include "paco/store/concepts.hpp"
#include "paco/store/wire.hpp"

namespace paco::store {

// One push: seconds since the metered store was made, and its bytes on the wire.
struct push_record {
  double start_s = 0, end_s = 0;
  std::size_t bytes = 0;
};

template <ModuleStore S>
class metered {
 public:
  using module_store_tag = void;

  // Requires: inner outlives this.
  explicit metered(S& inner) : inner_(inner), t0_(std::chrono::steady_clock::now()) {}

  result<pulled> pull(int m, std::span<float> dst) { return inner_.pull(m, dst); }

  status push(int m, int worker, long round, std::span<const float> delta, double weight) {
    const double s = now();
    status st = inner_.push(m, worker, round, delta, weight);
    record(s, wire::push_bytes(delta.size_bytes()));
    return st;
  }

  status push_encoded(int m, int worker, long round, std::span<const std::byte> payload,
                      double weight) requires EncodedModuleStore<S> {
    const double s = now();
    status st = inner_.push_encoded(m, worker, round, payload, weight);
    record(s, wire::push_bytes(payload.size()));
    return st;
  }

  status wait_closed(int m, long round, std::chrono::steady_clock::time_point until) {
    return inner_.wait_closed(m, round, until);
  }

  double push_time_s(int m) const requires PacedModuleStore<S> { return inner_.push_time_s(m); }

  // The pushes recorded since the last take, oldest first; clears them.
  std::vector<push_record> take() {
    std::lock_guard lock(mu_);
    return std::exchange(records_, {});
  }

 private:
  double now() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
  }
  void record(double start, std::size_t bytes) {
    const double end = now();
    std::lock_guard lock(mu_);
    records_.push_back({start, end, bytes});
  }

  S& inner_;
  std::chrono::steady_clock::time_point t0_;
  std::mutex mu_;
  std::vector<push_record> records_;
};

// The most bytes the pushes put on the wire within any window of `window` seconds, each push's
// bytes spread evenly over its time (a push of no duration counts whole at its instant), divided
// by the window: the peak rate a link must carry. Requires: window > 0.
inline double peak_rate(std::span<const push_record> pushes, double window) {
  double best = 0;
  // The bytes in a window, as it slides, change slope only where a push starts or ends: the
  // maximum is at a window that starts at a push's start or ends at a push's end.
  auto bytes_in = [&](double a, double b) {
    double sum = 0;
    for (const auto& p : pushes) {
      const double d = p.end_s - p.start_s;
      if (d <= 0) {
        if (p.start_s >= a && p.start_s <= b) sum += double(p.bytes);
        continue;
      }
      const double lo = std::max(a, p.start_s), hi = std::min(b, p.end_s);
      if (hi > lo) sum += double(p.bytes) * (hi - lo) / d;
    }
    return sum;
  };
  for (const auto& p : pushes) {
    best = std::max(best, bytes_in(p.start_s, p.start_s + window));
    best = std::max(best, bytes_in(p.end_s - window, p.end_s));
  }
  return best / window;
}

}  // namespace paco::store
