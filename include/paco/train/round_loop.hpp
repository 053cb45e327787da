#pragma once
// round_loop: one rank of a data-parallel group joined by an all-reduce — a learner (its arena
// and inner loop, on the host or a device), the group's mean of Δ (the fp32 ring, or a codec
// with error feedback; on a device also NCCL) and a sync rule (train/sync.hpp: blocking DiLoCo,
// Streaming DiLoCo, CO2, eager updates, the naïve delayed rule). Every rule and every backend
// runs through this one loop: a round is H inner steps, run in stretches between the rule's
// sends and landings; a send measures Δ of a fragment and reduces it on a background thread
// (mean_in_flight), a landing applies the outer step as sync.hpp says. The plane work is the
// backend's (round_planes<B, O>, train/round_planes.hpp; the device's in
// kernels/paco/round_planes_cuda.cuh, with kernels::learner_cuda as the learner). Every rank
// runs the same calls; every rank's g is checked to be the same (a fingerprint with every
// send) when the rule keeps it so.
//
//   train::round_loop<net::asio_tcp, train::path_worker<nn::gpt, optim::adamw>, outer::nesterov>
//       r(tcp, worker, outer::nesterov{}, train::co2{});
//   r.run(rounds, std::chrono::minutes(5));
//   r.finish(std::chrono::minutes(5));  // the param plane holds the outer parameters
//
// Codecs: none (fp32), or one per fragment (host: fragment_codecs, for the whole plane also
// diloco_codec; device: kernels::device_mean), the same on every rank. The error-feedback
// residual of a fragment that is one span of the plane (the whole plane, P = 1) is the
// learner's plane::residual.
//
// Checkpoints (replica_file.hpp), for host learners and rules where nothing is in flight
// between rounds (lag 0, one fragment: blocking, streaming with P = 1 and τ = 0): after
// open_checkpoints(dir, config, resume, deadline) a rank saves its whole state after a round with
// save_round — its arena (θ, g, moments, residual), the outer state, its inner step and its
// sampler's position — so that a run stopped after round k and resumed goes on bit for bit as one
// that never stopped.
//
// Optimizer states on their own periods (train/state_sync.hpp, DES-LOC's idea): after
// set_state_periods, the learner's moment planes are averaged over the group after every k-th
// round, before the next round's first step (a run that ends there sends nothing for them), their
// bytes counted with that round's; host learners under rules with nothing in flight between
// rounds.
//
// Threads: from a send until its landing the background flight uses the transport, the codec
// and the residual; nothing else may use the transport between run() and finish() (MPI: the
// serialized thread level net::mpi asks for suffices). Memory beyond the learner's: the
// planes' (round_planes.hpp).

#include <algorithm>
#include <chrono>
#include <concepts>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "paco/collectives/agree.hpp"
#include "paco/collectives/allreduce_ring.hpp"
#include "paco/core/arena.hpp"
#include "paco/core/backend.hpp"
#include "paco/net/concepts.hpp"
#include "paco/outer/concepts.hpp"
#include "paco/train/diloco_allreduce.hpp"
#include "paco/train/fragments.hpp"
#include "paco/train/mean_in_flight.hpp"
#include "paco/train/replica_file.hpp"
#include "paco/train/round_body.hpp"
#include "paco/train/round_planes.hpp"
#include "paco/train/state_sync.hpp"
#include "paco/train/sync.hpp"

namespace paco::train {

// A learner whose state a checkpoint can hold: a host arena, its model (tensor names) and its
// position (inner step and sampler), to seek back to.
template <class L>
concept CheckpointedLearner = Learner<L> && std::same_as<learner_backend<L>, host> &&
    requires(L& l, const L& cl) {
  cl.model();
  {cl.position()};
  l.seek(cl.position());
};

namespace detail {
// The all-reduce as the round body's Exchange: the backend's plane work (round_planes) and the
// reduction of a fragment's Δ over the ranks on a background thread (mean_in_flight), with the
// check of g's fingerprint when the rule keeps g the same on every rank.
template <net::Transport T, Learner L, outer::OuterOptimizer O>
class allreduce_exchange {
 public:
  using planes_type = round_planes<learner_backend<L>, O>;
  using codec = typename planes_type::codec;

  // Requires: t, l and frags outlive the exchange; planes_type::check(codecs, frags) is ok.
  allreduce_exchange(T& t, L& l, const std::vector<fragment>& frags, std::vector<codec> codecs,
                     O outer, const sync_plan& plan, const std::string& what)
      : t_(&t), plan_(plan), what_(&what), planes_(l, frags, std::move(codecs), outer, plan) {
    planes_.begin();
  }

