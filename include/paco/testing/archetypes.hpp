#pragma once
// Archetypes: the smallest types that model each paco concept, compiled in the tests so that a
// concept never asks more of its models than documented. Each folder adds its own section.

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <span>
#include <system_error>
#include <vector>

#include "paco/core/arena.hpp"
#include "paco/core/hash.hpp"
#include "paco/core/rng.hpp"
#include "paco/net/concepts.hpp"
#include "paco/nn/concepts.hpp"
#include "paco/optim/concepts.hpp"
#include "paco/outer/concepts.hpp"
#include "paco/route/concepts.hpp"
#include "paco/store/concepts.hpp"
#include "paco/train/concepts.hpp"
#include "paco/train/sync.hpp"

namespace paco::testing {

// ---- net: Transport -------------------------------------------------------------------------

// A request that is always complete. Models net::Request and nothing more.
struct request_archetype {
  request_archetype() = default;
  request_archetype(request_archetype&&) = default;
  request_archetype& operator=(request_archetype&&) = default;
  std::error_code wait() { return {}; }
  bool test() { return true; }
  void cancel() {}
};

// A transport of one rank that never moves a byte. Models net::Transport and nothing more.
struct transport_archetype {
  using request = request_archetype;
  int rank() const { return 0; }
  int size() const { return 1; }
  request send(int, net::tag_t, std::span<const std::byte>, net::deadline) { return {}; }
  request recv(int, net::tag_t, std::span<std::byte>, net::deadline) { return {}; }
  void cancel_all() {}
};

static_assert(net::Request<request_archetype>);
static_assert(net::Transport<transport_archetype>);

// ---- nn: Module, Model, LanguageModel --------------------------------------------------------

// The identity on rows of `width` floats: no parameters, no cache, no scratch; backward adds dy
// to dx. Models nn::Module (float on nn::context, the calls the concept names) and nothing more.
struct module_archetype {
  int width = 1;
  std::size_t param_count() const { return 0; }
  int in_width() const { return width; }
  int out_width() const { return width; }
  std::size_t cache_size(nn::dims) const { return 0; }
  std::size_t scratch_bytes(nn::dims) const { return 0; }
  void init(float*, rng&) const {}
  void forward(const float*, const float* x, float* y, float*, nn::dims d, nn::context&) const {
    std::copy(x, x + std::size_t(d.rows()) * std::size_t(width), y);
  }
  void backward(const float*, const float*, const float* dy, float* dx, float*, const float*,
                nn::dims d, nn::context&) const {
    if (!dx) return;
    for (std::size_t i = 0; i < std::size_t(d.rows()) * std::size_t(width); ++i) dx[i] += dy[i];
  }
};

// A model of one 8-element tensor whose loss is 0 and whose gradient is 0. Models nn::Model
// and nothing more.
struct model_archetype {
  using model_tag = void;
  struct workspace {
    nn::dims d;
  };
  model_archetype() { layout_.add("w", 8); }
  const param_layout& layout() const { return layout_; }
  std::size_t param_count() const { return layout_.used(); }
  std::vector<named_tensor> tensors() const { return {}; }
  void init(arena<host>&, std::uint64_t) const {}
  workspace make_workspace(nn::dims d) const { return {d}; }
  double forward_backward(const float*, float*, const std::int32_t*, const std::int32_t*,
                          workspace&, float) const {
    return 0.0;
  }
  double loss(const float*, const std::int32_t*, const std::int32_t*, workspace&) const {
    return 0.0;
  }

