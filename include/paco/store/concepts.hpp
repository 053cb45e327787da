#pragma once
// The ModuleStore concept: what a path worker asks of the store that holds the grid's modules.
//   pull(m, dst)                    copies module m's θ into dst; returns its round and hash
//   push(m, worker, round, Δ, w)    Δ_m for `round` with shard weight w; refused (mismatch) when
//                                   the round already closed without it
//   wait_closed(m, round, until)    blocks until module m's `round` closed (or until passes)
// Opt in with `using module_store_tag = void;`. Models: local_store (threads of one process),
// client (a store service over any Transport). EncodedModuleStore adds push_encoded (a
// codec's payload instead of fp32 Δ); PacedModuleStore adds push_time_s (the module's push
// pace). rounds_differ: the error of a path pulled at different
// rounds.

#include <chrono>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "paco/core/error.hpp"

namespace paco::store {

// What a pull returns besides the parameters: the module's round and the hash of θ.
struct pulled {
  long round = 0;
  std::uint64_t hash = 0;
};

// The error of a path pulled with its modules at different rounds (after a restart one module's
// round can close before another's): errc::mismatch naming each module's round, so a caller that
// pulls again can tell a store that moves (the modules are aligning) from one that does not.
inline error rounds_differ(int worker, const std::vector<int>& modules,
                           const std::vector<long>& rounds) {
  std::string at;
  for (std::size_t i = 0; i < modules.size() && i < rounds.size(); ++i)
    at += (i ? ", module " : "module ") + std::to_string(modules[i]) + " at round " +
          std::to_string(rounds[i]);
  return {errc::mismatch,
          "modules of worker " + std::to_string(worker) + " are at different rounds (" + at + ")"};
}

template <class S>
concept ModuleStore = requires(S& s, int m, int worker, long round, std::span<float> dst,
                               std::span<const float> delta, double weight,
                               std::chrono::steady_clock::time_point until) {
  typename S::module_store_tag;
  { s.pull(m, dst) } -> std::same_as<result<pulled>>;
  { s.push(m, worker, round, delta, weight) } -> std::same_as<status>;
  { s.wait_closed(m, round, until) } -> std::same_as<status>;
};

// A store that reports each module's push pace (store/push_pace.hpp), which a worker paced by
// measurement trains within (worker_loop_options::pace_measured).
template <class S>
concept PacedModuleStore = ModuleStore<S> && requires(const S& s, int m) {
  { s.push_time_s(m) } -> std::same_as<double>;
};

template <class S>
concept EncodedModuleStore = ModuleStore<S> &&
    requires(S& s, int m, int worker, long round, std::span<const std::byte> payload,
             double weight) {
  { s.push_encoded(m, worker, round, payload, weight) } -> std::same_as<status>;
};

}  // namespace paco::store
