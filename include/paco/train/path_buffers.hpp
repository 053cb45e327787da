#pragma once
// path_buffers: the host side of a path worker's traffic with a module store, the same for a
// worker whose replica is on the host (train::path_worker) or on a device
// (kernels::path_worker_cuda): per level of the path, what its next push sends (the fp32 Δ, or
// its codec's payload) with the push's weight, and the modules of the last fetch laid out as the
// parameter plane, hash-checked, with the rounds they came at.
//
// send / send_level read only what the worker measured into them and may run on another thread
// (the store exchange's flight, train/store_exchange.hpp), followed there by fetch or
// fetch_level, while the worker trains; the worker measures (delta, payload) and lands (fetched)
// on its own thread, never while a flight runs.

#include <algorithm>
#include <cstddef>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "paco/core/arena.hpp"
#include "paco/core/error.hpp"
#include "paco/core/hash.hpp"
#include "paco/path/level_map.hpp"
#include "paco/store/concepts.hpp"

namespace paco::train {

class path_buffers {
 public:
  // levels[l]: level l's span of a plane of `plane` elements; modules[l]: its module's id in the
  // store; id: the worker's (its pushes').
  path_buffers(int id, std::vector<path::level_span> levels, std::vector<int> modules,
               std::size_t plane)
      : id_(id),
        levels_(std::move(levels)),
        modules_(std::move(modules)),
        out_(levels_.size()),
        fetched_(plane, 0.0f) {
    PACO_ASSERT(levels_.size() == modules_.size(), "one module per level");
  }

  int id() const noexcept { return id_; }
  const std::vector<path::level_span>& levels() const noexcept { return levels_; }
  const std::vector<int>& modules() const noexcept { return modules_; }
  // The round of the path's last pull or fetch (of a level: the lowest of the levels').
  long round() const noexcept { return round_; }
  // The round of level l's module at its last fetch: the base round its next push carries.
  long level_round(std::size_t l) const {
    return level_round_.empty() ? round_ : level_round_.at(l);
  }
  // Whether fetch takes a path whose modules sit at different rounds (rounds that close on a
  // quorum: a module may close without this worker while another of its path waits for it);
  // each level's push then carries its own module's round. Off: fetch refuses them.
  void accept_mixed_rounds(bool on) noexcept { mixed_ = on; }

  // What level l's next push sends: the fp32 Δ (fp32 pushes), or the codec's payload (encoded
  // ones). The worker fills one of them; weight is the push's.
  std::vector<float>& delta(std::size_t l) { return out_[l].delta; }
  const std::vector<float>& delta(std::size_t l) const { return out_[l].delta; }
  std::vector<std::byte>& payload(std::size_t l) { return out_[l].payload; }
  void set_encoded(bool e) noexcept { encoded_ = e; }
  void set_weight(double w) noexcept { weight_ = w; }

  // The weight of a push of a shard of `tokens` tokens after `trained` of a round's h inner steps
  // since the pull: the tokens, scaled by the share of h trained (a worker whose round a time
  // budget cut short weighs by the tokens it actually trained; h steps or more, or none: 1).
  static double weight_of(double tokens, long trained, int h) noexcept {
    if (trained <= 0 || trained >= h) return tokens;
    return tokens * (double(trained) / double(h));
  }

  // Whether codecs (one per level, each with size()) fit the path's levels. Errors: mismatch if
  // their count or a codec's size differs from the levels'.
  template <class Codecs>
  status check_codecs(const Codecs& codecs) const {
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
    return {};
  }

  // Level l's module of the last fetch (its span of the plane). Requires: a fetch of it.
  std::span<const float> fetched(std::size_t l) const {
    return std::span<const float>(fetched_).subspan(levels_[l].offset, levels_[l].size);
  }

