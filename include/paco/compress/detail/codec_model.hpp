#pragma once
// The codec model of module_codec's message and summed protocols: every codec but PowerSGD behind
// one virtual interface (message_model), with the levels its payloads may name, error feedback and
// L-GreCo's controller (message_of<C>).

#include <cmath>
#include <memory>
#include <vector>

#include "paco/compress/cast.hpp"
#include "paco/compress/error_feedback.hpp"
#include "paco/compress/identity.hpp"
#include "paco/compress/lgreco.hpp"
#include "paco/compress/quantize.hpp"
#include "paco/compress/segments.hpp"
#include "paco/compress/sign_prune.hpp"
#include "paco/compress/topk.hpp"

namespace paco::compress::detail {

// The levels a codec's payload may name, and the one with the largest payload (it bounds what a
// receiver accepts).
template <class C>
struct level_set;
template <>
struct level_set<identity> {
  static bool ok(double l) { return l == 32; }
  static constexpr double widest = 32;
};
template <>
struct level_set<cast> {
  static bool ok(double l) { return l == 16; }
  static constexpr double widest = 16;
};
template <>
struct level_set<quantize> {
  static bool ok(double l) { return l >= 2 && l <= 8 && l == std::floor(l); }
  static constexpr double widest = 8;
};
template <>
struct level_set<topk> {
  static bool ok(double l) { return l > 0 && l <= 1; }
  static constexpr double widest = 1;
};
template <>
struct level_set<sign_prune> {
  static bool ok(double l) { return l >= 0 && l < 1; }
  static constexpr double widest = 0;
};

// The sender's and receiver's side of one codec over a segment table: levels, error feedback and
// the L-GreCo controller, behind one virtual interface.
class message_model {
 public:
  virtual ~message_model() = default;
  virtual bool level_ok(double l) const = 0;
  virtual std::size_t body_bytes(std::size_t n, double l) const = 0;
  virtual double widest() const = 0;
  virtual double level(std::size_t s) const = 0;
  virtual std::size_t solves() const = 0;
  // L-GreCo: accumulate g + e of segment s (before encode); end_round re-solves every F rounds.
  virtual status observe(std::size_t s, slice<const float> g, slice<const float> residual) = 0;
  virtual status end_round() = 0;
  // out = encode(g + e); e ← g + e − decode(out) (residual empty: no error feedback).
  virtual status encode(slice<const float> g, slice<float> residual, double l,
                        slice<std::byte> out) = 0;
  virtual status decode(slice<const std::byte> in, double l, slice<float> y) const = 0;
};

template <Compressor C>
class message_of final : public message_model {
 public:
  using level_type = typename C::level_type;

  message_of(C c, const std::vector<segment>& segs, std::vector<level_type> candidates,
             const lgreco_config* adapt)
      : ef_(std::move(c)), default_(ef_.inner().default_level()) {
    if (adapt) {
      std::vector<matrix_shape> shapes;
      for (auto& s : segs) shapes.push_back(s.shape);
      ctl_ = std::make_unique<lgreco<C>>(ef_.inner(), *adapt, std::move(shapes),
                                         std::move(candidates), default_);
    }
  }
  bool level_ok(double l) const override { return level_set<C>::ok(l); }
  std::size_t body_bytes(std::size_t n, double l) const override {
    return ef_.wire_bytes(n, static_cast<level_type>(l));
  }
  double widest() const override { return level_set<C>::widest; }
  double level(std::size_t s) const override {
    return static_cast<double>(ctl_ ? ctl_->level(s) : default_);
  }
  std::size_t solves() const override { return solves_; }
  status observe(std::size_t s, slice<const float> g, slice<const float> residual) override {
    if (!ctl_) return {};
    return residual.empty() ? ctl_->observe(s, g) : ctl_->observe(s, g, residual);
  }
  status end_round() override {
    if (!ctl_) return {};
    auto r = ctl_->end_round();
    if (!r) return r.error();
    solves_ += *r ? 1 : 0;
    return {};
  }
  status encode(slice<const float> g, slice<float> residual, double l,
                slice<std::byte> out) override {
    const auto lv = static_cast<level_type>(l);
    if (residual.empty()) return ef_.inner().encode(g, lv, out);
    return ef_.encode(g, residual, lv, out);
  }
  status decode(slice<const std::byte> in, double l, slice<float> y) const override {
    return ef_.decode(in, static_cast<level_type>(l), y);
  }

 private:
  error_feedback<C> ef_;
  level_type default_;
  std::unique_ptr<lgreco<C>> ctl_;
  std::size_t solves_ = 0;
};

}  // namespace paco::compress::detail
