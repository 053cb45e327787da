#pragma once
// The Model concept: what the inner loop, nn::replica, path workers, checkpoints and the one
// scorer ask of a trainable model. Its parameters live in an arena laid out by layout(); named
// tensors() say which span is which tensor (checkpoints, export); a workspace made for a batch
// shape (its member d) holds activations; forward_backward(θ, ∇, tokens, targets, ws, scale)
// ACCUMULATES scale·∇θ of the mean loss into a full plane and returns the loss (nats per token);
// loss() is the forward pass alone. Opt in with `using model_tag = void;`.
//
// LanguageModel refines it with what routing and the one scorer read after a forward pass:
// forward(θ, tokens, ws) alone, logits(ws) (N × vocab()) and hidden(ws) (N × width(), the last
// block's output that router features average). Models: nn::gpt, nn::block_lm<Block>.
//
// PathWorker is what the round loop (train/worker_loop.hpp) drives: a worker of one path that
// pulls its modules from a store, trains its inner steps, pushes its modules' Δ, and says the
// round it pulled and its modules. Opt in with `using path_worker_tag = void;`. Models:
// train::path_worker (host), kernels::path_worker_cuda (kernels/paco/path_worker_cuda.cuh).

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "paco/core/arena.hpp"
#include "paco/core/error.hpp"
#include "paco/core/param_layout.hpp"
#include "paco/nn/concepts.hpp"
#include "paco/store/concepts.hpp"

namespace paco::train {

template <class M>
concept Model = requires(const M& m, arena<host>& a, std::uint64_t seed, nn::dims d,
                         const float* th, float* g, const std::int32_t* tok,
                         typename M::workspace& ws) {
  typename M::model_tag;
  { m.layout() } -> std::convertible_to<const param_layout&>;
  { m.param_count() } -> std::convertible_to<std::size_t>;
  m.tensors();
  m.init(a, seed);
  { m.make_workspace(d) } -> std::same_as<typename M::workspace>;
  { ws.d } -> std::convertible_to<nn::dims>;
  { m.forward_backward(th, g, tok, tok, ws, 1.0f) } -> std::convertible_to<double>;
  { m.loss(th, tok, tok, ws) } -> std::convertible_to<double>;
};

template <class M>
concept LanguageModel = Model<M> &&
    requires(const M& m, const float* th, const std::int32_t* tok, typename M::workspace& ws) {
  m.forward(th, tok, ws);
  { m.logits(ws) } -> std::convertible_to<const float*>;
  { m.hidden(ws) } -> std::convertible_to<const float*>;
  { m.vocab() } -> std::convertible_to<int>;
  { m.width() } -> std::convertible_to<int>;
};

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
// clang-format on

}  // namespace paco::train
