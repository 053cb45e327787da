#pragma once
// path_worker: one worker of a DiLoCo / DiPaCo run. It trains one path (one module per level)
// on its shard: each round it pulls its modules from a store (verifying their hashes), keeps
// them as θ_start (the arena's anchor plane), runs H inner optimizer steps, and pushes
// Δ_m = θ_start,m − θ_end,m for every module m of its path, weighted by its shard's tokens
// (scaled by the share of H it trained, when a time budget cut its round short).
// The inner optimizer state stays with the worker across rounds (it is never synchronised).
// It models train::PathWorker: the store exchange (train/store_exchange.hpp) drives it under
// every sync rule — prepare_level (measure and encode Δ into its path_buffers), the buffers'
// pushes and fetches (from the exchange's flight, on another thread while the worker trains on),
// land_level; train::pull and train::push are a whole path's pull and push.
//
// With codecs (set_codecs: one compress::module_codec per level), each Δ_m is encoded first and
// pushed as bytes (push_encoded); the error-feedback residual of module m stays here, in this
// worker's arena (plane::residual, module m's span), and L-GreCo's state in its codec.
//
// The store models store::ModuleStore (store/concepts.hpp); encoded pushes need an
// EncodedModuleStore. Models: local_store (threads of one process), store::client (a store
// service over any Transport). Model models train::Model, InnerOpt optim::InnerOptimizer.
//
// Loop is what trains between a pull and a push: train::inner_loop (the whole path in this
// process), or pipeline::stage_loop (one stage of a path cut across processes: the worker's
// levels are the stage's, train/stage_worker.hpp). It provides run(arena, opt, n) → mean loss,
// step_count(), rebind(shard), a position type and where(); seek() for seek().

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "paco/compress/module_codec.hpp"
#include "paco/core/arena.hpp"
#include "paco/core/hash.hpp"
#include "paco/path/level_map.hpp"
#include "paco/store/concepts.hpp"
#include "paco/store/local_store.hpp"
#include "paco/train/inner_loop.hpp"
#include "paco/train/path_buffers.hpp"

namespace paco::train {

template <train::Model Model, optim::InnerOptimizer InnerOpt,
          class Loop = train::inner_loop<Model, InnerOpt>>
class path_worker {
 public:
  using path_worker_tag = void;  // models train::PathWorker

  // modules[l] is the store's id of this worker's module at level l; levels[l] its span.
  path_worker(int id, const Model& model, std::vector<path::level_span> levels,
              std::vector<int> modules, InnerOpt opt, train::inner_config cfg,
              const io::token_stream& shard, std::uint64_t seed)
      : model_(model),
        buf_(id, std::move(levels), std::move(modules), model.layout().total()),
        opt_(opt),
        cfg_(cfg),
        arena_(model.layout()),
        loop_(model, cfg, shard, seed),
        shard_tokens_(double(shard.ids.size())) {
    init();
  }
  // A worker around a loop of another kind (pipeline::stage_loop): cfg.steps is H; its pushes
  // weigh shard_tokens (the tokens of the shard the loop samples).
  path_worker(int id, const Model& model, std::vector<path::level_span> levels,
              std::vector<int> modules, InnerOpt opt, train::inner_config cfg, Loop loop,
              double shard_tokens)
      : model_(model),
        buf_(id, std::move(levels), std::move(modules), model.layout().total()),
        opt_(opt),
        cfg_(cfg),
        arena_(model.layout()),
        loop_(std::move(loop)),
        shard_tokens_(shard_tokens) {
    init();
  }

  int id() const noexcept { return buf_.id(); }
  const Model& model() const noexcept { return model_; }
  arena<host>& state() noexcept { return arena_; }
  const std::vector<int>& modules() const noexcept { return buf_.modules(); }
  double shard_tokens() const noexcept { return shard_tokens_; }
  long inner_step() const noexcept { return loop_.step_count(); }
  // H: the inner steps train() runs by default (a round's).
  int steps_per_round() const noexcept { return cfg_.steps; }
  // The inner loop's step count and sampler position (inner_loop::where / seek): with the arena,
  // all a resumed worker needs to go on bit for bit as if it had never stopped.
  typename Loop::position position() const noexcept { return loop_.where(); }
  void seek(const typename Loop::position& p) noexcept { loop_.seek(p); }
  Loop& loop() noexcept { return loop_; }
  long round() const noexcept { return buf_.round(); }
  double last_loss() const noexcept { return last_loss_; }

  // Trains on `shard` from the next inner step on (a re-routing): the inner optimizer state
  // (moments, step count), the sampler's random stream and the error-feedback residual carry on;
  // pushes are weighted by the new shard's tokens. Requires: shard outlives its use and holds
  // more than ctx tokens (checked: throws error_exception).
  void set_shard(const io::token_stream& shard) {
    loop_.rebind(shard);
    shard_tokens_ = double(shard.ids.size());
  }

