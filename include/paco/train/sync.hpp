#pragma once
// sync: the rule by which the replicas of a data-parallel group exchange their progress — when a
// replica sends its pseudo-gradient, when the mean comes back, and how it is applied. The one
// round loop (train/round_loop.hpp) runs every rule; a rule is a plan of four numbers over the
// same mechanism:
//
//   The parameters are cut into P fragments (train/fragments.hpp; P = 1: the whole plane). The
//   anchor plane holds g, the last global value of each fragment; θ is the live parameters; a
//   round is H inner steps; c = H/P. Fragment p is sent at every inner step s with c | s and
//   s ≥ H + p·c (the fragments staggered by c):
//       Δ_p = g_p − θ_p;  the mean of Δ_p over the k ranks is reduced in the background
//   and lands `lag` steps later (0 ≤ lag < c, or lag = H: at the fragment's next send, one
//   round late, where the next Δ_p is measured first), where it is applied:
//       u   = mean Δ_p + σ·(Δ_p^fresh − Δ_p^own)     (σ > 0 only with lag = H: the Δ_p measured
//                                                    now, and the one in the mean that landed)
//       g_p ← OuterOpt_p(g_p, u);  θ_p ← α·θ_p + (1 − α)·g_p
//   A send with lag = H and nothing in flight (the first round) applies u = σ·Δ_p^fresh (no
//   outer step at all when σ = 0). finish() lands what is in flight (Δ^fresh = 0), syncs every
//   fragment trained since its last send at once, and sets θ ← g.
//
// The rules (plan(k): k ranks):
//   blocking        P = 1, lag 0,   α = 0, σ = 0     DiLoCo (Douillard et al. 2023)
//   streaming       P ≥ 1, lag τ,   α,     σ = 0     Streaming DiLoCo (Douillard et al. 2025;
//                                                    ALGORITHMS.md §6.1), τ < H/P
//   co2             P = 1, lag H,   α = 0, σ = 1     CO2's overlap as a delay-corrected merge,
//                                                    made deterministic (ALGORITHMS.md §2.1):
//                                                    each rank goes on from its own θ and the late
//                                                    mean replaces its own stale Δ. paco's reading
//                                                    of the paper's intent, not what the official
//                                                    fairscale-CO2 code runs (its default path
//                                                    blocks on a fresh mean; its asynchronous
//                                                    path copies the averaged snapshot over the
//                                                    live θ, dropping the steps taken meanwhile).
//   co2_snapshot    P = 1, lag τ,   α = 0, σ = 0     the official CO2 code's asynchronous path
//                                                    in its deterministic limit (a
//                                                    reconstruction): the averaged snapshot of
//                                                    θ taken at a round's end lands τ ≥ 1 steps
//                                                    later and is copied over the live θ, the τ
//                                                    steps taken meanwhile dropped — Streaming
//                                                    DiLoCo with one fragment and α = 0
//   eager           P = 1, lag H,   α = 0, σ = 1/k   eager updates (Kale et al. 2025, §6.3): the
//                                                    own fresh Δ stands in for its share
//   naive_delayed   P = 1, lag H,   α = 0, σ = 0     Kale et al.'s naïve one-step-delayed
//                                                    baseline (their Algorithm 2), kept for the
//                                                    ablation; paco called it CO2 until 2026-11
// With outer SGD at rate η: blocking θ = x_0 − η Σ_s mean Δ_s; co2 and eager, after round t's
// send, θ = x_0 − η(Σ_{s<t} mean Δ_s + σ·Δ_t) (with one rank, η = 1 and no momentum: plain
// continuous training); naive_delayed is not continuous training even then. With σ = 0 every
// rank holds the same g (checked by a hash at every send); with σ > 0 they differ by design.
//
// A rule is a type modelling Sync: it opts in with `using sync_tag = void;`, names itself and
// gives its plan for k ranks and P fragments (errors: a parameter out of range, named). Models:
// blocking, streaming, co2, co2_snapshot, eager, naive_delayed, and sync_choice (one of them,
// chosen at run time: `parse_sync("co2")`).

#include <algorithm>
#include <concepts>
#include <cstddef>
#include <string>
#include <variant>

