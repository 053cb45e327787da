#pragma once
// The rounds protocol of module_codec (PowerSGD): a module's Δ moves in two float rounds, each
// summed over the workers before the next. Round 0 carries P = M·Q of every matrix segment
// PowerSGD can shrink plus the other segments uncompressed; round 1 carries Q = Mᵀ·P̂ of the
// compressed ones; decode reconstructs the mean from round 1's sum (powersgd.hpp).

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "paco/compress/error_feedback.hpp"
#include "paco/compress/powersgd.hpp"
#include "paco/compress/segments.hpp"

namespace paco::compress::detail {

// PowerSGD over the matrix segments; vectors and matrices it cannot shrink ride uncompressed
// (summed) in round 0, as the PyTorch hook all-reduces them in one batch.
class rounds_model {
 public:
  rounds_model(int rank, const std::vector<segment>& segs, std::uint64_t seed) : segs_(segs) {
    for (std::size_t s = 0; s < segs_.size(); ++s) {
      const auto sh = segs_[s].shape;
      const std::size_t r = static_cast<std::size_t>(rank);
      const bool fits = segs_[s].is_matrix() && r <= std::min(sh.rows, sh.cols) &&
                        (sh.rows + sh.cols) * r < sh.rows * sh.cols;
      part p;
      p.segment = s;
      if (fits) {
        p.codec = std::make_unique<powersgd>(powersgd_config{.rank = rank, .seed = seed + s});
        p.state = std::make_unique<powersgd_state>();
        if (auto st = p.codec->init(*p.state, sh, rank); !st) p.codec.reset();
      }
      if (p.codec) {
        p.off0 = round0_;
        round0_ += sh.rows * r;
        p.off1 = round1_;
        round1_ += sh.cols * r;
      } else {
        p.off0 = round0_;
        round0_ += sh.size();
      }
      parts_.push_back(std::move(p));
    }
    vec_sum_.resize(round0_);
  }

  std::size_t round_floats(int k) const { return k == 0 ? round0_ : round1_; }
  std::size_t compressed() const {
    std::size_t c = 0;
    for (auto& p : parts_) c += p.codec ? 1 : 0;
    return c;
  }

  status encode_round(int k, slice<const float> g, slice<float> residual, slice<const float> prev,
                      slice<float> out) {
    if (out.size() != round_floats(k))
      return {errc::invalid_argument, "powersgd: round " + std::to_string(k) + " output of " +
                                          std::to_string(out.size()) + " floats, expected " +
                                          std::to_string(round_floats(k))};
    if (k == 1 && prev.size() != round0_)
      return {errc::invalid_argument, "powersgd: round 1 needs round 0's sum"};
    for (auto& p : parts_) {
      const auto& sg = segs_[p.segment];
      slice<const float> gs = g.sub(sg.offset, sg.size());
      if (!p.codec) {
        if (k == 0)
          std::memcpy(out.data() + p.off0, gs.data(), gs.size_bytes());
        else
          std::memcpy(vec_sum_.data() + p.off0, prev.data() + p.off0, gs.size_bytes());
        continue;
      }
      slice<const float> m = gs;
      if (!residual.empty()) {  // M = g + e, kept in the residual until decode
        slice<float> rs = residual.sub(sg.offset, sg.size());
        if (k == 0) ef_accumulate(gs, rs);
        m = rs;
      }
      const std::size_t r = static_cast<std::size_t>(p.state->rank);
      if (k == 0) {
        slice<std::byte> o{reinterpret_cast<std::byte*>(out.data() + p.off0),
                           sg.shape.rows * r * sizeof(float)};
        if (auto s = p.codec->encode_round(*p.state, 0, m, {}, o); !s) return s;
      } else {
        slice<const std::byte> in{reinterpret_cast<const std::byte*>(prev.data() + p.off0),
                                  sg.shape.rows * r * sizeof(float)};
        slice<std::byte> o{reinterpret_cast<std::byte*>(out.data() + p.off1),
                           sg.shape.cols * r * sizeof(float)};
        if (auto s = p.codec->encode_round(*p.state, 1, m, in, o); !s) return s;
      }
    }
    return {};
  }

  status decode(slice<const float> last, std::size_t world, slice<float> y, slice<float> residual) {
    if (last.size() != round1_)
      return {errc::invalid_argument, "powersgd: decode needs round 1's sum"};
    if (world < 1) return {errc::invalid_argument, "powersgd: world = 0, accepted >= 1"};
    const float inv = 1.0f / static_cast<float>(world);
    for (auto& p : parts_) {
      const auto& sg = segs_[p.segment];
      slice<float> ys = y.sub(sg.offset, sg.size());
      if (!p.codec) {
        for (std::size_t i = 0; i < ys.size(); ++i) ys[i] = vec_sum_[p.off0 + i] * inv;
        continue;
      }
      const std::size_t r = static_cast<std::size_t>(p.state->rank);
      slice<const std::byte> in{reinterpret_cast<const std::byte*>(last.data() + p.off1),
                                sg.shape.cols * r * sizeof(float)};
      if (auto s = p.codec->decode(*p.state, in, world, ys); !s) return s;
      if (!residual.empty()) ef_subtract(residual.sub(sg.offset, sg.size()), ys);
    }
    return {};
  }

 private:
  struct part {
    std::size_t segment = 0, off0 = 0, off1 = 0;
    std::unique_ptr<powersgd> codec;  // null: sent uncompressed in round 0
    std::unique_ptr<powersgd_state> state;
  };
  std::vector<segment> segs_;
  std::vector<part> parts_;
  std::size_t round0_ = 0, round1_ = 0;
  std::vector<float> vec_sum_;  // round 0's sum of the uncompressed parts
};

}  // namespace paco::compress::detail
