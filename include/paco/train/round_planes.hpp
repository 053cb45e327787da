#pragma once
// round_planes: the plane work of a round (train/round_loop.hpp) on one backend — the outer
// parameters g beside θ, a fragment's Δ, its reduction over the ranks, the outer step and the α
// mix — so that the loop's schedule is written once and the backend is a tag:
// round_planes<host, O> here, round_planes<cuda, O> in kernels/paco/round_planes_cuda.cuh
// (device buffers and kernels; only encoded bytes cross PCIe).
//
// What the loop calls, for fragment p (frags[p], spans of the plane; g lives in plane::anchor):
//   begin()                  g ← θ
//   measure(p)               fresh ← Δ_p = g_p − θ_p
//   reduce<T>(p)             the flight's work (mean_in_flight<T>::work): delta ← fresh, then
//                            mean ← the ranks' mean of delta (codec p, or the fp32 ring); its
//                            buffers belong to the flight until it lands
//   clear_fresh()            fresh ← 0 (a one-round-late rule's finish: no fresh Δ)
//   apply(p, landed, fresh)  u = mean (landed; else 0) + σ·(fresh − own) (with fresh; then own ←
//                            fresh); g_p ← OuterOpt(g_p, u) when landed or σ ≠ 0; θ_p ← α·θ_p +
//                            (1 − α)·g_p
//   end()                    θ ← g
//   fingerprint()            a hash of g: equal on ranks whose g is equal
//   settle()                 the work so far has happened (a device stream drained)
// A backend's fingerprints are compared only with the same backend's (every rank of a group
// runs on the same one).
//
// Host: the reduction is detail::mean_delta (train/diloco_allreduce.hpp); the error-feedback
// residual of a fragment that is one span (the whole plane, P = 1) is plane::residual of the
// arena, of a fragment of several spans its own. Memory: the outer state of each fragment, four
// buffers of the largest fragment, the own last Δ (σ > 0).

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "paco/collectives/counted.hpp"
#include "paco/compress/module_codec.hpp"
#include "paco/core/arena.hpp"
#include "paco/core/backend.hpp"
#include "paco/core/hash.hpp"
#include "paco/net/concepts.hpp"
#include "paco/outer/concepts.hpp"
#include "paco/train/diloco_allreduce.hpp"
#include "paco/train/fragments.hpp"
#include "paco/train/sync.hpp"

namespace paco::train {

// The round's plane work on backend B with outer optimizer O (specializations: host below,
// cuda in kernels/paco/round_planes_cuda.cuh).
template <Backend B, outer::OuterOptimizer O>
class round_planes;

namespace detail {
// Codecs for frags: none, or one per fragment, of its size (sizes[p]; a fragment whose mean
// needs no codec has none). Errors: invalid_argument, mismatch, naming `rule`.
inline status codecs_fit(const std::vector<std::optional<std::size_t>>& sizes,
                         const std::vector<fragment>& frags, const std::string& rule) {
  if (!sizes.empty() && sizes.size() != frags.size())
    return {errc::invalid_argument, rule + ": one codec per fragment, or none (" +
                                        std::to_string(sizes.size()) + " codecs for " +
                                        std::to_string(frags.size()) + " fragments)"};
  for (std::size_t p = 0; p < sizes.size(); ++p)
    if (sizes[p] && *sizes[p] != frags[p].size())
      return {errc::mismatch, rule + ": codec " + std::to_string(p) + " covers " +
                                  std::to_string(*sizes[p]) + " elements, its fragment " +
                                  std::to_string(frags[p].size())};
  return {};
}
}  // namespace detail

template <outer::OuterOptimizer O>
class round_planes<host, O> {
 public:
  using codec = compress::module_codec;  // one per fragment, or none (fp32)

  // Errors: codecs neither empty nor one per fragment of its size (detail::codecs_fit).
  static status check(const std::vector<codec>& codecs, const std::vector<fragment>& frags,
                      const std::string& rule) {
    std::vector<std::optional<std::size_t>> sizes;
    for (auto& c : codecs) sizes.push_back(c.size());
    return detail::codecs_fit(sizes, frags, rule);
  }

  // Requires: l.state() (an arena<host>) and frags outlive the planes; frags cover the layout
  // once; check(codecs, frags) is ok.
  template <class L>
  round_planes(L& l, const std::vector<fragment>& frags, std::vector<codec> codecs, O outer,
               const sync_plan& plan)
      : a_(&l.state()), frags_(&frags), codecs_(std::move(codecs)), outer_(outer), plan_(plan) {
    std::size_t largest = 0;
    for (std::size_t p = 0; p < frags.size(); ++p) {
      const std::size_t n = frags[p].size();
      state_.emplace_back(outer_.state_size(n), 0.0f);
      own_.emplace_back(plan_.identical() ? 0 : n, 0.0f);
      const bool feedback = p < codecs_.size() && codecs_[p].error_feedback();
      residual_.emplace_back(feedback && frags[p].spans.size() > 1 ? n : 0, 0.0f);
      largest = std::max(largest, n);
    }
    for (auto* b : {&delta_, &fresh_, &mean_, &scratch_}) b->resize(largest);
  }
  round_planes(const round_planes&) = delete;
  round_planes& operator=(const round_planes&) = delete;