#include "paco/core/error.hpp"

namespace paco::train {

// A rule's four numbers (see the file comment).
struct sync_plan {
  enum class landing { after_steps, next_round };
  landing lands = landing::after_steps;
  int lag = 0;             // steps from a send to its landing (landing::after_steps)
  float alpha = 0.0f;      // θ_p ← α·θ_p + (1 − α)·g_p on landing
  float own_share = 0.0f;  // σ: how much of its own fresh Δ a rank applies before the mean
  // Whether every rank holds the same g (σ = 0): a hash of g is checked with every send.
  bool identical() const noexcept { return own_share == 0.0f; }
  // Whether a sync lands one round late, at the fragment's next send.
  bool next_round() const noexcept { return lands == landing::next_round; }
};

template <class S>
concept Sync = std::copy_constructible<S> &&
    requires(const S& s, int ranks, std::size_t fragments, int steps_per_round) {
  typename S::sync_tag;
  { s.name() } -> std::convertible_to<std::string>;
  { s.plan(ranks, fragments, steps_per_round) } -> std::same_as<result<sync_plan>>;
};

namespace detail {
// p, the plan of a rule that syncs the whole plane as one fragment. Errors: invalid_argument
// naming the rule for more fragments.
inline result<sync_plan> one_fragment(const char* rule, std::size_t fragments, sync_plan p) {
  if (fragments != 1)
    return error(errc::invalid_argument, std::string(rule) + " syncs the whole parameter plane: " +
                                             std::to_string(fragments) +
                                             " fragments given (only streaming takes fragments)");
  return p;
}
}  // namespace detail

// DiLoCo: the mean of the round's Δ applied at once, every rank waiting for it.
struct blocking {
  using sync_tag = void;
  std::string name() const { return "blocking"; }
  result<sync_plan> plan(int, std::size_t fragments, int) const {
    return detail::one_fragment("blocking", fragments, {});
  }
};

// Streaming DiLoCo: P staggered fragments, each sync landing τ steps after its send, mixed in
// with α. With one fragment, τ = 0 and α = 0 it is blocking.
struct streaming {
  using sync_tag = void;
  int overlap = 0;     // τ: inner steps a sync runs behind before it is applied
  float alpha = 0.0f;  // θ_p ← α·θ_p + (1 − α)·g_p on receipt (0: take the global value)
  std::string name() const { return "streaming"; }
  // Errors: invalid_argument unless H ≥ 1 is a multiple of P ≥ 1, 0 ≤ τ < H/P (one sync in
  // flight at a time) and 0 ≤ α ≤ 1.
  result<sync_plan> plan(int, std::size_t fragments, int steps_per_round) const {
    const long p = long(fragments), h = steps_per_round;
    if (p < 1) return error(errc::invalid_argument, "streaming: no fragments");
    if (h < 1 || h % p != 0)
      return error(errc::invalid_argument,
                   "streaming: the inner steps per round (H = " + std::to_string(h) +
                       ") must be a positive multiple of the " + std::to_string(p) + " fragments");
    if (overlap < 0 || overlap >= h / p)
      return error(errc::invalid_argument, "streaming: overlap (τ = " + std::to_string(overlap) +
                                               ") must be in [0, H/P = " + std::to_string(h / p) +
                                               ")");
    if (!(alpha >= 0 && alpha <= 1))
      return error(errc::invalid_argument, "streaming: alpha must be in [0, 1]");
    return sync_plan{.lag = overlap, .alpha = alpha};
  }
};

// CO2's overlap as a delay-corrected merge, deterministic: the own fresh Δ applied in full, the
// late mean swapped for the own stale Δ (a reconstruction of the paper's intent; see above).
struct co2 {
  using sync_tag = void;
  std::string name() const { return "co2"; }
  result<sync_plan> plan(int, std::size_t fragments, int) const {
    return detail::one_fragment("co2", fragments,
                                {.lands = sync_plan::landing::next_round, .own_share = 1.0f});
  }
};

// The official CO2 code's asynchronous path made deterministic (see above): a round's averaged
// snapshot overwrites θ τ steps later.
struct co2_snapshot {
  using sync_tag = void;
  int overlap = 1;  // τ: the inner steps between the snapshot and its write-back, in [1, H)
  std::string name() const { return "co2_snapshot"; }
  // Errors: invalid_argument unless P = 1 and 1 ≤ τ < H.
  result<sync_plan> plan(int, std::size_t fragments, int steps_per_round) const {
    if (overlap < 1 || overlap >= steps_per_round)
      return error(errc::invalid_argument,
                   "co2_snapshot: overlap (τ = " + std::to_string(overlap) +
                       ") must be in [1, H = " + std::to_string(steps_per_round) + ")");
    return detail::one_fragment("co2_snapshot", fragments, {.lag = overlap});
  }
};

// Eager updates: the own fresh Δ stands in for its share 1/k of the mean until the mean lands.
struct eager {
  using sync_tag = void;
  std::string name() const { return "eager"; }
  result<sync_plan> plan(int ranks, std::size_t fragments, int) const {
    if (ranks < 1) return error(errc::invalid_argument, "eager: no ranks");
    return detail::one_fragment(
        "eager", fragments,
        {.lands = sync_plan::landing::next_round, .own_share = 1.0f / float(ranks)});
  }
};

// The naïve one-step-delayed rule (not CO2): every rank restarts from a global model lacking its
// own last round, the mean measured one round earlier applied on top.
struct naive_delayed {
  using sync_tag = void;
  std::string name() const { return "naive_delayed"; }
  result<sync_plan> plan(int, std::size_t fragments, int) const {
    return detail::one_fragment("naive_delayed", fragments,
                                {.lands = sync_plan::landing::next_round});
  }
};

// One of the rules, chosen at run time (a flag, a config field).
class sync_choice {
 public:
  using sync_tag = void;
  sync_choice() = default;
  template <class S>
  requires(!std::same_as<S, sync_choice> && Sync<S>) sync_choice(S s) : v_(std::move(s)) {}
  std::string name() const {
    return std::visit([](const auto& s) { return s.name(); }, v_);
  }
  result<sync_plan> plan(int ranks, std::size_t fragments, int steps_per_round) const {
    return std::visit([&](const auto& s) { return s.plan(ranks, fragments, steps_per_round); }, v_);
  }
  // The held rule, if it is an S.
  template <class S>
  const S* get_if() const noexcept {
    return std::get_if<S>(&v_);
  }