  // Pushes what was measured into the buffers, every level for its round (level_round): every
  // module is tried even if one push fails (e.g. its round closed without us); the first error
  // is returned.
  template <store::ModuleStore Store>
  status send(Store& store) const {
    status first;
    for (std::size_t l = 0; l < levels_.size(); ++l)
      if (auto s = send_level(store, l, level_round(l)); !s && first.ok()) first = s;
    return first;
  }
  // Level l's push alone, for `round` (under Streaming DiLoCo a path's modules sit at different
  // rounds between their staggered syncs).
  template <store::ModuleStore Store>
  status send_level(Store& store, std::size_t l, long round) const {
    PACO_ASSERT(l < out_.size(), "a level of the path");
    if (!encoded_)
      return store.push(modules_[l], id_, round, std::span<const float>(out_[l].delta), weight_);
    if constexpr (store::EncodedModuleStore<Store>) {
      return store.push_encoded(modules_[l], id_, round,
                                std::span<const std::byte>(out_[l].payload), weight_);
    } else {
      return {errc::unsupported, "worker " + std::to_string(id_) +
                                     ": this store takes fp32 pushes only (no push_encoded)"};
    }
  }

  // Pulls every module of the path into the fetch buffer; round() becomes the lowest of their
  // rounds. Errors: the store's; mismatch for a copy whose hash differs from the store's, or
  // (unless accept_mixed_rounds) modules at different rounds (every module is pulled, so that a
  // retry sees their rounds move).
  template <store::ModuleStore Store>
  status fetch(Store& store) {
    std::vector<long> rounds;
    for (std::size_t l = 0; l < levels_.size(); ++l) {
      auto r = fetch_one(store, l);
      if (!r) return r.error();
      rounds.push_back(*r);
    }
    if (!mixed_ &&
        std::adjacent_find(rounds.begin(), rounds.end(), std::not_equal_to<>()) != rounds.end())
      return store::rounds_differ(id_, modules_, rounds);
    round_ = rounds.empty() ? -1 : *std::min_element(rounds.begin(), rounds.end());
    level_round_ = std::move(rounds);
    return {};
  }
  // Level l's module alone into the fetch buffer; returns its round, and round() becomes the
  // lowest of the levels' last fetched rounds. Errors: as fetch's.
  template <store::ModuleStore Store>
  result<long> fetch_level(Store& store, std::size_t l) {
    auto r = fetch_one(store, l);
    if (!r) return r.error();
    round_ = *std::min_element(level_round_.begin(), level_round_.end());
    return *r;
  }

 private:
  template <store::ModuleStore Store>
  result<long> fetch_one(Store& store, std::size_t l) {
    PACO_ASSERT(l < levels_.size(), "a level of the path");
    auto span = std::span<float>(fetched_).subspan(levels_[l].offset, levels_[l].size);
    auto got = store.pull(modules_[l], span);
    if (!got) return got.error();
    if (hash64(span.data(), span.size_bytes()) != got->hash)
      return error(errc::mismatch, "module " + std::to_string(modules_[l]) +
                                       " arrived with a different hash than the store's");
    level_round_.resize(levels_.size(), got->round);
    level_round_[l] = got->round;
    return got->round;
  }

  struct outgoing {
    std::vector<float> delta;        // Δ of the level's module (capacity reused)
    std::vector<std::byte> payload;  // its codec's payload, with codecs
  };
  int id_;
  std::vector<path::level_span> levels_;
  std::vector<int> modules_;
  std::vector<outgoing> out_;
  std::vector<float> fetched_;     // the modules of the last fetch (the plane's layout)
  std::vector<long> level_round_;  // per level, the round of its last fetch (none: empty)
  bool encoded_ = false;
  bool mixed_ = false;  // accept_mixed_rounds
  double weight_ = 0;
  long round_ = 0;
};

// A worker's codecs set (one per level of buf's path, each with size() and error_feedback()):
// checked against the levels (path_buffers::check_codecs), then mine ← given, the residual plane
// of the worker's state allocated (zeros) when a codec keeps error feedback, and buf's pushes
// encoded from now on (fp32 again with none). Errors: check_codecs's (nothing changed).
template <class Codec, class State>
status adopt_codecs(path_buffers& buf, State& state, std::vector<Codec>& mine,
                    std::vector<Codec> given) {
  if (auto s = buf.check_codecs(given); !s) return s;
  for (auto& c : given)
    if (c.error_feedback()) state.get(plane::residual);
  mine = std::move(given);
  buf.set_encoded(!mine.empty());
  return {};
}

}  // namespace paco::train
