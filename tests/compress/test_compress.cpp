// Tests of paco/compress: wire sizes, error bounds, error feedback, top-k, PowerSGD, TIES
// sign pruning, bad payloads, L-GreCo against brute force. Each @post of a codec is checked here.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <vector>

#include "paco/compress/archetype.hpp"
#include "paco/compress/compress.hpp"
#include "paco/core/arena.hpp"
#include "paco/core/rng.hpp"
#include "paco/optim/adamw.hpp"
#include "paco/optim/adamw_update.hpp"
#include "paco/outer/nesterov.hpp"
#include "paco/outer/nesterov_update.hpp"
#include "vectors.hpp"

namespace pc = paco::compress;
namespace popt = paco::optim;
namespace pout = paco::outer;
namespace fm = paco::compress::formula;
using paco::slice;
using namespace compress_test;

namespace {

// encode into a span of exactly wire_bytes inside a larger guarded buffer; checks the guard.
template <class C>
std::vector<std::byte> encode_checked(C& c, const std::vector<float>& x,
                                      const typename C::level_type& l) {
  const std::size_t w = c.wire_bytes(x.size(), l);
  std::vector<std::byte> buf(w + 64, std::byte{0xA5});
  REQUIRE(c.encode(cv(x), l, slice<std::byte>(buf.data() + 32, w)));
  for (std::size_t i = 0; i < 32; ++i) REQUIRE(buf[i] == std::byte{0xA5});
  for (std::size_t i = w + 32; i < buf.size(); ++i) REQUIRE(buf[i] == std::byte{0xA5});
  return {buf.begin() + 32, buf.begin() + 32 + static_cast<std::ptrdiff_t>(w)};
}

const std::size_t sizes[] = {0, 1, 15, 16, 17, 255, 256, 257, 1000, 4099};

}  // namespace

// ---- concept ----

struct no_tag {  // everything but the opt-in tag
  using level_type = int;
  static constexpr pc::wire_reduction reduction = pc::wire_reduction::sum;
  int default_level() const { return 0; }
  std::size_t wire_bytes(std::size_t, const int&) const { return 0; }
  paco::status encode(slice<const float>, const int&, slice<std::byte>) { return {}; }
  paco::status decode(slice<const std::byte>, const int&, slice<float>) const { return {}; }
  double error(const int&, slice<const float>) { return 0; }
};
struct no_decode : pc::compressor_archetype {
  paco::status decode(slice<const std::byte>, const int&, slice<float>) = delete;
};
struct wrong_wire : pc::compressor_archetype {
  int wire_bytes(std::size_t, const int&) const { return 0; }
};
static_assert(!pc::Compressor<no_tag>);
static_assert(!pc::Compressor<no_decode>);
static_assert(!pc::Compressor<wrong_wire>);
static_assert(!pc::Compressor<pc::powersgd>);
static_assert(!pc::MultiRoundCompressor<pc::quantize>);
static_assert(pc::Compressor<pc::compressor_archetype>);
static_assert(pc::MultiRoundCompressor<pc::multi_round_archetype>);
static_assert(pc::Compressor<pc::error_feedback<pc::compressor_archetype>::bound>);

TEST_CASE("lgreco and error feedback compile against the archetypes", "[compress][concept]") {
  pc::compressor_archetype a;
  pc::lgreco<pc::compressor_archetype> ctl(a, {.period = 1, .window = 1}, {{1, 4}}, {0}, 0);
  std::vector<float> g(4, 1.0f);
  REQUIRE(ctl.observe(0, cv(g)));
  REQUIRE(ctl.end_round().value());
  pc::multi_round_archetype m;
  pc::lgreco<pc::multi_round_archetype> ctl2(m, {.period = 1, .window = 1}, {{2, 2}}, {0}, 0);
  REQUIRE(ctl2.end_round().value());
  pc::error_feedback<pc::compressor_archetype> ef;
  std::vector<float> r(4, 0.0f);
  std::vector<std::byte> none;
  REQUIRE(ef.encode(cv(g), mv(r), 0, mb(none)));
  CHECK(r == g);  // nothing sent: everything stays in the residual
}

TEST_CASE("summable or all-gathered, per codec", "[compress]") {
  STATIC_REQUIRE(pc::summable_v<pc::identity>);
  STATIC_REQUIRE(pc::summable_v<pc::cast>);
  STATIC_REQUIRE(pc::summable_v<pc::powersgd>);
  STATIC_REQUIRE(!pc::summable_v<pc::quantize>);
  STATIC_REQUIRE(!pc::summable_v<pc::topk>);
  STATIC_REQUIRE(!pc::summable_v<pc::sign_prune>);
}

// ---- wire sizes ----

TEST_CASE("encode writes exactly wire_bytes and refuses other sizes", "[compress][wire]") {
  pc::identity id;
  pc::cast bf, fp({.format = pc::half_format::fp16});
  pc::quantize q8, q4m({.bits = 4, .block = 64, .scale = pc::scale_mode::minmax});
  pc::quantize q2s({.bits = 2, .block = 16, .stochastic = true});
  pc::topk tk;
  pc::sign_prune sp;
  for (std::size_t n : sizes) {
    auto x = gaussian(n, n + 1);
    encode_checked(id, x, 32);
    encode_checked(bf, x, 16);
    encode_checked(fp, x, 16);
    for (int bits : {8, 7, 6, 5, 4, 3, 2}) {
      encode_checked(q8, x, bits);
      encode_checked(q4m, x, bits);
      encode_checked(q2s, x, bits);
    }
    encode_checked(tk, x, 0.1);
    encode_checked(sp, x, 0.5);
    std::vector<std::byte> wrong(q8.wire_bytes(n, 8) + 1);
    CHECK(q8.encode(cv(x), 8, mb(wrong)).error().code == paco::errc::invalid_argument);
  }
  CHECK(q8.wire_bytes(1000, 8) == 4 * 4 + 1000);
  CHECK(q4m.wire_bytes(1000, 4) == 16 * 8 + 500);
  CHECK(tk.wire_bytes(1000, 0.01) == 80);
  CHECK(sp.wire_bytes(1000, 0.25) == 125 + 4 * 750);
  std::vector<float> x(10);
  CHECK(q8.wire_bytes(1000, 3) == 4 * 4 + 375);
  std::vector<std::byte> out(q8.wire_bytes(10, 9));
  CHECK(q8.encode(cv(x), 9, mb(out)).error().code == paco::errc::invalid_argument);
  CHECK(q8.encode(cv(x), 1, mb(out)).error().code == paco::errc::invalid_argument);
  CHECK(!pc::validate(pc::quantize_config{.block = 24}));
}