  void measure(int p) { planes_.measure(p); }
  void launch(int p, std::chrono::steady_clock::duration deadline, bool now) {
    const auto hash = plan_.identical() ? std::optional(planes_.fingerprint()) : std::nullopt;
    flight_.launch(*t_, planes_.template reduce<T>(p), hash, what_->c_str(), deadline, now);
  }
  bool in_flight() const noexcept { return flight_.in_flight(); }
  status land(std::size_t& bytes) {
    std::size_t sent = 0;
    auto s = flight_.land(traffic_, overlap_, &sent);
    bytes += sent;
    return s;
  }
  void apply(int p, bool landed, bool fresh) { planes_.apply(p, landed, fresh); }
  void clear_fresh() { planes_.clear_fresh(); }
  void settle() { planes_.settle(); }
  bool done() const noexcept { return false; }
  // θ ← g and, when the rule keeps g the same on every rank, the check that it is.
  status end(std::chrono::steady_clock::duration deadline) {
    planes_.end();
    planes_.settle();
    if (!plan_.identical()) return {};
    return check_identical_within(*t_, planes_.fingerprint(), deadline, what_->c_str(), traffic_);
  }

  planes_type& planes() noexcept { return planes_; }
  const planes_type& planes() const noexcept { return planes_; }
  mean_in_flight<T>& flight() noexcept { return flight_; }
  diloco_traffic& traffic() noexcept { return traffic_; }
  const diloco_traffic& traffic() const noexcept { return traffic_; }
  const overlap_stats& overlap() const noexcept { return overlap_; }

 private:
  T* t_;
  sync_plan plan_;
  const std::string* what_;  // the rule's name, for errors
  planes_type planes_;
  diloco_traffic traffic_;
  overlap_stats overlap_;     // the flights' seconds (the inner steps' are the body's)
  mean_in_flight<T> flight_;  // last: destroyed first, waiting for a flight still running
};
}  // namespace detail

template <net::Transport T, Learner L, outer::OuterOptimizer O, Sync S = sync_choice>
class round_loop {
  using exchange = detail::allreduce_exchange<T, L, O>;

 public:
  using planes_type = typename exchange::planes_type;
  using codec = typename planes_type::codec;

  // Requires: t, l outlive the loop; l's param plane holds this rank's θ, the same on every
  // rank; frags cover the layout once (empty: whole_plane); codecs empty or one per fragment
  // (planes_type::check). A bad rule, fragments or codecs are reported by run() and finish()
  // (nothing runs). Throws what the planes throw (a device without room for its buffers).
  round_loop(T& t, L& l, O outer, S sync = {}, std::vector<fragment> frags = {},
             std::vector<codec> codecs = {})
      : t_(&t),
        l_(&l),
        sync_(std::move(sync)),
        name_(sync_.name()),
        frags_(frags.empty() ? whole_plane(l.state().layout()) : std::move(frags)) {
    auto plan = sync_.plan(t.size(), frags_.size(), l.steps_per_round());
    ok_ = plan ? check_fragments(l.state().layout(), frags_) : status(plan.error());
    if (ok_) ok_ = planes_type::check(codecs, frags_, name_);
    if (!ok_) return;
    plan_ = *plan;
    x_.emplace(t, l, frags_, std::move(codecs), outer, plan_, name_);
    body_.emplace(*x_, l, plan_, frags_.size());
  }
  round_loop(const round_loop&) = delete;
  round_loop& operator=(const round_loop&) = delete;
  // A sync still in flight is waited for (the exchange's flight is destroyed first).

  // n rounds of H inner steps, sending and landing fragments on the rule's schedule; every
  // sync must land within deadline of its send. on_round after each round. Ensures on ok: the
  // param plane holds θ after n·H more steps; a sync may be in flight (finish() lands it).
  // Errors: the rule's, fragments' or codecs' (nothing run); the all-reduce's (timeout,
  // peer_lost …), mismatch if the ranks' g diverged; an error_exception thrown by the learner,
  // the planes (a failed CUDA call) or on_round; after an error the loop cannot go on.
  status run(int n, std::chrono::steady_clock::duration deadline,
             const std::function<void(const round_end&)>& on_round = {}) {
    if (!ok_) return ok_;
    try {
      return fail(body_->run(n, deadline, before_round(deadline), on_round));
    } catch (const error_exception& e) {
      return fail(e.err);
    }
  }

  // Lands the sync in flight (a one-round-late one with no fresh Δ: u = mean Δ − σ·own Δ),
  // syncs every fragment trained since its last send at once, sets θ ← g and, when the rule
  // keeps g the same on every rank, checks it. Ensures on ok: the param and anchor planes hold
  // the outer parameters; nothing is in flight (run() may go on from there). Errors: as run's.
  status finish(std::chrono::steady_clock::duration deadline) {
    if (!ok_) return ok_;
    try {
      if (auto s = body_->finish(deadline); !s) return fail(s);
      return fail(x_->end(deadline));
    } catch (const error_exception& e) {
      return fail(e.err);
    }
  }