  void begin() { copy(a_->get(plane::param), a_->get(plane::anchor)); }
  void settle() {}
  void end() { copy(a_->get(plane::anchor), a_->get(plane::param)); }
  std::uint64_t fingerprint() {
    const auto g = a_->get(plane::anchor);
    return hash64(g.data(), g.size_bytes());
  }

  void measure(int p) {
    const auto th = a_->get(plane::param), g = a_->get(plane::anchor);
    std::size_t at = 0;
    for (auto& s : frag(p).spans)
      for (std::size_t i = s.offset; i < s.offset + s.size; ++i) fresh_[at++] = g[i] - th[i];
  }
  void clear_fresh() { std::fill(fresh_.begin(), fresh_.end(), 0.0f); }

  template <net::Transport T>
  auto reduce(int p) {
    std::swap(delta_, fresh_);
    const std::size_t n = frag(p).size();
    compress::module_codec* c = codecs_.empty() ? nullptr : &codecs_[std::size_t(p)];
    return [c, d = slice<const float>(delta_.data(), n), r = residual_of(p),
            m = slice<float>(mean_.data(), n)](
               collectives::counted<T>& ct, const collectives::collective_options& co,
               std::size_t& payload) { return detail::mean_delta(ct, c, d, r, m, co, payload); };
  }

  void apply(int p, bool landed, bool with_fresh) {
    const std::size_t n = frag(p).size();
    const float share = plan_.own_share;
    if (!landed) std::fill_n(mean_.begin(), n, 0.0f);
    if (with_fresh && share != 0.0f) {
      auto& own = own_[std::size_t(p)];
      for (std::size_t i = 0; i < n; ++i) mean_[i] += (fresh_[i] - own[i]) * share;
      std::copy_n(fresh_.begin(), n, own.begin());
    }
    const auto th = a_->get(plane::param), g = a_->get(plane::anchor);
    if (landed || share != 0.0f) {
      gather(p, g, scratch_);
      outer_.step(std::span<float>(scratch_.data(), n), std::span<const float>(mean_.data(), n),
                  state_[std::size_t(p)]);
      scatter(p, scratch_, g);
    }
    const float al = plan_.alpha;
    for (auto& s : frag(p).spans)
      for (std::size_t i = s.offset; i < s.offset + s.size; ++i)
        th[i] = al == 0.0f ? g[i] : al == 1.0f ? th[i] : al * th[i] + (1.0f - al) * g[i];
  }

  const std::vector<codec>& codecs() const noexcept { return codecs_; }
  // The outer optimizer's state of fragment p (a checkpoint holds fragment 0's).
  std::vector<float>& outer_state(std::size_t p) noexcept { return state_[p]; }
  const std::vector<float>& outer_state(std::size_t p) const noexcept { return state_[p]; }

 private:
  static void copy(slice<float> from, slice<float> to) {
    std::copy(from.begin(), from.end(), to.begin());
  }
  // Fragment p of plane `from` into out, its spans end to end; and back.
  void gather(int p, std::span<const float> from, std::vector<float>& out) const {
    std::size_t at = 0;
    for (auto& s : frag(p).spans) {
      std::copy_n(from.begin() + std::ptrdiff_t(s.offset), s.size,
                  out.begin() + std::ptrdiff_t(at));
      at += s.size;
    }
  }
  void scatter(int p, const std::vector<float>& in, std::span<float> into) const {
    std::size_t at = 0;
    for (auto& s : frag(p).spans) {
      std::copy_n(in.begin() + std::ptrdiff_t(at), s.size, into.begin() + std::ptrdiff_t(s.offset));
      at += s.size;
    }
  }
  // Fragment p's error-feedback residual: the arena's plane when p is one span, else its own.
  slice<float> residual_of(int p) {
    if (codecs_.empty() || !codecs_[std::size_t(p)].error_feedback()) return {};
    const auto& f = frag(p);
    if (f.spans.size() == 1)
      return a_->get(plane::residual).sub(f.spans[0].offset, f.spans[0].size);
    auto& r = residual_[std::size_t(p)];
    return {r.data(), r.size()};
  }

  const fragment& frag(int p) const { return (*frags_)[std::size_t(p)]; }

  arena<host>* a_;
  const std::vector<fragment>* frags_;  // the loop's
  std::vector<codec> codecs_;
  O outer_;
  sync_plan plan_;
  std::vector<std::vector<float>> state_;     // the outer state of each fragment
  std::vector<std::vector<float>> own_;       // σ > 0: the own Δ in the mean in flight
  std::vector<std::vector<float>> residual_;  // error feedback of a fragment of several spans
  std::vector<float> delta_, mean_;           // the flight's: Δ_p and its mean
  std::vector<float> fresh_;                  // Δ_p measured at a send
  std::vector<float> scratch_;                // g_p end to end, for the outer step
};

}  // namespace paco::train