 private:
  param_layout layout_;
};

// A language model over a vocabulary of 2 whose logits and hidden state are all zeros. Models
// nn::LanguageModel and nothing more.
struct language_model_archetype : model_archetype {
  struct workspace {
    nn::dims d;
    std::vector<float> zeros;
  };
  workspace make_workspace(nn::dims d) const {
    return {d, std::vector<float>(std::size_t(d.rows()) * 2, 0.0f)};
  }
  double forward_backward(const float*, float*, const std::int32_t*, const std::int32_t*,
                          workspace&, float) const {
    return 0.0;
  }
  double loss(const float*, const std::int32_t*, const std::int32_t*, workspace&) const {
    return 0.0;
  }
  void forward(const float*, const std::int32_t*, workspace&) const {}
  const float* logits(const workspace& w) const { return w.zeros.data(); }
  const float* hidden(const workspace& w) const { return w.zeros.data(); }
  int vocab() const { return 2; }
  int width() const { return 2; }
};

// ---- optim: InnerOptimizer --------------------------------------------------------------------

// An optimizer that leaves θ as it is. Models optim::InnerOptimizer and nothing more.
struct inner_optimizer_archetype {
  using inner_optimizer_tag = void;
  void step(arena<host>&, long, float) const {}
  status validate() const { return {}; }
};

// ---- outer: OuterOptimizer --------------------------------------------------------------------

// θ stays as it is; no state. Models outer::OuterOptimizer and nothing more.
struct outer_optimizer_archetype {
  using outer_optimizer_tag = void;
  std::size_t state_size(std::size_t) const { return 0; }
  void step(std::span<float>, std::span<const float>, std::span<float>) const {}
  status validate() const { return {}; }
};

// ---- route: Router, RankingRouter -------------------------------------------------------------

// One path for every document. Models route::Router and nothing more.
struct router_archetype {
  using router_tag = void;
  int k() const { return 1; }
  int route(const float*) const { return 0; }
};

// Models route::RankingRouter and nothing more.
struct ranking_router_archetype : router_archetype {
  std::vector<int> rank(const float*, int) const { return {0}; }
};

// ---- store: ModuleStore ---------------------------------------------------------------------

// Every module all zeros; every push accepted; a wait for a round closes it (the modules then
// sit at the next round). Models store::ModuleStore and nothing more.
struct module_store_archetype {
  using module_store_tag = void;
  long round = 0;
  result<store::pulled> pull(int, std::span<float> dst) {
    std::fill(dst.begin(), dst.end(), 0.0f);
    return store::pulled{round, hash64(dst.data(), dst.size_bytes())};
  }
  status push(int, int, long, std::span<const float>, double) { return {}; }
  status wait_closed(int, long r, std::chrono::steady_clock::time_point) {
    round = std::max(round, r + 1);
    return {};
  }
};

// ---- train: PathWorker -------------------------------------------------------------------------

// One module (id 0) of `size` floats in its buffers: trains nothing, measures a zero Δ, lands
// nothing. Models train::PathWorker and nothing more.
struct path_worker_archetype {
  using path_worker_tag = void;
  explicit path_worker_archetype(std::size_t size)
      : buf(0, {path::level_span{0, size, {}}}, {0}, size) {}
  train::path_buffers buf;
  train::path_buffers& buffers() { return buf; }
  double train(int) { return 0.0; }
  int steps_per_round() const { return 2; }
  status prepare_level(std::size_t l) {
    buf.delta(l).assign(buf.levels()[l].size, 0.0f);
    return {};
  }
  void land_level(std::size_t, bool, float, float) {}
  void weigh_from_here() {}
};

static_assert(nn::Module<module_archetype> && !nn::Model<module_archetype>);
static_assert(nn::Model<model_archetype> && !nn::LanguageModel<model_archetype>);
static_assert(!nn::Module<model_archetype>);
static_assert(nn::LanguageModel<language_model_archetype>);
static_assert(train::PathWorker<path_worker_archetype>);
static_assert(optim::InnerOptimizer<inner_optimizer_archetype>);
static_assert(outer::OuterOptimizer<outer_optimizer_archetype>);
static_assert(!optim::RangedInnerOptimizer<inner_optimizer_archetype>);
static_assert(route::Router<router_archetype> && !route::RankingRouter<router_archetype>);
static_assert(route::RankingRouter<ranking_router_archetype>);
static_assert(store::ModuleStore<module_store_archetype>);
static_assert(!store::EncodedModuleStore<module_store_archetype>);

// ---- train: Sync ------------------------------------------------------------------------------

// Blocking DiLoCo's plan under its own name. Models train::Sync and nothing more.
struct sync_archetype {
  using sync_tag = void;
  std::string name() const { return "archetype"; }
  result<train::sync_plan> plan(int, std::size_t, int) const { return train::sync_plan{}; }
};
static_assert(train::Sync<sync_archetype>);

}  // namespace paco::testing
