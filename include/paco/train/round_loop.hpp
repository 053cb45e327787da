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
#include "paco/train/round_planes.hpp"
#include "paco/train/state_sync.hpp"
#include "paco/train/sync.hpp"

namespace paco::train {

namespace detail {
template <class A>
struct arena_backend {};
template <Backend B>
struct arena_backend<arena<B>> {
  using type = B;
};
}  // namespace detail

// The backend of a learner's arena.
template <class L>
using learner_backend =
    typename detail::arena_backend<std::remove_cvref_t<decltype(std::declval<L&>().state())>>::type;

// What the round loop trains: an arena on a backend (θ in plane::param; the loop keeps g in
// plane::anchor) and an inner loop that runs n steps on it and returns their mean loss; H, its
// steps per round. Models: train::path_worker (host), kernels::learner_cuda (device).
template <class L>
concept Learner = requires(L& l, const L& cl, int n) {
  typename learner_backend<L>;
  { l.train(n) } -> std::convertible_to<double>;
  { cl.steps_per_round() } -> std::convertible_to<int>;
};

// A learner whose state a checkpoint can hold: a host arena, its model (tensor names) and its
// position (inner step and sampler), to seek back to.
template <class L>
concept CheckpointedLearner = Learner<L> && std::same_as<learner_backend<L>, host> &&
    requires(L& l, const L& cl) {
  cl.model();
  {cl.position()};
  l.seek(cl.position());
};

// One landed sync.
struct sync_record {
  int fragment = 0;
  long sent_at = 0;            // the loop's inner step its Δ was measured at
  long applied_at = 0;         // the inner step its mean was applied at
  std::size_t bytes_sent = 0;  // this rank's bytes on the wire for it, hash check included
};

// The end of a round, for run()'s callback.
struct round_end {
  long round = 0;              // 0, 1, … since the loop began (or since the checkpoint)
  double loss = 0;             // the mean inner loss of its H steps
  std::size_t bytes_sent = 0;  // this rank's bytes of the syncs that landed in it
};

template <net::Transport T, Learner L, outer::OuterOptimizer O, Sync S = sync_choice>
class round_loop {
 public:
  using planes_type = round_planes<learner_backend<L>, O>;
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
        frags_(frags.empty() ? whole_plane(l.state().layout()) : std::move(frags)),
        h_(l.steps_per_round()) {
    auto plan = sync_.plan(t.size(), frags_.size(), h_);
    ok_ = plan ? check_fragments(l.state().layout(), frags_) : status(plan.error());
    if (ok_) ok_ = planes_type::check(codecs, frags_, name_);
    if (!ok_) return;
    plan_ = *plan;
    planes_.emplace(l, frags_, std::move(codecs), outer, plan_);
    planes_->begin();
    last_sent_.assign(frags_.size(), 0);
  }
  round_loop(const round_loop&) = delete;
  round_loop& operator=(const round_loop&) = delete;
  // A sync still in flight is waited for (flight_ is the last member, destroyed first).

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
      return rounds(n, deadline, on_round);
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
      return finish_all(deadline);
    } catch (const error_exception& e) {
      return fail(e.err);
    }
  }

  // The ring order of the syncs' all-reduces from now on (collective_options::order), e.g. the
  // links' measured one (place::measured_ring_order); the same on every rank. Empty: rank
  // order. Requires: no sync in flight (between runs). Ensures: ok, or invalid_argument (not a
  // permutation of 0..size-1; a sync in flight) and nothing changed.
  status set_ring_order(std::vector<int> order) {
    if (flight_.in_flight())
      return {errc::invalid_argument, "round_loop::set_ring_order: a sync is in flight"};
    if (!order.empty()) {
      std::vector<int> sorted = order;
      std::sort(sorted.begin(), sorted.end());
      for (int i = 0; i < t_->size(); ++i)
        if (sorted.size() != std::size_t(t_->size()) || sorted[std::size_t(i)] != i)
          return {errc::invalid_argument, "round_loop::set_ring_order: not a permutation of 0.." +
                                              std::to_string(t_->size() - 1)};
    }
    flight_.set_ring_order(std::move(order));
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

  long rounds_done() const noexcept { return done_; }
  long step() const noexcept { return step_; }  // inner steps run by this loop
  bool in_flight() const noexcept { return flight_.in_flight(); }
  const train::diloco_traffic& traffic() const noexcept { return traffic_; }  // rounds: syncs
  const overlap_stats& overlap() const noexcept { return overlap_; }
  const std::vector<sync_record>& syncs() const noexcept { return syncs_; }
  const std::vector<fragment>& fragments() const noexcept { return frags_; }
  const sync_plan& plan() const noexcept { return plan_; }
  const S& sync() const noexcept { return sync_; }
  // The backend's plane work (the device's: its PCIe transfers).
  const planes_type& planes() const noexcept {
    PACO_ASSERT(planes_.has_value(),
                "round_loop: no planes (the rule, fragments or codecs failed)");
    return *planes_;
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
    done_ = round + 1;
    step_ = done_ * h_;
    std::fill(last_sent_.begin(), last_sent_.end(), step_);
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
    if (done_ < 1) return {errc::invalid_argument, "round_loop: no round to save yet"};
    auto& a = l_->state();
    const auto& state = planes_->outer_state(0);
    if (!state.empty()) std::copy(state.begin(), state.end(), a.get(plane::outer_momentum).begin());
    const int rank = t_->rank();
    const long round = done_ - 1;
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
  static double seconds(std::chrono::steady_clock::duration d) {
    return std::chrono::duration<double>(d).count();
  }
  long c() const { return h_ / long(frags_.size()); }
  // Whether a fragment is sent at the current step (c | s, s ≥ H).
  bool sends_now() const { return step_ % c() == 0 && step_ / c() >= long(frags_.size()); }
  // The first step after the current one at which a fragment is sent.
  long next_send() const {
    const long k = std::max(step_ / c() + 1, long(frags_.size()));
    return k * c();
  }
  const char* what() const { return name_.c_str(); }

  // run()'s and finish()'s work; a CUDA failure throws.
  status rounds(int n, std::chrono::steady_clock::duration deadline,
                const std::function<void(const round_end&)>& on_round) {
    using clock = std::chrono::steady_clock;
    for (int r = 0; r < n; ++r) {
      const long end = step_ + h_;
      double loss = 0;
      std::size_t bytes = 0;
      // The states due after round done_, averaged before the next round's first step.
      if constexpr (std::same_as<learner_backend<L>, host>)
        if (states_.any() && done_ > 0) {
          std::size_t sb = 0;
          if (auto s = sync_states(*t_, l_->state(), states_, done_, deadline, sb); !s)
            return fail(s);
          state_bytes_ += sb;
          traffic_.bytes_sent += sb;
          bytes += sb;
        }
      while (step_ < end) {
        long next = std::min(end, next_send());
        if (flight_.in_flight() && !plan_.next_round()) next = std::min(next, apply_at_);
        const auto t0 = clock::now();
        loss += l_->train(int(next - step_)) * double(next - step_);
        overlap_.inner_s += seconds(clock::now() - t0);
        step_ = next;
        if (flight_.in_flight() && !plan_.next_round() && step_ == apply_at_)
          if (auto s = land_and_apply(false, bytes); !s) return fail(s);
        if (sends_now())
          if (auto s = send(int((step_ / c()) % long(frags_.size())), deadline, bytes); !s)
            return fail(s);
      }
      ++done_;
      planes_->settle();
      if (on_round) on_round({done_ - 1, loss / double(h_), bytes});
    }
    return {};
  }

  status finish_all(std::chrono::steady_clock::duration deadline) {
    std::size_t bytes = 0;
    if (flight_.in_flight())
      if (auto s = land_and_apply(plan_.next_round(), bytes); !s) return fail(s);
    for (std::size_t p = 0; p < frags_.size(); ++p)
      if (last_sent_[p] < step_) {
        planes_->measure(int(p));
        launch(int(p), deadline);
        if (auto s = land_and_apply(false, bytes); !s) return fail(s);
      }
    planes_->end();
    planes_->settle();
    if (!plan_.identical()) return {};
    return detail::check_identical_within(*t_, planes_->fingerprint(), deadline, what(), traffic_);
  }

  // After an error the loop's rounds are out of step: every later call returns it.
  status fail(status s) {
    ok_ = s;
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
    if (!planes_->codecs().empty())
      if (auto s = checkpointable(planes_->codecs()[0].spec()); !s) return s;
    const std::size_t n = l_->state().get(plane::param).size();
    const std::size_t m = planes_->outer_state(0).size();
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
    auto& state = planes_->outer_state(0);
    if (!state.empty() && ck.state.has(plane::outer_momentum)) {
      auto src = ck.state.get(plane::outer_momentum);
      std::copy(src.begin(), src.end(), state.begin());
    }
    l_->seek({ck.step, ck.sampler});
  }

  // A send of fragment p: Δ_p measured; a one-round-late rule lands its last sync first and
  // applies it with the fresh Δ (the first round: σ·Δ alone); then Δ_p is launched (and landed
  // at once with lag 0).
  status send(int p, std::chrono::steady_clock::duration deadline, std::size_t& bytes) {
    planes_->measure(p);
    if (plan_.next_round()) {
      if (flight_.in_flight()) {
        if (auto s = land(bytes); !s) return s;
        planes_->apply(flying_, true, true);
      } else {
        planes_->apply(p, false, true);
      }
    } else if (flight_.in_flight()) {  // unreachable with lag < c; a sync is never dropped
      if (auto s = land_and_apply(false, bytes); !s) return s;
    }
    launch(p, deadline);
    if (!plan_.next_round() && plan_.lag == 0) return land_and_apply(false, bytes);
    return {};
  }

  // Launches the reduction of fragment p's measured Δ and, when the rule keeps g the same on
  // every rank, the check of g's fingerprint. Only the flight touches the transport and the
  // buffers of the reduction until it lands.
  void launch(int p, std::chrono::steady_clock::duration deadline) {
    last_sent_[std::size_t(p)] = step_;
    flying_ = p;
    apply_at_ = step_ + plan_.lag;
    const auto hash = plan_.identical() ? std::optional(planes_->fingerprint()) : std::nullopt;
    flight_.launch(*t_, planes_->template reduce<T>(p), hash, what(), deadline,
                   plan_.lag == 0 && !plan_.next_round());
  }

  status land(std::size_t& bytes) {
    std::size_t sent = 0;
    if (auto s = flight_.land(traffic_, overlap_, &sent); !s) return s;
    bytes += sent;
    syncs_.push_back({flying_, last_sent_[std::size_t(flying_)], step_, sent});
    return {};
  }
  // Lands the flight and applies it; fresh_zero: a one-round-late rule's finish (Δ^fresh = 0).
  status land_and_apply(bool fresh_zero, std::size_t& bytes) {
    if (auto s = land(bytes); !s) return s;
    if (fresh_zero) planes_->clear_fresh();
    planes_->apply(flying_, true, fresh_zero);
    return {};
  }

  T* t_;
  L* l_;
  S sync_;
  std::string name_;  // the rule's, for errors
  std::vector<fragment> frags_;
  long h_;
  status ok_;
  sync_plan plan_{};
  std::optional<planes_type> planes_;  // engaged when ok_ after construction
  std::vector<long> last_sent_;        // the step each fragment was last sent at
  std::vector<sync_record> syncs_;
  int flying_ = 0;
  long apply_at_ = 0;
  long step_ = 0;
  long done_ = 0;
  train::diloco_traffic traffic_;
  overlap_stats overlap_;
  state_periods states_;
  std::size_t state_bytes_ = 0;
  mean_in_flight<T> flight_;  // last: destroyed first, waiting for a flight still running
};

}  // namespace paco::train
