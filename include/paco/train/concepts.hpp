#pragma once
// The training layer's concepts. PathWorker is what the round body drives through the store
// (train/store_exchange.hpp, train/worker_loop.hpp): a worker of one path whose store traffic
// goes through its path_buffers (buffers(): what its pushes send, what its fetches brought, the
// round, its modules; train/path_buffers.hpp) and who owns the replica the buffers feed:
// train(n) runs n inner steps (H a round: steps_per_round), prepare_level(l) measures Δ_l =
// θ_start,l − θ_l into the buffers (encoded with its codec, if any), land_level(l, fetched, σ, α)
// lands level l (g_l ← B_l − σ·Δ_l with B_l the fetched module or θ_start,l; θ_start,l ← g_l;
// θ_l ← α·θ_l + (1 − α)·g_l), weigh_from_here makes the next push weigh the steps trained from
// now. A pull is a fetch and a landing of every level at σ = α = 0 (train::pull). Opt in with
// `using path_worker_tag = void;`. Models: train::path_worker (host),
// kernels::path_worker_cuda (kernels/paco/path_worker_cuda.cuh), job::device_path_worker.
//
// Model and LanguageModel belong with the models (nn/concepts.hpp); they are re-exported here
// as train::Model and train::LanguageModel.

#include <concepts>
#include <cstddef>

#include "paco/core/error.hpp"
#include "paco/nn/concepts.hpp"
#include "paco/train/path_buffers.hpp"

namespace paco::train {

using nn::LanguageModel;
using nn::Model;

// clang-format off
template <class W>
concept PathWorker = requires(W& w, const W& cw, std::size_t l, bool b, float x, int n) {
  typename W::path_worker_tag;
  { w.buffers() } -> std::same_as<path_buffers&>;
  { w.train(n) } -> std::convertible_to<double>;
  { cw.steps_per_round() } -> std::convertible_to<int>;
  { w.prepare_level(l) } -> std::same_as<status>;
  w.land_level(l, b, x, x);
  w.weigh_from_here();
};
// clang-format on

}  // namespace paco::train