// ---- error bounds ----

TEST_CASE("quantize: deterministic error within s/2 per element", "[compress][quantize]") {
  for (auto mode : {pc::scale_mode::absmax, pc::scale_mode::minmax})
    for (int bits : {8, 7, 6, 5, 4, 3, 2})
      for (std::size_t block : {16u, 64u, 256u})
        for (std::size_t n : sizes) {
          pc::quantize q({.bits = bits, .block = block, .scale = mode});
          auto x = gaussian(n, 7 * n + bits, 0.01f);
          if (n > 3) x[3] = 0.0f;
          auto w = encode_checked(q, x, bits);
          std::vector<float> y(n, NAN);
          REQUIRE(q.decode(cb(w), bits, mv(y)));
          double err2 = 0;
          for (std::size_t i = 0; i < n; ++i) {
            const std::size_t b = i / block, i0 = b * block, len = std::min(block, n - i0);
            float lo = x[i0], hi = x[i0], amax = 0;
            for (std::size_t j = i0; j < i0 + len; ++j) {
              lo = std::min(lo, x[j]);
              hi = std::max(hi, x[j]);
              amax = std::max(amax, std::fabs(x[j]));
            }
            const float s = mode == pc::scale_mode::absmax ? amax / fm::absmax_qmax(bits)
                                                           : (hi - lo) / fm::minmax_qmax(bits);
            INFO("mode " << int(mode) << " bits " << bits << " block " << block << " n " << n
                         << " i " << i);
            REQUIRE(std::fabs(x[i] - y[i]) <= s * 0.5f * (1 + 1e-5f) + 1e-12f);
            err2 += double(x[i] - y[i]) * (x[i] - y[i]);
          }
          CHECK(q.error(bits, cv(x)) == Approx(std::sqrt(err2)).margin(1e-9));
        }
}

TEST_CASE("quantize: vector path equals the scalar formulas bit for bit", "[compress][quantize]") {
  for (auto mode : {pc::scale_mode::absmax, pc::scale_mode::minmax})
    for (bool stochastic : {false, true})
      for (int bits : {8, 7, 6, 5, 4, 3, 2}) {
        const std::size_t n = 1000, block = 64;
        pc::quantize q({.bits = bits, .block = block, .scale = mode, .stochastic = stochastic});
        auto x = gaussian(n, 99, 3.0f);
        std::vector<std::byte> w(q.wire_bytes(n, bits));
        q.encode_with_key(cv(x), bits, 1234, mb(w));
        // scalar reference from the formulas
        const std::size_t nb = (n + block - 1) / block,
                          hdr = nb * (mode == pc::scale_mode::minmax ? 8 : 4);
        std::vector<std::uint8_t> codes(w.size() - hdr, 0);
        for (std::size_t b = 0; b < nb; ++b) {
          const std::size_t i0 = b * block, len = std::min(block, n - i0);
          float lo = x[i0], hi = x[i0], amax = 0;
          for (std::size_t j = i0; j < i0 + len; ++j) {
            lo = std::min(lo, x[j]);
            hi = std::max(hi, x[j]);
            amax = std::max(amax, std::fabs(x[j]));
          }
          for (std::size_t j = i0; j < i0 + len; ++j) {
            const float u = stochastic ? fm::dither(1234, j) : -1.0f;
            unsigned c;
            if (mode == pc::scale_mode::absmax) {
              const int qm = fm::absmax_qmax(bits);
              const int v = fm::absmax_code(x[j], fm::block_inverse(amax, qm), qm, u);
              c = bits == 8 ? unsigned(v) & 0xffu : unsigned(v + (1 << (bits - 1)));
            } else {
              const int qm = fm::minmax_qmax(bits);
              c = unsigned(fm::minmax_code(x[j], lo, fm::block_inverse(hi - lo, qm), qm, u));
            }
            for (int k = 0; k < bits; ++k)  // element j at bit j·bits, low bits first
              if ((c >> k) & 1u) {
                const std::size_t bit = j * std::size_t(bits) + std::size_t(k);
                codes[bit / 8] |= std::uint8_t(1u << (bit % 8));
              }
          }
        }
        INFO("mode " << int(mode) << " stochastic " << stochastic << " bits " << bits);
        REQUIRE(std::memcmp(codes.data(), w.data() + hdr, codes.size()) == 0);
      }
}