  // Encoded pushes from now on: codecs[l] encodes level l's module (make_codecs over this
  // worker's level spans). Errors: mismatch if the count or a codec's size differs from the
  // levels'. Ensures: the residual plane is allocated (zeros) when a codec keeps one.
  status set_codecs(std::vector<compress::module_codec> codecs) {
    return adopt_codecs(buf_, arena_, codecs_, std::move(codecs));
  }
  // Bytes of the payloads this worker encoded (without request headers), over its lifetime.
  std::size_t payload_bytes() const noexcept { return payload_bytes_; }

  // The weight of this worker's pushes for the round pulled last: its shard's tokens, scaled by
  // the share of the round's H steps it trained since the pull (a worker whose round was cut
  // short by a time budget weighs by the tokens it actually trained; H steps or more: 1).
  double push_weight() const noexcept {
    return path_buffers::weight_of(shard_tokens_, loop_.step_count() - pulled_step_, cfg_.steps);
  }

  // Runs n inner steps (H by default) of the worker's loop (the one inner loop,
  // train/inner_loop.hpp, or a pipeline stage's). Returns the mean loss over them. A stage's
  // failed link throws error_exception (run_worker returns it as its error).
  double train(int n = -1) {
    if (n < 0) n = cfg_.steps;
    if (n > 0) last_loss_ = loop_.run(arena_, opt_, n);
    return last_loss_;
  }

  // Measures Δ_l = θ_start,l − θ_l of level l's module into the buffers (and encodes it, updating
  // the residual, when it has codecs), with the weight of the steps trained since the pull
  // (push_weight). θ may then change (an overlapped worker trains on) while the buffers are
  // pushed. Errors: the codec's.
  status prepare_level(std::size_t l) {
    PACO_ASSERT(l < buf_.levels().size(), "a level of the path");
    auto th = arena_.get(plane::param);
    auto an = arena_.get(plane::anchor);
    buf_.set_weight(push_weight());
    const std::size_t o = buf_.levels()[l].offset, n = buf_.levels()[l].size;
    auto& d = buf_.delta(l);
    d.resize(n);
    for (std::size_t i = 0; i < n; ++i) d[i] = an[o + i] - th[o + i];
    if (codecs_.empty()) return {};
    auto& c = codecs_[l];
    const auto res = c.error_feedback() ? arena_.get(plane::residual).sub(o, n) : slice<float>{};
    if (auto s = c.encode(slice<const float>(d.data(), n), res, buf_.payload(l)); !s) return s;
    payload_bytes_ += buf_.payload(l).size();
    return {};
  }

  // The worker's store traffic (path_buffers): what prepare_level measured, to push; what the
  // last fetch brought, to land. The store exchange's flight pushes and fetches through them on
  // another thread while this worker trains (never while it prepares or lands).
  path_buffers& buffers() noexcept { return buf_; }

  // The round body's landing of level l through the store (train/store_exchange.hpp):
  // g_l ← B_l − σ·Δ_l, with B_l the module of the last fetch (fetched) or θ_start,l (not) and
  // Δ_l the last prepare_level's uncompressed measure (σ = 0: none); θ_start,l ← g_l; θ_l ← α·θ_l +
  // (1 − α)·g_l. Requires: a fetch of l (fetched), a prepare_level(l) (σ ≠ 0).
  void land_level(std::size_t l, bool fetched, float sigma, float alpha) {
    PACO_ASSERT(l < buf_.levels().size(), "a level of the path");
    const std::size_t o = buf_.levels()[l].offset, n = buf_.levels()[l].size;
    PACO_ASSERT(sigma == 0.0f || buf_.delta(l).size() == n,
                "land_level with σ after prepare_level");
    auto th = arena_.get(plane::param);
    auto an = arena_.get(plane::anchor);
    const float* d = sigma == 0.0f ? nullptr : buf_.delta(l).data();
    const auto fetched_l = buf_.fetched(l);
    for (std::size_t i = 0; i < n; ++i) {
      float g = fetched ? fetched_l[i] : an[o + i];
      if (d) g -= sigma * d[i];
      an[o + i] = g;
      float& t = th[o + i];
      t = alpha == 0.0f ? g : alpha == 1.0f ? t : alpha * t + (1.0f - alpha) * g;
    }
  }
  // The next push weighs the steps trained from this one (push_weight), as after a pull.
  void weigh_from_here() noexcept { pulled_step_ = loop_.step_count(); }

 private:
  void init() {
    arena_.get(plane::moment1);
    arena_.get(plane::moment2);
    arena_.get(plane::anchor);
  }
  const Model& model_;
  path_buffers buf_;
  InnerOpt opt_;
  train::inner_config cfg_;
  arena<host> arena_;
  Loop loop_;
  double shard_tokens_;
  long pulled_step_ = 0;  // the inner step the next push weighs from (weigh_from_here)
  std::vector<compress::module_codec> codecs_;  // one per level, or none (fp32 pushes)
  std::size_t payload_bytes_ = 0;
  double last_loss_ = 0;
};

}  // namespace paco::train
