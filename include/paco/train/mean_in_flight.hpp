#pragma once
// mean_in_flight: a reduction of the ranks' Δ (the work a round's planes hand it: the fp32 ring
// or a codec with error feedback over host buffers, train/round_planes.hpp; a device reduction,
// kernels/paco/round_planes_cuda.cuh) and, optionally, the check that every rank holds the same
// outer parameters, run on a background thread while the caller goes on with inner steps; its
// bytes and seconds are booked when it lands. The round loop's flight (train/round_loop.hpp).
//
//   mean_in_flight<net::asio_tcp> f;
//   f.launch(t, planes.reduce<net::asio_tcp>(p), hash, "CO2", deadline);
//   … inner steps …
//   if (auto s = f.land(traffic, overlap); !s) return s;      // the planes hold the mean Δ

#include <chrono>
#include <cstdint>
#include <functional>
#include <future>
#include <optional>
#include <vector>

#include "paco/collectives/counted.hpp"
#include "paco/net/concepts.hpp"
#include "paco/train/diloco_allreduce.hpp"

namespace paco::train {

template <net::Transport T>
class mean_in_flight {
 public:
  mean_in_flight() = default;
  mean_in_flight(const mean_in_flight&) = delete;
  mean_in_flight& operator=(const mean_in_flight&) = delete;
  // Waits for a flight still running (it holds references to the caller's buffers).
  ~mean_in_flight() {
    if (flight_.valid()) flight_.wait();
  }

  // The reduction: over the counted transport, every step by the options' deadline; payload ←
  // the bytes of this rank's encoded Δ. Its buffers are the caller's.
  using work = std::function<status(collectives::counted<T>&,
                                    const collectives::collective_options&, std::size_t& payload)>;

  // Starts w, then, if hash is given, the check that every rank passed the same one (mismatch
  // naming `what` otherwise). Requires: nothing in flight; every rank launches the same
  // sequence; t and w's buffers are left alone by the caller until land(). Every step must end
  // by `deadline` from now. now: the flight runs on the caller's thread when it lands (a sync
  // applied at once needs no thread).
  void launch(T& t, work w, std::optional<std::uint64_t> hash, const char* what,
              std::chrono::steady_clock::duration deadline, bool now = false) {
    PACO_ASSERT(!flight_.valid(), "mean_in_flight: one flight at a time");
    collectives::collective_options co;
    co.until = net::after(deadline);
    co.order = order_;  // a span into this object, which outlives its flights
    flight_ = std::async(now ? std::launch::deferred : std::launch::async,
                         [=, &t, w = std::move(w)]() -> landed {
                           const auto t0 = std::chrono::steady_clock::now();
                           landed r;
                           collectives::counted<T> ct(t);
                           try {  // a device reduction reports a failed CUDA call so
                             r.s = w(ct, co, r.payload);
                           } catch (const error_exception& e) {
                             r.s = e.err;
                           }
                           if (r.s && hash) r.s = detail::check_identical(ct, *hash, co, what);
                           r.sent = ct.bytes();
                           r.seconds = seconds_since(t0);
                           return r;
                         });
  }

  // The ring order of the reductions launched from now on (collective_options::order): a
  // permutation of 0..p-1 on every rank alike, or empty for rank order.
  // Requires: nothing in flight.
  void set_ring_order(std::vector<int> order) {
    PACO_ASSERT(!flight_.valid(), "mean_in_flight: the ring order changes between flights");
    order_ = std::move(order);
  }

  // Waits for the flight. Ensures: traffic grows by its bytes (and one round), overlap by its
  // seconds on the wire and the seconds waited here; *sent (if given) holds its bytes. Returns
  // the flight's status. Requires: in_flight().
  status land(diloco_traffic& traffic, overlap_stats& overlap, std::size_t* sent = nullptr) {
    const auto t0 = std::chrono::steady_clock::now();
    landed r = flight_.get();
    overlap.wait_s += seconds_since(t0);
    overlap.comm_s += r.seconds;
    traffic.bytes_sent += r.sent;
    traffic.payload_bytes += r.payload;
    ++traffic.rounds;
    if (sent) *sent = r.sent;
    return r.s;
  }

  bool in_flight() const noexcept { return flight_.valid(); }

 private:
  struct landed {
    status s;
    std::size_t sent = 0, payload = 0;
    double seconds = 0;
  };

  static double seconds_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }

  std::vector<int> order_;  // the reductions' ring order (empty: rank order)
  std::future<landed> flight_;
};

}  // namespace paco::train