TEST_CASE("quantize: 3, 5, 6 and 7-bit codes pack low bits first across bytes",
          "[compress][quantize]") {
  for (int bits : {3, 5, 6, 7}) {
    const std::size_t n = 37, block = 16;  // odd length: codes straddle bytes, a padded tail
    pc::quantize q({.bits = bits, .block = block, .scale = pc::scale_mode::minmax});
    std::vector<float> x(n);
    const unsigned qmax = (1u << bits) - 1u;
    for (std::size_t i = 0; i < n; ++i) x[i] = float((i * 5 + 3) % (qmax + 1));  // exact codes
    for (std::size_t b = 0; b < n; b += block) {  // every block spans 0..qmax: scale 1, min 0
      x[b] = 0.0f;
      if (b + 1 < n) x[b + 1] = float(qmax);
    }
    auto w = encode_checked(q, x, bits);
    const std::size_t hdr = ((n + block - 1) / block) * 8;
    std::vector<std::uint8_t> want((n * std::size_t(bits) + 7) / 8, 0);
    for (std::size_t i = 0; i < n; ++i)
      for (int k = 0; k < bits; ++k)
        if ((unsigned(x[i]) >> k) & 1u) {
          const std::size_t bit = i * std::size_t(bits) + std::size_t(k);
          want[bit / 8] |= std::uint8_t(1u << (bit % 8));
        }
    INFO("bits " << bits);
    REQUIRE(w.size() == hdr + want.size());
    CHECK(std::memcmp(want.data(), w.data() + hdr, want.size()) == 0);
    std::vector<float> y(n);
    REQUIRE(q.decode(cb(w), bits, mv(y)));
    CHECK(y == x);
  }
}

TEST_CASE("quantize: stochastic rounding is unbiased and within one step", "[compress][quantize]") {
  const std::size_t n = 256;
  pc::quantize q({.bits = 4, .block = 256, .stochastic = true, .seed = 5});
  auto x = gaussian(n, 3);
  std::vector<double> mean(n, 0);
  const int trials = 400;
  float amax = 0;
  for (float v : x) amax = std::max(amax, std::fabs(v));
  const float s = amax / 7;
  for (int t = 0; t < trials; ++t) {
    auto w = encode_checked(q, x, 4);
    std::vector<float> y(n);
    REQUIRE(q.decode(cb(w), 4, mv(y)));
    for (std::size_t i = 0; i < n; ++i) {
      REQUIRE(std::fabs(x[i] - y[i]) <= s * (1 + 1e-5f));
      mean[i] += y[i] / trials;
    }
  }
  double bias = 0;
  for (std::size_t i = 0; i < n; ++i) bias += std::fabs(mean[i] - x[i]);
  CHECK(bias / n < 0.05 * s);
}

TEST_CASE("cast: formulas match the hardware conversions; vector path matches",
          "[compress][cast]") {
  paco::rng g(11);
  std::vector<float> x;
  for (int i = 0; i < 200000; ++i) x.push_back(fm::float_of(static_cast<std::uint32_t>(g())));
  for (float v : {0.0f, -0.0f, 1.0f, 65504.0f, 65519.0f, 65520.0f, 1e-8f, 5.96e-8f, 2.98e-8f,
                  6.1e-5f, INFINITY, -INFINITY, NAN})
    x.push_back(v);
  for (const auto& v : x) {
    const _Float16 h = static_cast<_Float16>(v);
    std::uint16_t hb;
    std::memcpy(&hb, &h, 2);
    if (std::isnan(v)) {
      REQUIRE(std::isnan(fm::from_fp16(fm::to_fp16(v))));
      REQUIRE(std::isnan(fm::from_bf16(fm::to_bf16(v))));
      continue;
    }
    INFO("x = " << v);
    REQUIRE(fm::to_fp16(v) == hb);
    REQUIRE(fm::bits_of(fm::from_fp16(hb)) == fm::bits_of(static_cast<float>(h)));
    const float b = fm::from_bf16(fm::to_bf16(v));  // RNE: within half an ulp of bf16
    if (std::isfinite(b)) REQUIRE(std::fabs(b - v) <= std::fabs(v) * 0x1.0p-8f + 0x1.0p-134f);
  }
  for (auto f : {pc::half_format::bf16, pc::half_format::fp16}) {
    pc::cast c({.format = f});
    auto w = encode_checked(c, x, 16);
    std::vector<float> y(x.size());
    REQUIRE(c.decode(cb(w), 16, mv(y)));
    for (std::size_t i = 0; i < x.size(); ++i) {
      std::uint16_t h;
      std::memcpy(&h, w.data() + 2 * i, 2);
      const std::uint16_t ref = f == pc::half_format::bf16 ? fm::to_bf16(x[i]) : fm::to_fp16(x[i]);
      REQUIRE(h == ref);
      const float back = f == pc::half_format::bf16 ? fm::from_bf16(h) : fm::from_fp16(h);
      REQUIRE(fm::bits_of(y[i]) == fm::bits_of(back));
    }
  }
}

// ---- error feedback ----

TEST_CASE("identity + error feedback is bit-identical to no compression", "[compress][ef]") {
  paco::param_layout layout;
  layout.add("a", 1000);
  layout.add("b", 37);
  paco::arena<paco::host> ar(layout);
  pc::error_feedback<pc::identity> ef;
  pc::identity id;
  for (int round = 0; round < 3; ++round)
    for (std::size_t m = 0; m < layout.count(); ++m) {
      auto g = gaussian(layout.entry(m).size, 100 * round + m);
      g[0] = -0.0f;
      auto w1 = encode_checked(id, g, 32);
      std::vector<std::byte> w2(ef.wire_bytes(g.size(), 32));
      REQUIRE(ef.encode(cv(g), ar.get(paco::plane::residual, m), 32, mb(w2)));
      REQUIRE(w1 == w2);
      for (float r : ar.get(paco::plane::residual, m).span()) REQUIRE(r == 0.0f);
    }
}

TEST_CASE("error feedback: the residual is what was not sent", "[compress][ef]") {
  pc::error_feedback<pc::quantize> ef(pc::quantize({.bits = 4, .block = 32}));
  const std::size_t n = 500;
  std::vector<float> r(n, 0.0f), sent(n), total_sent(n, 0.0f), total_g(n, 0.0f);
  for (int round = 0; round < 5; ++round) {
    auto g = gaussian(n, round + 40);
    std::vector<float> corrected(n);
    for (std::size_t i = 0; i < n; ++i) corrected[i] = fm::ef_accumulate(g[i], r[i]);
    auto bound = ef.bind(mv(r));
    std::vector<std::byte> w(bound.wire_bytes(n, 4));
    REQUIRE(bound.encode(cv(g), 4, mb(w)));
    REQUIRE(bound.decode(cb(w), 4, mv(sent)));
    for (std::size_t i = 0; i < n; ++i) {
      REQUIRE(r[i] == corrected[i] - sent[i]);
      total_sent[i] += sent[i];
      total_g[i] += g[i];
    }
  }
  // Σ sent + residual == Σ g (up to fp rounding): nothing is lost.
  for (std::size_t i = 0; i < n; ++i)
    CHECK(total_sent[i] + r[i] == Approx(total_g[i]).margin(1e-4));
}