  // The ring order of the syncs' all-reduces from now on (collective_options::order), e.g. the
  // links' measured one (place::measured_ring_order); the same on every rank. Empty: rank
  // order. Requires: no sync in flight (between runs). Ensures: ok, or invalid_argument (not a
  // permutation of 0..size-1; a sync in flight) and nothing changed.
  status set_ring_order(std::vector<int> order) {
    if (in_flight())
      return {errc::invalid_argument, "round_loop::set_ring_order: a sync is in flight"};
    if (!order.empty()) {
      std::vector<int> sorted = order;
      std::sort(sorted.begin(), sorted.end());
      for (int i = 0; i < t_->size(); ++i)
        if (sorted.size() != std::size_t(t_->size()) || sorted[std::size_t(i)] != i)
          return {errc::invalid_argument, "round_loop::set_ring_order: not a permutation of 0.." +
                                              std::to_string(t_->size() - 1)};
    }
    if (x_) x_->flight().set_ring_order(std::move(order));
    return {};
  }

  // Averages the inner optimizer's states on these periods from now on (the same on every rank).
  // Errors (nothing changed): the periods' validate(); unsupported for a device learner or a
  // rule that keeps a sync in flight between rounds (the averages would share the transport).
  status set_state_periods(state_periods k) {
    if (!ok_) return ok_;
    if (auto s = k.validate(); !s) return s;
    if (!k.any()) return states_ = k, status{};
    if constexpr (!std::same_as<learner_backend<L>, host>)
      return {errc::unsupported, "optimizer state sync: host learners only (not yet on a device)"};
    if (plan_.next_round() || plan_.lag != 0)
      return {errc::unsupported, "optimizer state sync: the " + sync_.name() +
                                     " rule keeps a sync in flight between rounds; use blocking "
                                     "or streaming without overlap"};
    states_ = k;
    return {};
  }
  // Bytes this rank sent averaging optimizer states (also counted in traffic().bytes_sent).
  std::size_t state_bytes() const noexcept { return state_bytes_; }

  long rounds_done() const noexcept { return body_ ? body_->rounds_done() : 0; }
  long step() const noexcept { return body_ ? body_->step() : 0; }  // inner steps run by this loop
  bool in_flight() const noexcept { return x_ && x_->in_flight(); }
  const train::diloco_traffic& traffic() const noexcept {
    return x_ ? x_->traffic() : no_traffic_;
  }  // rounds: syncs
  overlap_stats overlap() const noexcept {
    overlap_stats o = x_ ? x_->overlap() : overlap_stats{};
    if (body_) o.inner_s = body_->inner_seconds();
    return o;
  }
  const std::vector<sync_record>& syncs() const noexcept {
    return body_ ? body_->syncs() : no_syncs_;
  }
  const std::vector<fragment>& fragments() const noexcept { return frags_; }
  const sync_plan& plan() const noexcept { return plan_; }
  const S& sync() const noexcept { return sync_; }
  // The backend's plane work (the device's: its PCIe transfers).
  const planes_type& planes() const noexcept {
    PACO_ASSERT(x_.has_value(), "round_loop: no planes (the rule, fragments or codecs failed)");
    return x_->planes();
  }

  // Collective: every rank calls it once, before its first round, with the same `resume`; dir
  // is this rank's directory (it may differ between machines).
  // resume = false: creates dir; refuses one that holds a file of this rank (a fresh run does
  //   not overwrite checkpoints).
  // resume = true: the group resumes from the newest round every rank holds a file of (the
  //   minimum over the ranks of each one's newest); each rank reads its file of that round
  //   (load_replica_file: rank, size, round and config checked) and takes back its arena, outer
  //   state, inner step and sampler position; its files of later rounds are removed.
  // Ensures: ok on every rank or an error on every rank (collectives::agree_ok): the rank that
  //   failed names its error (a rule with syncs in flight between rounds; a missing, foreign or
  //   other-config file; a codec whose state a checkpoint does not hold: checkpointable), the
  //   others "rank R: <its error>". On ok after a resume, rounds_done() is the round after the
  //   file's.
  status open_checkpoints(const std::filesystem::path& dir, const std::string& config, bool resume,
                          std::chrono::steady_clock::duration deadline) requires
      CheckpointedLearner<L> {
    collectives::collective_options co;
    co.until = net::after(deadline);
    const int rank = t_->rank(), size = t_->size();
    const std::vector<long> mine = replica_rounds(dir, rank);
    status local = checkpoints_possible();
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
          load_replica_file(replica_file(dir, rank, round), l_->model(), rank, size, round, config);
      if (c)
        ck = std::move(*c);
      else
        local = c.error();
    }
    if (auto s = collectives::agree_ok(*t_, local, co); !s) return s;
    restore(*ck);
    body_->resume_at(round + 1);
    for (long k : mine)
      if (k > round) std::filesystem::remove(replica_file(dir, rank, k), ec);
    return {};
  }

