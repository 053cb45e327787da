#pragma once
// The training layer's concepts. PathWorker is what the round loop (train/worker_loop.hpp)
// drives: a worker of one path that pulls its modules from a store, trains its inner steps,
// pushes its modules' Δ, and says the round it pulled and its modules. Opt in with
// `using path_worker_tag = void;`. Models: train::path_worker (host),
// kernels::path_worker_cuda (kernels/paco/path_worker_cuda.cuh).
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
concept PathWorker = store::ModuleStore<Store> && requires(W& w, const W& cw, Store& s) {
  typename W::path_worker_tag;
  { w.pull(s) } -> std::same_as<status>;
  { w.train() } -> std::convertible_to<double>;
  { w.push(s) } -> std::same_as<status>;
  { cw.round() } -> std::convertible_to<long>;
  { cw.modules() } -> std::convertible_to<const std::vector<int>&>;
};

// A path worker whose push can overlap its next inner steps (worker_loop's overlapped rules):
// push split into prepare (measure and encode Δ into its own buffers) and send (push them, from
// another thread while it trains), fetch (pull the path into a buffer of its own, on that thread
// too) and take_fetched (θ ← what it fetched), and an overlapped landing, land(share): θ holds
// the global modules; θ_l ← θ_l − share[l]·Δ_l, then θ becomes the next round's start. Models:
// train::path_worker.
template <class W, class Store>
concept OverlappingPathWorker = PathWorker<W, Store> &&
    requires(W& w, const W& cw, Store& s, std::span<const float> share) {
  { w.prepare() } -> std::same_as<status>;
  { cw.send(s) } -> std::same_as<status>;
  { w.fetch(s) } -> std::same_as<status>;
  w.take_fetched();
  w.land(share);
  w.restart_from_anchor();
};

// A path worker that syncs one module at a time (Streaming DiLoCo through the store, the
// path's modules as its fragments): prepare_level and send_level (push level l's Δ for a given
// round, from another thread while it trains), fetch_level (level l's module into a buffer of its
// own; returns its round) and mix_level (θ_start,l ← G_l, θ_l ← α·θ_l + (1 − α)·G_l), with
// train(n) and H (steps_per_round) for the staggered schedule. Models: train::path_worker.
template <class W, class Store>
concept StreamingPathWorker = PathWorker<W, Store> &&
    requires(W& w, const W& cw, Store& s, std::size_t l, long round, float alpha, int n) {
  { w.prepare_level(l) } -> std::same_as<status>;
  { cw.send_level(s, l, round) } -> std::same_as<status>;
  { w.fetch_level(s, l) } -> std::same_as<result<long>>;
  w.mix_level(l, alpha);
  { w.train(n) } -> std::convertible_to<double>;
  { cw.steps_per_round() } -> std::convertible_to<int>;
};
// clang-format on

}  // namespace paco::train