TEST_CASE("fused quantize error feedback equals the three separate passes", "[compress][ef]") {
  for (bool stochastic : {false, true})
    for (int bits : {8, 4, 2}) {
      const pc::quantize_config cfg{.bits = bits, .block = 48, .stochastic = stochastic};
      pc::error_feedback<pc::quantize> ef{pc::quantize(cfg)};
      pc::quantize plain(cfg);  // same seed: same stochastic keys
      const std::size_t n = 1001;
      std::vector<float> r1(n, 0.0f), r2(n, 0.0f), sent(n);
      for (int round = 0; round < 3; ++round) {
        auto g = gaussian(n, 500 + round);
        std::vector<std::byte> w1(ef.wire_bytes(n, bits)), w2(w1.size());
        REQUIRE(ef.encode(cv(g), mv(r1), bits, mb(w1)));
        pc::ef_accumulate(cv(g), mv(r2));
        REQUIRE(plain.encode(cv(r2), bits, mb(w2)));
        REQUIRE(plain.decode(cb(w2), bits, mv(sent)));
        pc::ef_subtract(mv(r2), cv(sent));
        INFO("stochastic " << stochastic << " bits " << bits << " round " << round);
        REQUIRE(w1 == w2);
        REQUIRE(std::memcmp(r1.data(), r2.data(), 4 * n) == 0);
      }
    }
}

// ---- top-k ----

TEST_CASE("topk keeps the k largest |x|, lowest index on ties", "[compress][topk]") {
  pc::topk tk;
  for (std::size_t n : {1u, 10u, 1000u, 70000u}) {
    auto x = gaussian(n, n);
    if (n >= 10) x[5] = x[6] = x[7] = 100.0f;  // a tie at the top
    for (double d : {0.001, 0.01, 0.3, 1.0}) {
      const std::size_t k = pc::topk_count(n, d);
      auto w = encode_checked(tk, x, d);
      std::vector<float> y(n);
      REQUIRE(tk.decode(cb(w), d, mv(y)));
      // reference: stable sort by |x| descending
      std::vector<std::size_t> idx(n);
      std::iota(idx.begin(), idx.end(), 0);
      std::stable_sort(idx.begin(), idx.end(),
                       [&](auto a, auto b) { return std::fabs(x[a]) > std::fabs(x[b]); });
      std::vector<float> ref(n, 0.0f);
      for (std::size_t j = 0; j < k; ++j) ref[idx[j]] = x[idx[j]];
      REQUIRE(y == ref);
      double e = 0;
      for (std::size_t i = 0; i < n; ++i) e += double(x[i] - y[i]) * (x[i] - y[i]);
      CHECK(tk.error(d, cv(x)) == Approx(std::sqrt(e)));
    }
  }
  std::vector<float> x(8, 1.0f);  // all tied
  auto w = encode_checked(tk, x, 0.25);
  std::vector<float> y(8);
  REQUIRE(tk.decode(cb(w), 0.25, mv(y)));
  CHECK(y == std::vector<float>{1, 1, 0, 0, 0, 0, 0, 0});
}

// ---- sign pruning (TIES) ----

TEST_CASE("sign_prune trims like the reference and ties_merge elects signs", "[compress][ties]") {
  pc::sign_prune sp;
  const std::size_t n = 999;
  for (double p : {0.0, 0.25, 0.5, 0.75}) {
    auto x = gaussian(n, 17);
    auto w = encode_checked(sp, x, p);
    std::vector<float> y(n);
    REQUIRE(sp.decode(cb(w), p, mv(y)));
    const std::size_t keep = n - static_cast<std::size_t>(std::round(p * n));
    std::vector<float> mags(n);
    for (std::size_t i = 0; i < n; ++i) mags[i] = std::fabs(x[i]);
    std::nth_element(mags.begin(), mags.begin() + (keep - 1), mags.end(), std::greater<>());
    const float thr = mags[keep - 1];
    std::size_t kept = 0;
    for (std::size_t i = 0; i < n; ++i) {
      if (y[i] != 0.0f) {
        ++kept;
        REQUIRE(y[i] == x[i]);
        REQUIRE(std::fabs(x[i]) >= thr);
      } else {
        REQUIRE(std::fabs(x[i]) <= thr);
      }
    }
    CHECK(kept == keep);
  }
  // ties_merge on a hand-made case: signs (+,+,−) → +; mean of the agreeing values.
  std::vector<float> a{1, -2, 0, 3}, b{3, -2, 0, -1}, c{-1, 5, 0, -1};
  std::vector<float> out(4);
  std::vector<slice<const float>> in{cv(a), cv(b), cv(c)};
  REQUIRE(pc::ties_merge(in, mv(out)));
  CHECK(out == std::vector<float>{2, 5, 0, 3});  // col 2: Σ=1>0 → mean{5}; col 4: Σ=1>0 → {3}
}

// ---- PowerSGD ----

