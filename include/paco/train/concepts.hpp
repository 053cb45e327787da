#pragma once
// The training layer's concepts. PathWorker is what the round body drives through the store
// (train/store_exchange.hpp, train/worker_loop.hpp): a worker of one path that pulls its
// modules, trains n inner steps (H a round), measures Δ of the path or of one level into buffers
// of its own (prepare, prepare_level), pushes them (send, send_level: from another thread while
// it trains), fetches the path or one level into a buffer of its own (fetch, fetch_level; its
// round), lands a level (land_level: g_l ← B_l − σ·Δ_l, θ_start,l ← g_l, θ_l ← α·θ_l +
// (1 − α)·g_l, B the fetched module or θ_start), and weighs its next push from now
// (weigh_from_here). Opt in with `using path_worker_tag = void;`. Models: train::path_worker
// (host), kernels::path_worker_cuda (kernels/paco/path_worker_cuda.cuh), job::device_worker_ref.
//
// Model and LanguageModel belong with the models (nn/concepts.hpp); they are re-exported here
// as train::Model and train::LanguageModel.

#include <concepts>
#include <cstddef>
#include <span>
#include <vector>

#include "paco/core/error.hpp"
#include "paco/nn/concepts.hpp"
#include "paco/store/concepts.hpp"

namespace paco::train {

using nn::LanguageModel;
using nn::Model;

// clang-format off
template <class W, class Store>
concept PathWorker = store::ModuleStore<Store> &&
    requires(W& w, const W& cw, Store& s, std::size_t l, long round, bool b, float x, int n) {
  typename W::path_worker_tag;
  { w.pull(s) } -> std::same_as<status>;
  { w.train(n) } -> std::convertible_to<double>;
  { cw.steps_per_round() } -> std::convertible_to<int>;
  { w.prepare() } -> std::same_as<status>;
  { w.prepare_level(l) } -> std::same_as<status>;
  { cw.send(s) } -> std::same_as<status>;
  { cw.send_level(s, l, round) } -> std::same_as<status>;
  { w.fetch(s) } -> std::same_as<status>;
  { w.fetch_level(s, l) } -> std::same_as<result<long>>;
  w.land_level(l, b, x, x);
  w.weigh_from_here();
  { cw.round() } -> std::convertible_to<long>;
  { cw.modules() } -> std::convertible_to<const std::vector<int>&>;
};
// clang-format on

}  // namespace paco::train
