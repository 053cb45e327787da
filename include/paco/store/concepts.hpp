#pragma once
// The ModuleStore concept: what a path worker asks of the store that holds the grid's modules.
//   pull(m, dst)                    copies module m's θ into dst; returns its round and hash
//   push(m, worker, round, Δ, w)    Δ_m for `round` with shard weight w; refused (mismatch) when
//                                   the round already closed without it
//   wait_closed(m, round, until)    blocks until module m's `round` closed (or until passes)
// Opt in with `using module_store_tag = void;`. Models: local_store (threads of one process),
// client (a store service over any Transport). EncodedModuleStore adds push_encoded (a
// codec's payload instead of fp32 Δ).

#include <chrono>
#include <concepts>
#include <cstddef>
#include <span>

#include "paco/core/error.hpp"

namespace paco::store {

// What a pull returns besides the parameters: the module's round and the hash of θ.
struct pulled {
  long round = 0;
  std::uint64_t hash = 0;
};

template <class S>
concept ModuleStore = requires(S& s, int m, int worker, long round, std::span<float> dst,
                               std::span<const float> delta, double weight,
                               std::chrono::steady_clock::time_point until) {
  typename S::module_store_tag;
  { s.pull(m, dst) } -> std::same_as<result<pulled>>;
  { s.push(m, worker, round, delta, weight) } -> std::same_as<status>;
  { s.wait_closed(m, round, until) } -> std::same_as<status>;
};

template <class S>
concept EncodedModuleStore = ModuleStore<S> &&
    requires(S& s, int m, int worker, long round, std::span<const std::byte> payload,
             double weight) {
  { s.push_encoded(m, worker, round, payload, weight) } -> std::same_as<status>;
};

}  // namespace paco::store