namespace {
// A rank-r (rows, cols) matrix U·Vᵀ.
std::vector<float> low_rank(std::size_t rows, std::size_t cols, std::size_t r, std::uint64_t seed) {
  auto u = gaussian(rows * r, seed), v = gaussian(cols * r, seed + 1);
  std::vector<float> m(rows * cols, 0.0f);
  for (std::size_t i = 0; i < rows; ++i)
    for (std::size_t j = 0; j < cols; ++j)
      for (std::size_t k = 0; k < r; ++k) m[i * cols + j] += u[i * r + k] * v[j * r + k];
  return m;
}
double rel_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    num += double(a[i] - b[i]) * (a[i] - b[i]);
    den += double(a[i]) * a[i];
  }
  return std::sqrt(num / std::max(den, 1e-300));
}
// One PowerSGD step over `world` workers, summing payloads like an all-reduce.
std::vector<float> psgd_step(pc::powersgd& c, std::vector<pc::powersgd_state>& st,
                             const std::vector<std::vector<float>>& m, pc::matrix_shape s) {
  const std::size_t world = m.size();
  const int r = st[0].rank;
  std::vector<std::vector<std::byte>> out(world, std::vector<std::byte>(c.round_bytes(s, r, 0)));
  for (std::size_t w = 0; w < world; ++w)
    REQUIRE(c.encode_round(st[w], 0, cv(m[w]), {}, mb(out[w])));
  auto sum = [&](std::vector<std::vector<std::byte>>& o) {
    std::vector<std::byte> t(o[0].size());
    std::vector<float> acc(t.size() / 4, 0.0f);
    for (auto& p : o)
      for (std::size_t i = 0; i < acc.size(); ++i)
        acc[i] += pc::detail::load<float>(p.data() + 4 * i);
    std::memcpy(t.data(), acc.data(), t.size());
    return t;
  };
  auto p_sum = sum(out);
  for (auto& o : out) o.assign(c.round_bytes(s, r, 1), std::byte{});
  for (std::size_t w = 0; w < world; ++w)
    REQUIRE(c.encode_round(st[w], 1, cv(m[w]), cb(p_sum), mb(out[w])));
  auto q_sum = sum(out);
  std::vector<float> y(s.size());
  for (std::size_t w = 0; w < world; ++w) REQUIRE(c.decode(st[w], cb(q_sum), world, mv(y)));
  return y;
}
}  // namespace

TEST_CASE("powersgd reconstructs a rank-r matrix; two workers get the mean",
          "[compress][powersgd]") {
  const pc::matrix_shape s{40, 30};
  pc::powersgd c({.rank = 3});
  std::vector<pc::powersgd_state> st(1);
  REQUIRE(c.init(st[0], s, 3));
  auto m = low_rank(s.rows, s.cols, 3, 5);
  auto y = psgd_step(c, st, {m}, s);
  CHECK(rel_diff(m, y) < 1e-4);
  // two workers with the same rank-3 column space on both sides: the sum stays rank 3
  auto m2 = m;
  for (auto& v : m2) v *= -0.5f;
  std::vector<pc::powersgd_state> st2(2);
  REQUIRE(c.init(st2[0], s, 3));
  REQUIRE(c.init(st2[1], s, 3));
  auto y2 = psgd_step(c, st2, {m, m2}, s);
  std::vector<float> mean(m.size());
  for (std::size_t i = 0; i < m.size(); ++i) mean[i] = 0.5f * (m[i] + m2[i]);
  CHECK(rel_diff(mean, y2) < 1e-4);
  CHECK(c.error(s, 3, cv(m)) <
        1e-3 * std::sqrt(std::inner_product(m.begin(), m.end(), m.begin(), 0.0)));
  CHECK(c.error(s, 2, cv(m)) > 0.01);
  std::vector<pc::powersgd_state> bad(1);
  CHECK(!c.init(bad[0], s, 31));
}

TEST_CASE("powersgd with error feedback converges on a higher-rank matrix",
          "[compress][powersgd]") {
  const pc::matrix_shape s{32, 24};
  pc::powersgd c({.rank = 2});
  std::vector<pc::powersgd_state> st(1);
  REQUIRE(c.init(st[0], s, 2));
  auto g = gaussian(s.size(), 77);  // full rank
  std::vector<float> e(s.size(), 0.0f), sent_total(s.size(), 0.0f), m(s.size());
  const int steps = 60;
  for (int t = 0; t < steps; ++t) {
    for (std::size_t i = 0; i < m.size(); ++i) m[i] = fm::ef_accumulate(g[i], e[i]);
    auto y = psgd_step(c, st, {m}, s);
    for (std::size_t i = 0; i < m.size(); ++i) {
      e[i] = m[i] - y[i];
      sent_total[i] += y[i];
    }
  }
  // mean of what was sent converges to g (the residual stays bounded)
  for (auto& v : sent_total) v /= steps;
  CHECK(rel_diff(g, sent_total) < 0.2);
}

// ---- bad payloads ----

