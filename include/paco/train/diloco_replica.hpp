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
//
// Checkpoints (replica_file.hpp): after open_checkpoints(dir, config, resume, deadline), a rank
// saves its whole state after a round with save_round — its arena (θ, anchor, moments, residual),
// the outer optimizer's state, its inner step and its sampler's position — so that a run
// stopped after round k and resumed (open_checkpoints with resume = true) goes on bit for bit
// as one that never stopped:
//
//   r.open_checkpoints(dir, config, resume, deadline);              // collective
//   while (r.rounds_done() < rounds) { r.run(1, deadline); r.save_round(dir, config); }

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "paco/collectives/agree.hpp"
#include "paco/collectives/allreduce_ring.hpp"
#include "paco/collectives/counted.hpp"
#include "paco/compress/module_codec.hpp"
#include "paco/net/concepts.hpp"
#include "paco/outer/concepts.hpp"
#include "paco/train/diloco_allreduce.hpp"
#include "paco/train/path_worker.hpp"
#include "paco/train/replica_file.hpp"

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

  // Collective: every rank calls it once, before its first round, with the same `resume`; dir
  // is this rank's directory (it may differ between machines).
  // resume = false: creates dir; refuses one that holds a file of this rank (a fresh run does
  //   not overwrite checkpoints).
  // resume = true: the group resumes from the newest round every rank holds a file of (the
  //   minimum over the ranks of each one's newest); each rank reads its file of that round
  //   (load_replica_file: rank, size, round and config checked) and takes back its arena, outer
  //   state, inner step and sampler position; its files of later rounds are removed.
  // Ensures: ok on every rank or an error on every rank (collectives::agree_ok): the rank that
  //   failed names its error (a missing, foreign or other-config file; a codec whose state a
  //   checkpoint does not hold: checkpointable), the others "rank R: <its error>". On ok after a
  //   resume, rounds_done() is the round after the file's.
  status open_checkpoints(const std::filesystem::path& dir, const std::string& config, bool resume,
                          std::chrono::steady_clock::duration deadline) {
    collectives::collective_options co;
    co.until = net::after(deadline);
    const int rank = t_->rank(), size = t_->size();
    const std::vector<long> mine = replica_rounds(dir, rank);
    status local = codec_ ? checkpointable(codec_->spec()) : status{};
    if (local) local = outer_state_fits();
    std::error_code ec;
    if (!resume) {
      if (local && !mine.empty())
        local = {errc::invalid_argument,
                 "checkpoint '" + replica_file(dir, rank, mine.back()).string() +
                     "' exists: resume from it or remove it (a fresh run does not overwrite "
                     "checkpoints)"};
      if (local) {
        std::filesystem::create_directories(dir, ec);
        if (ec)
          local = {errc::io, "cannot create the checkpoint directory '" + dir.string() +
                                 "': " + ec.message()};
      }
      return collectives::agree_ok(*t_, local, co);
    }
    std::vector<std::uint64_t> newest{mine.empty() ? 0 : std::uint64_t(mine.back()) + 1};
    if (auto s = collectives::allreduce_ring(*t_, std::span<std::uint64_t>(newest), co,
                                             collectives::minimum{});
        !s)
      return s;
    const long round = long(newest[0]) - 1;  // −1: some rank holds none
    std::optional<replica_checkpoint> ck;
    if (local && mine.empty()) {
      local = {errc::not_found, "no checkpoint of rank " + std::to_string(rank) + " in '" +
                                    dir.string() + "' (files rank-" + std::to_string(rank) +
                                    ".round-K.safetensors)"};
    } else if (local && round >= 0 && !std::binary_search(mine.begin(), mine.end(), round)) {
      std::string held;
      for (long k : mine) held += (held.empty() ? "" : ", ") + std::to_string(k);
      local = {errc::not_found, "checkpoint '" + replica_file(dir, rank, round).string() +
                                    "' is missing: round " + std::to_string(round) +
                                    " is the newest every rank holds; rank " +
                                    std::to_string(rank) + " holds rounds " + held};
    } else if (local && round >= 0) {
      auto c =
          load_replica_file(replica_file(dir, rank, round), w_->model(), rank, size, round, config);
      if (c)
        ck = std::move(*c);
      else
        local = c.error();
    }
    if (auto s = collectives::agree_ok(*t_, local, co); !s) return s;
    restore(*ck);
    done_ = round + 1;
    for (long k : mine)
      if (k > round) std::filesystem::remove(replica_file(dir, rank, k), ec);
    return {};
  }

  // Writes this rank's checkpoint of its last round to replica_file(dir, rank, round) (tried
  // `attempts` times) and removes its file of two rounds before, so that the newest two are on
  // disk (the ranks' newest files differ by at most one round). Requires: rounds_done() ≥ 1.
  // Errors: save_replica_file's (io, naming the file); checkpointable's; outer_state_fits's.
  status save_round(const std::filesystem::path& dir, const std::string& config, int attempts = 4) {
    if (codec_)
      if (auto s = checkpointable(codec_->spec()); !s) return s;
    if (auto s = outer_state_fits(); !s) return s;
    if (done_ < 1) return {errc::invalid_argument, "diloco_replica: no round to save yet"};
    auto& a = w_->state();
    if (!state_.empty())
      std::copy(state_.begin(), state_.end(), a.get(plane::outer_momentum).begin());
    const int rank = t_->rank();
    const long round = done_ - 1;
    const auto at = w_->position();
    if (auto s = save_replica_file(replica_file(dir, rank, round), w_->model(), a, at.step,
                                   at.sampler, round, rank, t_->size(), config, attempts);
        !s)
      return s;
    std::error_code ec;
    if (round >= 2) std::filesystem::remove(replica_file(dir, rank, round - 2), ec);
    return {};
  }

 private:
  // The outer optimizer's state goes to a checkpoint in plane::outer_momentum: it must be 0 or n
  // floats (sgd, nesterov, co2, one_of of them). Errors: unsupported otherwise.
  status outer_state_fits() const {
    const std::size_t n = w_->state().get(plane::param).size();
    if (state_.empty() || state_.size() == n) return {};
    return {errc::unsupported, "diloco_replica: an outer optimizer state of " +
                                   std::to_string(state_.size()) + " floats for " +
                                   std::to_string(n) + " parameters does not fit a checkpoint"};
  }
  // Takes back a checkpoint's planes, outer state, inner step and sampler position.
  void restore(const replica_checkpoint& ck) {
    auto& a = w_->state();
    for (plane p : {plane::param, plane::moment1, plane::moment2, plane::anchor, plane::residual})
      if (ck.state.has(p)) {
        auto src = ck.state.get(p);
        std::copy(src.begin(), src.end(), a.get(p).begin());
      }
    if (!state_.empty() && ck.state.has(plane::outer_momentum)) {
      auto src = ck.state.get(plane::outer_momentum);
      std::copy(src.begin(), src.end(), state_.begin());
    }
    w_->seek({ck.step, ck.sampler});
  }

  T* t_;
  train::path_worker<Model, InnerOpt>* w_;
  O outer_;
  std::optional<compress::module_codec> codec_;
  std::vector<float> state_;
  train::diloco_traffic traffic_;
  long done_ = 0;
};

}  // namespace paco::train
