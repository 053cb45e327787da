#pragma once
// path_worker: one worker of a DiLoCo / DiPaCo run. It trains one path (one module per level)
// on its shard: each round it pulls its modules from a store (verifying their hashes), keeps
// them as θ_start (the arena's anchor plane), runs H inner optimizer steps, and pushes
// Δ_m = θ_start,m − θ_end,m for every module m of its path, weighted by its shard's tokens
// (scaled by the share of H it trained, when a time budget cut its round short).
// The inner optimizer state stays with the worker across rounds (it is never synchronised).
// push is prepare (measure and encode Δ into the worker's own buffers) then send (push them): an
// overlapped rule (train/worker_loop.hpp) sends, and fetches the next global modules into a
// buffer, from another thread while the worker trains on, then lands them with take_fetched and
// land.
//
// With codecs (set_codecs: one compress::module_codec per level), each Δ_m is encoded first and
// pushed as bytes (push_encoded); the error-feedback residual of module m stays here, in this
// worker's arena (plane::residual, module m's span), and L-GreCo's state in its codec.
//
// Store models store::ModuleStore (store/concepts.hpp); encoded pushes need an
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
      : id_(id),
        model_(model),
        levels_(std::move(levels)),
        modules_(std::move(modules)),
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
      : id_(id),
        model_(model),
        levels_(std::move(levels)),
        modules_(std::move(modules)),
        opt_(opt),
        cfg_(cfg),
        arena_(model.layout()),
        loop_(std::move(loop)),
        shard_tokens_(shard_tokens) {
    init();
  }

  int id() const noexcept { return id_; }
  const Model& model() const noexcept { return model_; }
  arena<host>& state() noexcept { return arena_; }
  const std::vector<int>& modules() const noexcept { return modules_; }
  double shard_tokens() const noexcept { return shard_tokens_; }
  long inner_step() const noexcept { return loop_.step_count(); }
  // H: the inner steps train() runs by default (a round's).
  int steps_per_round() const noexcept { return cfg_.steps; }
  // The inner loop's step count and sampler position (inner_loop::where / seek): with the arena,
  // all a resumed worker needs to go on bit for bit as if it had never stopped.
  typename Loop::position position() const noexcept { return loop_.where(); }
  void seek(const typename Loop::position& p) noexcept { loop_.seek(p); }
  Loop& loop() noexcept { return loop_; }
  long round() const noexcept { return round_; }
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
    if (codecs.size() != levels_.size())
      return {errc::mismatch, "worker " + std::to_string(id_) + ": " +
                                  std::to_string(codecs.size()) + " codecs for " +
                                  std::to_string(levels_.size()) + " levels"};
    for (std::size_t l = 0; l < levels_.size(); ++l)
      if (codecs[l].size() != levels_[l].size)
        return {errc::mismatch, "worker " + std::to_string(id_) + ": the codec of level " +
                                    std::to_string(l) + " covers " +
                                    std::to_string(codecs[l].size()) + " elements, the level " +
                                    std::to_string(levels_[l].size)};
    for (auto& c : codecs)
      if (c.error_feedback()) arena_.get(plane::residual);
    codecs_ = std::move(codecs);
    return {};
  }
  bool encoded() const noexcept { return !codecs_.empty(); }
  const std::vector<compress::module_codec>& codecs() const noexcept { return codecs_; }
  // Bytes of the payloads this worker encoded (without request headers), over its lifetime.
  std::size_t payload_bytes() const noexcept { return payload_bytes_; }

  // Pulls every module of the path into θ and θ_start. Errors: mismatch if the modules are not
  // all at the same round or a copy's hash differs from the store's.
  template <store::ModuleStore Store>
  status pull(Store& store) {
    auto th = arena_.get(plane::param);
    if (auto s = pull_into(store, std::span<float>(th.data(), th.size())); !s) return s;
    pulled_step_ = loop_.step_count();
    auto an = arena_.get(plane::anchor);
    std::copy(th.begin(), th.end(), an.begin());
    return {};
  }

  // Pulls every module of the path into a buffer of its own (θ untouched), for take_fetched: an
  // overlapped worker fetches the next global modules while it trains. Errors: as pull's.
  template <store::ModuleStore Store>
  status fetch(Store& store) {
    fetched_.resize(arena_.layout().total());  // no allocation on this (maybe another) thread
    return pull_into(store, std::span<float>(fetched_));
  }
  // θ ← the modules of the last fetch (their round is round()). Requires: a fetch succeeded.
  void take_fetched() {
    auto th = arena_.get(plane::param);
    PACO_ASSERT(fetched_.size() == th.size(), "take_fetched after fetch");
    for (const auto& lv : levels_)
      std::copy_n(fetched_.data() + lv.offset, lv.size, th.data() + lv.offset);
  }

  // The weight of this worker's pushes for the round pulled last: its shard's tokens, scaled by
  // the share of the round's H steps it trained since the pull (a worker whose round was cut
  // short by a time budget weighs by the tokens it actually trained; H steps or more: 1).
  double push_weight() const noexcept {
    const long trained = loop_.step_count() - pulled_step_;
    if (trained <= 0 || trained >= cfg_.steps) return shard_tokens_;
    return shard_tokens_ * (double(trained) / double(cfg_.steps));
  }

  // Runs n inner steps (H by default) of the worker's loop (the one inner loop,
  // train/inner_loop.hpp, or a pipeline stage's). Returns the mean loss over them. A stage's
  // failed link throws error_exception (run_worker returns it as its error).
  double train(int n = -1) {
    if (n < 0) n = cfg_.steps;
    if (n > 0) last_loss_ = loop_.run(arena_, opt_, n);
    return last_loss_;
  }

  // Pushes Δ = θ_start − θ for every module of the path, for the round pulled last: the fp32
  // span, or its codec's payload (prepare, then send). Every module is tried even if one push
  // fails (e.g. its round closed without us); the first error is returned. With error feedback,
  // the part of Δ a payload did not carry stays in the residual even if the store refuses it.
  template <store::ModuleStore Store>
  status push(Store& store) {
    if (auto s = prepare(); !s) return s;
    return send(store);
  }

  // The first half of push: measures Δ = θ_start − θ of every module into this worker's own
  // buffers (and encodes it, updating the residual, when it has codecs), with the weight of the
  // steps trained since the pull. θ may then change (an overlapped worker trains on) while send
  // pushes the buffers. Errors: a codec's.
  status prepare() {
    out_.resize(levels_.size());
    for (std::size_t l = 0; l < levels_.size(); ++l)
      if (auto s = prepare_level(l); !s) return s;
    return {};
  }

  // prepare for level l's module alone (Streaming DiLoCo through the store sends one module at a
  // time): Δ_l = θ_start,l − θ_l into the level's buffer, encoded with its codec, with the
  // weight of the steps trained since the pull. Errors: the codec's.
  status prepare_level(std::size_t l) {
    PACO_ASSERT(l < levels_.size(), "a level of the path");
    auto th = arena_.get(plane::param);
    auto an = arena_.get(plane::anchor);
    out_.resize(levels_.size());
    fetched_.resize(arena_.layout().total());  // here, before a flight's fetch_level
    out_weight_ = push_weight();
    const std::size_t o = levels_[l].offset, n = levels_[l].size;
    auto& d = out_[l].delta;
    d.resize(n);
    for (std::size_t i = 0; i < n; ++i) d[i] = an[o + i] - th[o + i];
    if (codecs_.empty()) return {};
    auto& c = codecs_[l];
    const auto res = c.error_feedback() ? arena_.get(plane::residual).sub(o, n) : slice<float>{};
    if (auto s = c.encode(slice<const float>(d.data(), n), res, out_[l].payload); !s) return s;
    payload_bytes_ += out_[l].payload.size();
    return {};
  }

  // The second half of push: pushes what prepare measured, for round() (an overlapped worker
  // prepares round r's Δ, lands on the modules of round r, then sends). Requires: prepare
  // succeeded since the last send. Reads only this worker's buffers and round, so it may run on
  // another thread, followed there by a fetch, while this one trains (not while it pulls,
  // prepares or lands).
  template <store::ModuleStore Store>
  status send(Store& store) const {
    PACO_ASSERT(out_.size() == levels_.size(), "send after prepare");
    status first;
    for (std::size_t l = 0; l < levels_.size(); ++l)
      if (auto s = send_level(store, l, round_); !s && first.ok()) first = s;
    return first;
  }

  // send for level l's module alone, for `round` (under Streaming DiLoCo the modules of a path
  // sit at different rounds between their staggered syncs). Requires: prepare_level(l) (or
  // prepare) since l's last send. Thread-safe as send is.
  template <store::ModuleStore Store>
  status send_level(Store& store, std::size_t l, long round) const {
    PACO_ASSERT(l < out_.size(), "send_level after prepare_level");
    if (codecs_.empty())
      return store.push(modules_[l], id_, round, std::span<const float>(out_[l].delta),
                        out_weight_);
    if constexpr (store::EncodedModuleStore<Store>) {
      return store.push_encoded(modules_[l], id_, round,
                                std::span<const std::byte>(out_[l].payload), out_weight_);
    } else {
      return {errc::unsupported, "worker " + std::to_string(id_) +
                                     ": this store takes fp32 pushes only (no push_encoded)"};
    }
  }

  // Pulls level l's module alone into the fetch buffer (θ untouched), hash-checked; returns its
  // round, and round() becomes the lowest of the levels' last fetched rounds. May run on another
  // thread while this one trains (after a prepare_level on this one, which sizes the buffer; not
  // while this one reads round()). Errors: the store's; mismatch for a copy whose hash differs
  // from the store's.
  template <store::ModuleStore Store>
  result<long> fetch_level(Store& store, std::size_t l) {
    PACO_ASSERT(l < levels_.size(), "a level of the path");
    fetched_.resize(arena_.layout().total());  // a no-op after prepare_level
    auto span = std::span<float>(fetched_).subspan(levels_[l].offset, levels_[l].size);
    auto got = store.pull(modules_[l], span);
    if (!got) return got.error();
    if (hash64(span.data(), span.size_bytes()) != got->hash)
      return error(errc::mismatch, "module " + std::to_string(modules_[l]) +
                                       " arrived with a different hash than the store's");
    level_round_.resize(levels_.size(), got->round);
    level_round_[l] = got->round;
    round_ = *std::min_element(level_round_.begin(), level_round_.end());
    return got->round;
  }

  // Streaming DiLoCo's landing of level l (ALGORITHMS.md §6.1): θ_start,l ← G_l (the module
  // fetch_level brought) and θ_l ← α·θ_l + (1 − α)·G_l. Requires: fetch_level(l) succeeded.
  void mix_level(std::size_t l, float alpha) {
    PACO_ASSERT(l < levels_.size() && fetched_.size() == arena_.layout().total(),
                "mix_level after fetch_level");
    auto th = arena_.get(plane::param);
    auto an = arena_.get(plane::anchor);
    const std::size_t o = levels_[l].offset, n = levels_[l].size;
    for (std::size_t i = o; i < o + n; ++i) {
      const float g = fetched_[i];
      an[i] = g;
      th[i] = alpha == 0.0f ? g : alpha == 1.0f ? th[i] : alpha * th[i] + (1.0f - alpha) * g;
    }
  }

  // The round body's landing of level l through the store (train/store_exchange.hpp):
  // g_l ← B_l − σ·Δ_l, with B_l the module of the last fetch (fetched) or θ_start,l (not) and
  // Δ_l the last prepare's uncompressed measure (σ = 0: none); θ_start,l ← g_l; θ_l ← α·θ_l +
  // (1 − α)·g_l. Requires: a fetch of l (fetched), a prepare of l (σ ≠ 0).
  void land_level(std::size_t l, bool fetched, float sigma, float alpha) {
    PACO_ASSERT(l < levels_.size(), "a level of the path");
    PACO_ASSERT(!fetched || fetched_.size() == arena_.layout().total(), "land_level after fetch");
    PACO_ASSERT(sigma == 0.0f || l < out_.size(), "land_level with σ after prepare");
    auto th = arena_.get(plane::param);
    auto an = arena_.get(plane::anchor);
    const std::size_t o = levels_[l].offset, n = levels_[l].size;
    const float* d = sigma == 0.0f ? nullptr : out_[l].delta.data();
    for (std::size_t i = 0; i < n; ++i) {
      float g = fetched ? fetched_[o + i] : an[o + i];
      if (d) g -= sigma * d[i];
      an[o + i] = g;
      float& t = th[o + i];
      t = alpha == 0.0f ? g : alpha == 1.0f ? t : alpha * t + (1.0f - alpha) * g;
    }
  }
  // The next push weighs the steps trained from this one (push_weight), as after a pull.
  void weigh_from_here() noexcept { pulled_step_ = loop_.step_count(); }

  // An overlapped landing (train/worker_loop.hpp's overlapped rules): θ holds the global modules
  // (pulled, take_fetched, or restart_from_anchor); applies θ_l ← θ_l − share[l]·Δ_l with Δ the
  // last prepare's (uncompressed) measure, then makes this θ the next round's start (anchor) and
  // weighs the next push from this inner step. Requires: prepare since the last landing;
  // share.size() == the levels.
  void land(std::span<const float> share) {
    PACO_ASSERT(share.size() == levels_.size() && out_.size() == levels_.size(),
                "land after prepare, one share per level");
    auto th = arena_.get(plane::param);
    for (std::size_t l = 0; l < levels_.size(); ++l) {
      if (share[l] == 0.0f) continue;
      const std::size_t o = levels_[l].offset;
      const auto& d = out_[l].delta;
      for (std::size_t i = 0; i < d.size(); ++i) th[o + i] -= share[l] * d[i];
    }
    auto an = arena_.get(plane::anchor);
    std::copy(th.begin(), th.end(), an.begin());
    pulled_step_ = loop_.step_count();
  }
  // θ ← θ_start: the global modules of the round pulled last, when nothing is in flight to land.
  void restart_from_anchor() {
    auto th = arena_.get(plane::param);
    auto an = arena_.get(plane::anchor);
    std::copy(an.begin(), an.end(), th.begin());
  }

 private:
  void init() {
    PACO_ASSERT(levels_.size() == modules_.size(), "one module per level");
    arena_.get(plane::moment1);
    arena_.get(plane::moment2);
    arena_.get(plane::anchor);
  }
  // Every module of the path into dst (the plane's layout); round_ ← their round.
  template <store::ModuleStore Store>
  status pull_into(Store& store, std::span<float> dst) {
    std::vector<long> rounds;
    for (std::size_t l = 0; l < levels_.size(); ++l) {
      auto span = dst.subspan(levels_[l].offset, levels_[l].size);
      auto got = store.pull(modules_[l], span);
      if (!got) return got.error();
      const auto [round, h] = *got;
      if (hash64(span.data(), span.size_bytes()) != h)
        return {errc::mismatch, "module " + std::to_string(modules_[l]) +
                                    " arrived with a different hash than the store's"};
      rounds.push_back(round);
    }
    if (std::adjacent_find(rounds.begin(), rounds.end(), std::not_equal_to<>()) != rounds.end())
      return store::rounds_differ(id_, modules_, rounds);
    const long r = rounds.empty() ? -1 : rounds.front();
    round_ = r;
    level_round_.assign(levels_.size(), r);
    return {};
  }

  int id_;
  const Model& model_;
  std::vector<path::level_span> levels_;
  std::vector<int> modules_;
  InnerOpt opt_;
  train::inner_config cfg_;
  arena<host> arena_;
  Loop loop_;
  double shard_tokens_;
  long pulled_step_ = 0;  // the inner step at the last pull (or overlapped landing)
  struct outgoing {
    std::vector<float> delta;        // Δ of the level's module (capacity reused)
    std::vector<std::byte> payload;  // its codec's payload, with codecs
  };
  std::vector<outgoing> out_;   // one per level: what the last prepare measured
  std::vector<float> fetched_;  // the modules of the last fetch (the plane's layout)
  double out_weight_ = 0;
  std::vector<compress::module_codec> codecs_;  // one per level, or none (fp32 pushes)
  std::size_t payload_bytes_ = 0;
  long round_ = 0;
  std::vector<long> level_round_;  // per level, the round of its last pull or fetch
  double last_loss_ = 0;
};

}  // namespace paco::train