TEST_CASE("decoders refuse truncated, oversized and inconsistent payloads", "[compress][corrupt]") {
  const std::size_t n = 300;
  auto x = gaussian(n, 1);
  std::vector<float> y(n);
  auto truncated_oversized = [&](auto& c, auto level) {
    auto w = encode_checked(c, x, level);
    auto t = w;
    t.pop_back();
    CHECK(c.decode(cb(t), level, mv(y)).error().code == paco::errc::corrupt);
    t = w;
    t.push_back(std::byte{0});
    CHECK(c.decode(cb(t), level, mv(y)).error().code == paco::errc::corrupt);
    std::vector<std::byte> empty;
    CHECK(!c.decode(cb(empty), level, mv(y)));
    return w;
  };
  pc::identity id;
  truncated_oversized(id, 32);
  pc::cast bf;
  truncated_oversized(bf, 16);
  pc::quantize q({.bits = 8, .block = 64, .scale = pc::scale_mode::minmax});
  auto w = truncated_oversized(q, 8);
  {
    auto bad = w;
    pc::detail::store(bad.data() + 4, -1.0f);  // negative scale of block 1
    CHECK(q.decode(cb(bad), 8, mv(y)).error().code == paco::errc::corrupt);
    bad = w;
    pc::detail::store(bad.data() + 4 * 5 + 4, NAN);  // non-finite minimum of block 1
    CHECK(q.decode(cb(bad), 8, mv(y)).error().code == paco::errc::corrupt);
    CHECK(q.decode(cb(w), 9, mv(y)).error().code == paco::errc::invalid_argument);
  }
  pc::topk tk;
  w = truncated_oversized(tk, 0.05);
  {
    auto bad = w;
    pc::detail::store<std::uint32_t>(bad.data(), 300);  // index out of range
    CHECK(tk.decode(cb(bad), 0.05, mv(y)).error().code == paco::errc::corrupt);
    bad = w;
    pc::detail::store<std::uint32_t>(bad.data() + 4, pc::detail::load<std::uint32_t>(bad.data()));
    CHECK(tk.decode(cb(bad), 0.05, mv(y)).error().code == paco::errc::corrupt);  // not increasing
  }
  pc::sign_prune sp;
  w = truncated_oversized(sp, 0.5);
  {
    auto bad = w;
    bad[0] ^= std::byte{0xff};  // popcount changes
    bad[1] ^= std::byte{0x01};
    CHECK(sp.decode(cb(bad), 0.5, mv(y)).error().code == paco::errc::corrupt);
    std::vector<float> x3(3, 1.0f), y3(3);
    auto w3 = encode_checked(sp, x3, 0.0);
    w3[0] = std::byte{0x0b};  // 3 bits set, one of them padding
    CHECK(sp.decode(cb(w3), 0.0, mv(y3)).error().code == paco::errc::corrupt);
  }
  pc::powersgd p;
  pc::powersgd_state st;
  REQUIRE(p.init(st, {10, 30}, 2));
  std::vector<std::byte> short_q(p.round_bytes({10, 30}, 2, 1) - 4);
  CHECK(p.decode(st, cb(short_q), 1, mv(y)).error().code == paco::errc::corrupt);
}

// ---- L-GreCo ----

namespace {
struct instance {
  std::vector<std::vector<double>> bytes, errors;
};
instance random_instance(paco::rng& g, std::size_t L, std::size_t C) {
  instance in{std::vector<std::vector<double>>(L), std::vector<std::vector<double>>(L)};
  for (std::size_t l = 0; l < L; ++l)
    for (std::size_t c = 0; c < C; ++c) {
      in.bytes[l].push_back(static_cast<double>(1 + g.below(1000)));
      in.errors[l].push_back(g.uniform() * 10.0);
    }
  return in;
}
// min Σ bytes s.t. Σ err <= budget (or Σ ceil-buckets <= D when `buckets`), by enumeration.
double brute(const instance& in, double budget, std::size_t buckets = 0) {
  const std::size_t L = in.bytes.size(), C = in.bytes[0].size();
  std::size_t total = 1;
  for (std::size_t l = 0; l < L; ++l) total *= C;
  double best = INFINITY;
  const double bucket = buckets ? budget / buckets : 0;
  for (std::size_t code = 0; code < total; ++code) {
    std::size_t k = code;
    double b = 0, e = 0, eb = 0;
    bool ok = true;
    for (std::size_t l = 0; l < L; ++l, k /= C) {
      const double err = in.errors[l][k % C];
      b += in.bytes[l][k % C];
      e += err;
      if (buckets) {
        if (err > budget) ok = false;
        eb += err == 0 ? 0 : std::floor(err / bucket) + 1;
      }
    }
    if (buckets ? (ok && eb <= buckets) : e <= budget) best = std::min(best, b);
  }
  return best;
}
}  // namespace

TEST_CASE("lgreco DP equals brute force on small instances", "[compress][lgreco]") {
  paco::rng g(2024);
  for (int t = 0; t < 300; ++t) {
    const std::size_t L = 1 + g.below(5), C = 1 + g.below(4), D = 1 + g.below(200);
    auto in = random_instance(g, L, C);
    const double budget = g.uniform() * 10.0 * L;
    const double discrete = brute(in, budget, D);
    auto sol = pc::lgreco_solve(in.bytes, in.errors, budget, D);
    INFO("t " << t << " L " << L << " C " << C << " D " << D << " budget " << budget);
    if (!std::isfinite(discrete)) {
      REQUIRE(!sol);
      continue;
    }
    REQUIRE(sol);
    CHECK(sol->bytes == discrete);
    CHECK(sol->error <= budget);
    CHECK(sol->bytes >= brute(in, budget));  // no better than the exact continuous optimum
    // with D buckets, anything within budget·(1 − L/D) is reachable
    const double tight = brute(in, budget * (1.0 - double(L) / D));
    if (std::isfinite(tight)) CHECK(sol->bytes <= tight);
  }
}

TEST_CASE("lgreco never exceeds its budget; keeps cheaper defaults", "[compress][lgreco]") {
  paco::rng g(7);
  for (int t = 0; t < 500; ++t) {
    const std::size_t L = 1 + g.below(30), C = 1 + g.below(8);
    auto in = random_instance(g, L, C);
    std::vector<std::size_t> def(L);
    double base = 0;
    for (std::size_t l = 0; l < L; ++l) {
      def[l] = g.below(C);
      base += in.errors[l][def[l]];
    }
    const double alpha = 0.5 + g.uniform();
    auto sol = pc::lgreco_solve(in.bytes, in.errors, alpha * base, 1 + g.below(2000), def);
    if (alpha >= 1.0) REQUIRE(sol);  // the default levels always fit
    if (!sol) continue;
    REQUIRE(sol->error <= alpha * base);
    if (alpha >= 1.0) {
      double def_bytes = 0;
      for (std::size_t l = 0; l < L; ++l) def_bytes += in.bytes[l][def[l]];
      REQUIRE(sol->bytes <= def_bytes);
    }
  }
}