 private:
  std::variant<blocking, streaming, co2, co2_snapshot, eager, naive_delayed> v_;
};

// "blocking" | "streaming" | "co2" | "co2_snapshot" | "eager" | "naive_delayed" (streaming with
// τ and α given; co2_snapshot with st's τ, at least 1).
// Errors: invalid_argument naming the accepted values (and, for "delayed" and "none", what
// became of them).
inline result<sync_choice> parse_sync(const std::string& s, streaming st = {}) {
  if (s == "blocking") return sync_choice(blocking{});
  if (s == "streaming") return sync_choice(st);
  if (s == "co2") return sync_choice(co2{});
  if (s == "co2_snapshot") return sync_choice(co2_snapshot{.overlap = std::max(1, st.overlap)});
  if (s == "eager") return sync_choice(eager{});
  if (s == "naive_delayed") return sync_choice(naive_delayed{});
  if (s == "delayed")
    return error(errc::invalid_argument,
                 "sync: 'delayed' is now 'naive_delayed' (Kale et al.'s naive one-step-delayed "
                 "baseline, which is not CO2); CO2's overlap as a delay-corrected merge is "
                 "'co2'");
  if (s == "none")
    return error(errc::invalid_argument, "sync: 'none' is now 'blocking' (DiLoCo, no overlap)");
  return error(errc::invalid_argument, "sync: '" + s +
                                           "' is not one of blocking, streaming, co2, "
                                           "co2_snapshot, eager, naive_delayed");
}

static_assert(Sync<blocking> && Sync<streaming> && Sync<co2> && Sync<co2_snapshot> && Sync<eager> &&
              Sync<naive_delayed> && Sync<sync_choice>);

}  // namespace paco::train