  // Writes this rank's checkpoint of its last round to replica_file(dir, rank, round) (tried
  // `attempts` times) and removes its file of two rounds before, so that the newest two are on
  // disk (the ranks' newest files differ by at most one round). Requires: rounds_done() ≥ 1.
  // Errors: save_replica_file's (io, naming the file); checkpoints_possible's.
  status save_round(const std::filesystem::path& dir, const std::string& config,
                    int attempts = 4) requires CheckpointedLearner<L> {
    if (auto s = checkpoints_possible(); !s) return s;
    if (rounds_done() < 1) return {errc::invalid_argument, "round_loop: no round to save yet"};
    auto& a = l_->state();
    const auto& state = x_->planes().outer_state(0);
    if (!state.empty()) std::copy(state.begin(), state.end(), a.get(plane::outer_momentum).begin());
    const int rank = t_->rank();
    const long round = rounds_done() - 1;
    const auto at = l_->position();
    if (auto s = save_replica_file(replica_file(dir, rank, round), l_->model(), a, at.step,
                                   at.sampler, round, rank, t_->size(), config, attempts);
        !s)
      return s;
    std::error_code ec;
    if (round >= 2) std::filesystem::remove(replica_file(dir, rank, round - 2), ec);
    return {};
  }

 private:
  // Before each round after the first: the optimizer states due after round `done`, averaged
  // before the next round's first step.
  typename round_body<exchange, L>::before_round before_round(
      std::chrono::steady_clock::duration deadline) {
    if constexpr (std::same_as<learner_backend<L>, host>) {
      if (!states_.any()) return {};
      return [this, deadline](long done, std::size_t& bytes) -> status {
        if (done == 0) return {};
        std::size_t sb = 0;
        if (auto s = sync_states(*t_, l_->state(), states_, done, deadline, sb); !s) return s;
        state_bytes_ += sb;
        x_->traffic().bytes_sent += sb;
        bytes += sb;
        return {};
      };
    } else {
      return {};
    }
  }

  // After an error the loop's rounds are out of step: every later call returns it.
  status fail(status s) {
    if (!s) ok_ = s;
    return s;
  }
  // Checkpoints hold one outer state in plane::outer_momentum and nothing in flight.
  status checkpoints_possible() const {
    if (!ok_) return ok_;
    if (plan_.next_round() || plan_.lag != 0 || frags_.size() != 1)
      return {errc::unsupported,
              "checkpoints: the " + sync_.name() +
                  " rule keeps a sync in flight between rounds (or several fragments); only "
                  "blocking (and streaming with one fragment and no overlap) checkpoints"};
    if (!x_->planes().codecs().empty())
      if (auto s = checkpointable(x_->planes().codecs()[0].spec()); !s) return s;
    const std::size_t n = l_->state().get(plane::param).size();
    const std::size_t m = x_->planes().outer_state(0).size();
    if (m != 0 && m != n)
      return {errc::unsupported, "checkpoints: an outer optimizer state of " + std::to_string(m) +
                                     " floats for " + std::to_string(n) +
                                     " parameters does not fit a checkpoint"};
    return {};
  }
  // Takes back a checkpoint's planes, outer state, inner step and sampler position.
  void restore(const replica_checkpoint& ck) {
    auto& a = l_->state();
    for (plane p : {plane::param, plane::moment1, plane::moment2, plane::anchor, plane::residual})
      if (ck.state.has(p)) {
        auto src = ck.state.get(p);
        std::copy(src.begin(), src.end(), a.get(p).begin());
      }
    auto& state = x_->planes().outer_state(0);
    if (!state.empty() && ck.state.has(plane::outer_momentum)) {
      auto src = ck.state.get(plane::outer_momentum);
      std::copy(src.begin(), src.end(), state.begin());
    }
    l_->seek({ck.step, ck.sampler});
  }

  T* t_;
  L* l_;
  S sync_;
  std::string name_;  // the rule's, for errors
  std::vector<fragment> frags_;
  status ok_;
  sync_plan plan_{};
  state_periods states_;
  std::size_t state_bytes_ = 0;
  inline static const train::diloco_traffic no_traffic_{};
  inline static const std::vector<sync_record> no_syncs_{};
  std::optional<exchange> x_;                    // engaged when ok_ after construction
  std::optional<round_body<exchange, L>> body_;  // over x_
};

}  // namespace paco::train