TEST_CASE("lgreco controller adapts quantize bits and topk density per module",
          "[compress][lgreco]") {
  pc::quantize q({.bits = 4, .block = 64});
  const std::vector<pc::matrix_shape> shapes{{1, 8192}, {16, 16}, {1, 1000}};
  pc::lgreco<pc::quantize> ctl(q, {.alpha = 1.0, .period = 4, .window = 2, .buckets = 2000}, shapes,
                               {2, 4, 8}, 4);
  int solved = 0;
  for (int round = 0; round < 8; ++round) {
    for (std::size_t m = 0; m < shapes.size(); ++m) {
      // module 1 is small but a hundred times the magnitude of the others
      auto gm = gaussian(shapes[m].size(), 31 * round + m, m == 1 ? 1.0f : 0.01f);
      REQUIRE(ctl.observe(m, cv(gm)));
    }
    auto r = ctl.end_round();
    REQUIRE(r);
    if (r.value()) {
      ++solved;
      CHECK(ctl.last().error <= ctl.last().budget);
    }
  }
  CHECK(solved == 2);
  // the large module needs more bits to stay within the uniform-int4 error; the small ones fewer
  CHECK(ctl.level(1) == 8);
  CHECK(ctl.level(0) == 2);
  double bytes = 0, uniform = 0;
  for (std::size_t m = 0; m < shapes.size(); ++m) {
    bytes += q.wire_bytes(shapes[m].size(), ctl.level(m));
    uniform += q.wire_bytes(shapes[m].size(), 4);
  }
  CHECK(bytes <= uniform);

  pc::powersgd p({.rank = 4});
  pc::lgreco<pc::powersgd> ctl2(p, {.period = 1, .window = 1, .buckets = 1000},
                                {{64, 32}, {16, 16}}, {2, 4, 8}, 4);
  auto a = low_rank(64, 32, 2, 1), b = gaussian(256, 2);
  REQUIRE(ctl2.observe(0, cv(a)));
  REQUIRE(ctl2.observe(1, cv(b)));
  REQUIRE(ctl2.end_round().value());
  CHECK(ctl2.level(0) == 2);  // rank 2 is exact for a rank-2 module: fewer bytes, same error
  CHECK(ctl2.last().error <= ctl2.last().budget);
  CHECK(!ctl2.observe(0, cv(b)));  // wrong size
  std::vector<float> short_r(10);
  CHECK(!ctl2.observe(1, cv(b), cv(short_r)));
  std::vector<float> zero_r(256, 0.0f);
  CHECK(ctl2.observe(1, cv(b), cv(zero_r)));
}

// ---- host twins of the update kernels: optim::adamw_update, outer::nesterov_update ----

TEST_CASE("adamw_update and nesterov_update match PyTorch", "[compress][elementwise]") {
  // torch 1.13: AdamW(lr=1e-2, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1), three steps
  std::vector<float> theta{1.0f, -0.5f, 0.25f, 2.0f, 0.0f}, m(5, 0.0f), v(5, 0.0f);
  const std::vector<std::vector<float>> grads{{0.1f, -0.2f, 0.3f, 0.0f, 1.0f},
                                              {0.05f, 0.1f, -0.3f, 0.2f, -1.0f},
                                              {-0.1f, 0.0f, 0.1f, 0.4f, 0.5f}};
  for (long t = 1; t <= 3; ++t) {
    const auto k = popt::formula::make_adamw_scalars(1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, t);
    REQUIRE(popt::adamw_update(mv(theta), mv(m), mv(v), cv(grads[t - 1]), k));
  }
  const std::vector<double> torch{0.9765318632125854, -0.4837391674518585, 0.2387143075466156,
                                  1.9785404205322266, -0.011216438375413418};
  for (std::size_t i = 0; i < 5; ++i) CHECK(theta[i] == Approx(torch[i]).epsilon(2e-6));
  // torch SGD(lr=0.7, momentum=0.9, nesterov=True) on pseudo-gradients Δ
  std::vector<float> th{1.0f, -0.5f, 0.25f}, b(3, 0.0f);
  std::vector<float> d1{0.1f, -0.2f, 0.3f}, d2{0.05f, 0.1f, -0.3f};
  REQUIRE(pout::nesterov_update(mv(th), mv(b), cv(d1), 0.9f, 0.7f));
  REQUIRE(pout::nesterov_update(mv(th), mv(b), cv(d2), 0.9f, 0.7f));
  const std::vector<double> torch2{0.7437999844551086, -0.25360003113746643, 0.07990001887083054};
  for (std::size_t i = 0; i < 3; ++i) CHECK(th[i] == Approx(torch2[i]).epsilon(1e-6));
  std::vector<float> short_b(2);
  CHECK(!pout::nesterov_update(mv(th), mv(short_b), cv(d1), 0.9f, 0.7f));
}

TEST_CASE("the kernels' host twins run the trainer's update code", "[compress][elementwise]") {
  // adamw_update with make_adamw_scalars is optim::adamw::step, nesterov_update is
  // outer::nesterov::step: the same bits, so the CUDA tests check what training computes.
  const std::size_t n = 1000;
  auto theta = gaussian(n, 1), g = gaussian(n, 2, 0.1f), delta = gaussian(n, 3, 0.01f);
  std::vector<float> m(n, 0.0f), v(n, 0.0f), b(n, 0.0f);
  auto theta2 = theta, m2 = m, v2 = v, b2 = b;
  const paco::optim::adamw opt{.lr = 1e-2f, .beta1 = 0.9f, .beta2 = 0.95f, .weight_decay = 0.1f};
  const paco::outer::nesterov outer{.lr = 0.7f, .momentum = 0.9f};
  for (long t = 1; t <= 3; ++t) {
    const float lr_t = opt.lr * float(t) / 3;
    opt.step(theta.data(), g.data(), m.data(), v.data(), n, t, lr_t);
    const auto k =
        popt::formula::make_adamw_scalars(lr_t, opt.beta1, opt.beta2, opt.eps, opt.weight_decay, t);
    REQUIRE(popt::adamw_update(mv(theta2), mv(m2), mv(v2), cv(g), k));
    outer.step(theta, delta, b);
    REQUIRE(pout::nesterov_update(mv(theta2), mv(b2), cv(delta), outer.momentum, outer.lr));
  }
  for (auto [x, y] : {std::pair{&theta, &theta2}, {&m, &m2}, {&v, &v2}, {&b, &b2}})
    CHECK(std::memcmp(x->data(), y->data(), 4 * n) == 0);
}

