#pragma once
// diloco_replica: one rank of DiLoCo over an all-reduce, the trainer of k replicas joined by any
// Transport (threads over net::inproc, processes over asio_tcp, ranks under MPI). It owns the
// rank's outer-optimizer state and runs rounds of train::diloco_round: H inner steps, the mean Δ
// by a ring all-reduce (fp32) or through a codec (PowerSGD, int8, top-k, L-GreCo …: summed on
// the wire or all-gathered), the outer step on every rank, and the check that every replica's θ
// is the same. Every rank runs the same calls.
//
//   train::diloco_replica<net::inproc, nn::gpt, optim::adamw, outer::nesterov> r(
//       world[rank], worker, outer::nesterov{}, std::move(codec));
//   r.run(rounds, std::chrono::minutes(5));

#include <chrono>
#include <functional>
#include <optional>
#include <vector>

#include "paco/collectives/counted.hpp"
#include "paco/compress/module_codec.hpp"
#include "paco/net/concepts.hpp"
#include "paco/outer/concepts.hpp"
#include "paco/train/diloco_allreduce.hpp"
#include "paco/train/path_worker.hpp"

namespace paco::train {

template <net::Transport T, class Model, class InnerOpt, outer::OuterOptimizer O>
class diloco_replica {
 public:
  // Requires: t, w outlive the replica; w's arena holds this rank's θ (the same on every rank);
  // codec, when given, is train::diloco_codec of the same compression on every rank.
  diloco_replica(T& t, train::path_worker<Model, InnerOpt>& w, O outer,
                 std::optional<compress::module_codec> codec = std::nullopt)
      : t_(&t),
        w_(&w),
        outer_(outer),
        codec_(std::move(codec)),
        state_(outer.state_size(w.state().get(plane::param).size()), 0.0f) {}

  // n rounds, each within round_deadline; on_round(round, bytes this rank sent in it) after
  // each. Errors: diloco_round's (timeout, peer_lost …; mismatch if the replicas diverged).
  status run(int n, std::chrono::steady_clock::duration round_deadline,
             const std::function<void(long, std::size_t)>& on_round = {}) {
    for (int k = 0; k < n; ++k) {
      train::diloco_options o;
      o.collective.until = net::after(round_deadline);
      const std::size_t before = traffic_.bytes_sent;
      status s;
      if (codec_) {
        s = train::diloco_round(*t_, *w_, *codec_, outer_, state_, traffic_, o);
      } else {  // fp32: the bytes of the all-reduce and the hash check, measured as sent
        collectives::counted<T> ct(*t_);
        s = train::diloco_round(ct, *w_, outer_, state_, o);
        traffic_.bytes_sent += ct.bytes();
        traffic_.payload_bytes += 4 * w_->state().get(plane::param).size();
        ++traffic_.rounds;
      }
      if (!s) return s;
      ++done_;
      if (on_round) on_round(done_ - 1, traffic_.bytes_sent - before);
    }
    return {};
  }

  const train::diloco_traffic& traffic() const noexcept { return traffic_; }
  long rounds_done() const noexcept { return done_; }
  std::span<const float> outer_state() const noexcept { return state_; }

 private:
  T* t_;
  train::path_worker<Model, InnerOpt>* w_;
  O outer_;
  std::optional<compress::module_codec> codec_;
  std::vector<float> state_;
  train::diloco_traffic traffic_;
  long done_ = 0;
};

}  // namespace paco::train