// ---- combining payloads, config strings ----

TEST_CASE("gather_mean, summed_mean and ties_merge_payloads", "[compress][combine]") {
  const std::size_t n = 777, P = 3;
  std::vector<std::vector<float>> g;
  for (std::size_t w = 0; w < P; ++w) g.push_back(gaussian(n, 900 + w));
  std::vector<float> y(n), scratch(3 * n), ref(n);
  // quantize: all-gathered, weighted mean of the decoded payloads
  pc::quantize q({.bits = 8, .block = 64});
  std::vector<std::vector<std::byte>> wires;
  for (auto& x : g) wires.push_back(encode_checked(q, x, 8));
  std::vector<slice<const std::byte>> views;
  for (auto& w : wires) views.push_back(cb(w));
  const std::vector<double> weights{1, 2, 1};
  REQUIRE(pc::gather_mean(q, std::span<const slice<const std::byte>>(views), 8, mv(y), mv(scratch),
                          weights));
  std::vector<float> d(n);
  std::fill(ref.begin(), ref.end(), 0.0f);
  for (std::size_t w = 0; w < P; ++w) {
    REQUIRE(q.decode(views[w], 8, mv(d)));
    for (std::size_t i = 0; i < n; ++i) ref[i] += static_cast<float>(weights[w] / 4) * d[i];
  }
  for (std::size_t i = 0; i < n; ++i) REQUIRE(y[i] == Approx(ref[i]).margin(1e-6));
  // identity: the wire sums, summed_mean divides
  std::vector<float> sum(n, 0.0f);
  for (auto& x : g)
    for (std::size_t i = 0; i < n; ++i) sum[i] += x[i];
  pc::identity id;
  auto sw = encode_checked(id, sum, 32);
  REQUIRE(pc::summed_mean(id, cb(sw), P, 32, mv(y)));
  for (std::size_t i = 0; i < n; ++i) REQUIRE(y[i] == Approx(sum[i] / 3).margin(1e-6));
  // sign_prune: streaming TIES merge equals ties_merge of the decoded vectors
  pc::sign_prune sp;
  wires.clear();
  views.clear();
  std::vector<std::vector<float>> decoded(P, std::vector<float>(n));
  for (std::size_t w = 0; w < P; ++w) {
    wires.push_back(encode_checked(sp, g[w], 0.5));
    REQUIRE(sp.decode(cb(wires.back()), 0.5, mv(decoded[w])));
  }
  for (auto& w : wires) views.push_back(cb(w));
  REQUIRE(pc::ties_merge_payloads(sp, std::span<const slice<const std::byte>>(views), 0.5, mv(y),
                                  mv(scratch)));
  std::vector<slice<const float>> dv;
  for (auto& v : decoded) dv.push_back(cv(v));
  REQUIRE(pc::ties_merge(dv, mv(ref)));
  for (std::size_t i = 0; i < n; ++i) REQUIRE(y[i] == Approx(ref[i]).margin(1e-6));
  std::vector<float> small(n);
  CHECK(!pc::ties_merge_payloads(sp, std::span<const slice<const std::byte>>(views), 0.5, mv(y),
                                 mv(small)));
}

TEST_CASE("parse_compress_spec accepts the documented forms", "[compress][spec]") {
  auto s = pc::parse_compress_spec("int4");
  REQUIRE(s);
  CHECK(s->kind == pc::codec_kind::quantize);
  CHECK(s->bits == 4);
  CHECK(s->error_feedback);
  s = pc::parse_compress_spec("topk:0.01+noef");
  REQUIRE(s);
  CHECK(s->kind == pc::codec_kind::topk);
  CHECK(s->density == 0.01);
  CHECK(!s->error_feedback);
  s = pc::parse_compress_spec("powersgd:4");
  REQUIRE(s);
  CHECK(s->rank == 4);
  s = pc::parse_compress_spec("lgreco:int");
  REQUIRE(s);
  CHECK((s->lgreco && s->kind == pc::codec_kind::quantize && s->bits == 4));
  s = pc::parse_compress_spec("lgreco:powersgd:4");
  REQUIRE(s);
  CHECK((s->lgreco && s->rank == 4));
  CHECK(pc::parse_compress_spec("fp32")->kind == pc::codec_kind::identity);
  CHECK(pc::parse_compress_spec("bf16")->kind == pc::codec_kind::bf16);
  CHECK(pc::parse_compress_spec("ties:0.25")->prune == 0.25);
  for (int b = 2; b <= 8; ++b) {
    const std::string name = "int" + std::to_string(b);
    auto q = pc::parse_compress_spec(name);
    REQUIRE(q);
    CHECK(q->bits == b);
    CHECK(pc::to_string(*q) == name);
  }
  CHECK(pc::lgreco_bits() == std::vector<int>{2, 3, 4, 5, 6, 7, 8});
  for (const char* bad : {"int1", "int9", "int16", "topk:0", "topk:1.5", "topk:x", "powersgd:0",
                          "powersgd:2.5", "lgreco:fp32", "zstd", "", "sign_prune:1"}) {
    auto r = pc::parse_compress_spec(bad);
    INFO(bad);
    REQUIRE(!r);
    CHECK(r.error().code == paco::errc::invalid_argument);
    CHECK(r.error().message.find("accepted") != std::string::npos);
  }
  CHECK(pc::lgreco_ranks(4) == std::vector<int>{2, 3, 4, 5, 6, 7, 8});
  CHECK(pc::lgreco_densities(0.5) == std::vector<double>{0.125, 0.25, 0.5, 1.0});
}
