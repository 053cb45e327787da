// module_codec: segment tables, the payload format (exact sizes, round trips, the levels named
// in the header), refusal of damaged payloads, L-GreCo's level changes within the budget,
// PowerSGD rounds, and the config strings' canonical form.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "paco/compress/compress.hpp"
#include "paco/core/rng.hpp"
#include "vectors.hpp"

namespace pc = paco::compress;
using paco::slice;
using namespace compress_test;

namespace {

// Three tensors with a padding gap: a vector (40), a matrix (24, 16), a vector (5).
std::vector<paco::named_tensor> tensors() {
  return {{"a", 100, {40}}, {"w", 140, {24, 16}}, {"b", 140 + 384 + 11, {5}}};
}

pc::module_codec codec_of(const char* text, std::vector<pc::segment> segs,
                          pc::module_codec_options o = {}) {
  auto s = pc::parse_compress_spec(text);
  REQUIRE(s.ok());
  auto c = pc::module_codec::make(*s, std::move(segs), o);
  REQUIRE(c.ok());
  return std::move(*c);
}

}  // namespace

TEST_CASE("segments_of tiles a span with the tensors' shapes; gaps are vectors",
          "[compress][module]") {
  const auto t = tensors();
  auto s = pc::segments_of(t, 100, 540);
  REQUIRE(s.ok());
  const std::vector<pc::segment> want{
      {0, {1, 40}}, {40, {24, 16}}, {424, {1, 11}}, {435, {1, 5}}, {440, {1, 100}}};
  REQUIRE(*s == want);
  REQUIRE_FALSE(pc::segments_of(t, 150, 400).ok());  // "w" straddles the start
  REQUIRE(pc::whole_span(7) == std::vector<pc::segment>{{0, {1, 7}}});
  REQUIRE(pc::layout_hash(*s) != pc::layout_hash(pc::whole_span(540)));
}

TEST_CASE("module_codec payloads: exact size, round trip, error feedback, levels in the header",
          "[compress][module]") {
  const auto segs = *pc::segments_of(tensors(), 100, 540);
  const auto x = gaussian(540, 3);
  for (const char* text : {"fp32", "bf16", "fp16", "int8", "int4", "int2", "topk:0.1",
                           "sign_prune:0.5", "lgreco:int", "int4+noef"}) {
    INFO(text);
    auto c = codec_of(text, segs);
    REQUIRE_FALSE(c.multi_round());
    std::vector<float> res(540, 0.0f), y(540);
    std::vector<std::byte> out;
    REQUIRE(c.encode(cv(x), mv(res), out).ok());
    REQUIRE(out.size() == c.header_bytes() + [&] {
      std::size_t b = 0;
      for (std::size_t s = 0; s < segs.size(); ++s) {
        const double l = c.level(s);
        const auto sp = c.spec();
        switch (sp.kind) {
          case pc::codec_kind::identity: b += pc::identity{}.wire_bytes(segs[s].size()); break;
          case pc::codec_kind::bf16:
          case pc::codec_kind::fp16: b += pc::cast{}.wire_bytes(segs[s].size()); break;
          case pc::codec_kind::quantize:
            b += pc::quantize{}.wire_bytes(segs[s].size(), int(l));
            break;
          case pc::codec_kind::topk: b += pc::topk{}.wire_bytes(segs[s].size(), l); break;
          case pc::codec_kind::sign_prune:
            b += pc::sign_prune{}.wire_bytes(segs[s].size(), l);
            break;
          default: break;
        }
      }
      return b;
    }());
    REQUIRE(out.size() <= c.max_payload_bytes());
    pc::payload_header h;
    std::memcpy(&h, out.data(), sizeof h);
    REQUIRE(h.magic == pc::payload_magic);
    REQUIRE(h.segments == segs.size());
    REQUIRE(h.elements == 540);
    for (std::size_t s = 0; s < segs.size(); ++s) {
      double l;
      std::memcpy(&l, out.data() + sizeof h + 8 * s, 8);
      REQUIRE(l == c.level(s));
    }
    // A receiver built from the same spec decodes it; x = decode + residual (error feedback).
    auto rx = codec_of(text, segs);
    REQUIRE(rx.decode(out, mv(y)).ok());
    if (c.error_feedback()) {
      for (std::size_t i = 0; i < 540; ++i) REQUIRE(y[i] + res[i] == Approx(x[i]).margin(1e-6));
    } else if (c.spec().kind == pc::codec_kind::identity) {
      REQUIRE(y == x);
      REQUIRE(std::all_of(res.begin(), res.end(), [](float v) { return v == 0.0f; }));
    }
  }
}

TEST_CASE("int2:minmax has four levels per block, from its minimum to its maximum",
          "[compress][module]") {
  // A block of 256 holding -1, -1/3, 1/3 and 1: the four levels lo + q (hi - lo) / 3, so
  // min-max 2-bit codes carry it (to float rounding); absmax 2-bit codes have three levels
  // (-s, 0, s) and miss +-1/3 by a third.
  const auto segs = pc::whole_span(256);
  std::vector<float> x(256);
  for (std::size_t i = 0; i < 256; ++i) x[i] = -1.0f + 2.0f * float(i % 4) / 3.0f;
  for (const char* text : {"int2:minmax", "int2"}) {
    INFO(text);
    auto c = codec_of(text, segs);
    std::vector<float> res(256, 0.0f), y(256);
    std::vector<std::byte> out;
    REQUIRE(c.encode(cv(x), mv(res), out).ok());
    const bool mm = std::string(text) == "int2:minmax";
    REQUIRE(out.size() == c.header_bytes() + (mm ? 8 : 4) + 64);  // scale (+ minimum), codes
    REQUIRE(codec_of(text, segs).decode(out, mv(y)).ok());
    double worst = 0;
    for (std::size_t i = 0; i < 256; ++i) worst = std::max(worst, double(std::abs(y[i] - x[i])));
    if (mm)
      CHECK(worst < 1e-6);
    else
      CHECK(worst == Approx(1.0 / 3).margin(1e-6));
  }
  auto s = pc::parse_compress_spec("int2:minmax");
  REQUIRE(s);
  CHECK((s->minmax && s->bits == 2 && pc::to_string(*s) == "int2:minmax"));
  CHECK_FALSE(pc::parse_compress_spec("lgreco:int2:minmax"));
  CHECK_FALSE(pc::parse_compress_spec("int2:absmin"));
}

TEST_CASE("module_codec refuses damaged, foreign and truncated payloads", "[compress][module]") {
  const auto segs = *pc::segments_of(tensors(), 100, 540);
  auto c = codec_of("int8", segs);
  const auto x = gaussian(540, 5);
  std::vector<float> res(540, 0.0f), y(540);
  std::vector<std::byte> good;
  REQUIRE(c.encode(cv(x), mv(res), good).ok());
  auto code = [&](std::vector<std::byte> p) { return c.decode(p, mv(y)).error().code; };
  const auto corrupt = make_error_code(paco::errc::corrupt);
  const auto mismatch = make_error_code(paco::errc::mismatch);
  for (std::size_t at :
       {std::size_t(0), sizeof(pc::payload_header) + 3, good.size() / 2, good.size() - 1}) {
    auto p = good;
    p[at] ^= std::byte{0x01};
    INFO("flipped byte " << at);
    REQUIRE(code(p) == corrupt);  // magic or checksum
  }
  REQUIRE(code({good.begin(), good.begin() + 20}) == corrupt);  // shorter than the header
  REQUIRE(code({good.begin(), good.end() - 1}) == corrupt);
  auto longer = good;
  longer.push_back(std::byte{0});
  REQUIRE(code(longer) == corrupt);
  auto v2 = good;
  v2[4] = std::byte{2};  // version
  REQUIRE(code(v2) == make_error_code(paco::errc::version));
  // A payload of another codec or another module layout.
  auto other = codec_of("topk:0.1", segs);
  std::vector<float> r2(540, 0.0f);
  std::vector<std::byte> tp;
  REQUIRE(other.encode(cv(x), mv(r2), tp).ok());
  REQUIRE(code(tp) == mismatch);
  auto flat = codec_of("int8", pc::whole_span(540));
  std::vector<std::byte> fp;
  REQUIRE(flat.encode(cv(x), mv(r2), fp).ok());
  REQUIRE(code(fp) == mismatch);
  // A level the codec cannot have (with a valid checksum): int8 payload claiming 3 bits.
  auto lv = good;
  const double three = 3;
  std::memcpy(lv.data() + sizeof(pc::payload_header), &three, 8);
  pc::payload_header h;
  std::memcpy(&h, lv.data(), sizeof h);
  h.check = paco::hash64(lv.data() + sizeof h, lv.size() - sizeof h);
  std::memcpy(lv.data(), &h, sizeof h);
  const auto st = c.decode(lv, mv(y));
  REQUIRE(st.error().code == corrupt);
  REQUIRE(st.error().message.find("level") != std::string::npos);
  REQUIRE(c.decode(good, mv(y)).ok());
}

TEST_CASE("module_codec L-GreCo: levels change every F rounds, within the error budget",
          "[compress][module][lgreco]") {
  // A large quiet segment, a large ordinary one and a small loud one: sending the quiet one
  // with 2 bits and the loud one with 8 keeps the total error within uniform int4's and sends
  // fewer bytes (the loud one is small).
  const std::vector<pc::segment> segs{{0, {1, 4096}}, {4096, {1, 4096}}, {8192, {1, 512}}};
  const std::size_t n = 8704;
  pc::module_codec_options o;
  o.lgreco.period = 2;
  o.lgreco.window = 2;
  auto c = codec_of("lgreco:int", segs, o);
  auto uniform = codec_of("int4", segs);
  std::vector<float> res(n, 0.0f), ures(n, 0.0f), y(n);
  std::vector<std::byte> out, uout;
  for (int round = 0; round < 4; ++round) {
    std::vector<float> g = gaussian(n, 10 + round);
    for (std::size_t i = 0; i < 4096; ++i) g[i] *= 1e-2f;  // quiet
    for (std::size_t i = 8192; i < n; ++i) g[i] *= 10.0f;  // loud
    if (round < 2)
      for (std::size_t s = 0; s < 3; ++s) REQUIRE(c.level(s) == 4);  // before the first solve
    REQUIRE(c.encode(cv(g), mv(res), out).ok());
    REQUIRE(uniform.encode(cv(g), mv(ures), uout).ok());
    REQUIRE(codec_of("lgreco:int", segs, o).decode(out, mv(y)).ok());  // any receiver decodes
  }
  REQUIRE(c.lgreco_solves() == 2);
  REQUIRE(c.level(0) == 2);  // quiet: fewest bits
  REQUIRE(c.level(1) >= 3);  // ordinary: about int4 (bits 2..8 give the knapsack finer steps)
  REQUIRE(c.level(1) <= 4);
  REQUIRE(c.level(2) > 4);  // loud: more bits
  REQUIRE(out.size() < uout.size());
  // Within the budget: the error of these levels on a fresh gradient is at most uniform int4's
  // (up to sampling: same distribution).
  std::vector<float> g = gaussian(n, 99);
  for (std::size_t i = 0; i < 4096; ++i) g[i] *= 1e-2f;
  for (std::size_t i = 8192; i < n; ++i) g[i] *= 10.0f;
  pc::quantize q;
  double e_adapt = 0, e_uni = 0;
  for (std::size_t s = 0; s < 3; ++s) {
    slice<const float> gs(g.data() + segs[s].offset, segs[s].size());
    e_adapt += q.error(int(c.level(s)), gs);
    e_uni += q.error(4, gs);
  }
  REQUIRE(e_adapt <= e_uni * 1.05);
}

TEST_CASE("module_codec PowerSGD rounds: two workers' summed rounds give the mean of a low-rank Δ",
          "[compress][module][powersgd]") {
  // A rank-2 (32, 24) matrix plus a vector; both workers send multiples of it.
  const std::vector<pc::segment> segs{{0, {32, 24}}, {768, {1, 10}}};
  std::vector<float> base(778);
  const auto u = gaussian(64, 1), v = gaussian(48, 2);
  for (std::size_t i = 0; i < 32; ++i)
    for (std::size_t j = 0; j < 24; ++j)
      base[i * 24 + j] = u[2 * i] * v[2 * j] + u[2 * i + 1] * v[2 * j + 1];
  for (std::size_t i = 768; i < 778; ++i) base[i] = float(i % 5);
  auto c0 = codec_of("powersgd:2", segs), c1 = codec_of("powersgd:2", segs);
  REQUIRE(c0.multi_round());
  REQUIRE(c0.compressed_segments() == 1);
  REQUIRE(c0.round_floats(0) == 32 * 2 + 10);
  REQUIRE(c0.round_floats(1) == 24 * 2);
  std::vector<float> g0 = base, g1 = base;
  for (auto& x : g1) x *= 3.0f;
  std::vector<float> r0(778, 0.0f), r1(778, 0.0f);
  std::vector<float> a0(c0.round_floats(0)), a1(a0.size()), sum0(a0.size());
  REQUIRE(c0.encode_round(0, cv(g0), mv(r0), {}, mv(a0)).ok());
  REQUIRE(c1.encode_round(0, cv(g1), mv(r1), {}, mv(a1)).ok());
  for (std::size_t i = 0; i < sum0.size(); ++i) sum0[i] = a0[i] + a1[i];
  std::vector<float> b0(c0.round_floats(1)), b1(b0.size()), sum1(b0.size());
  REQUIRE(c0.encode_round(1, cv(g0), mv(r0), cv(sum0), mv(b0)).ok());
  REQUIRE(c1.encode_round(1, cv(g1), mv(r1), cv(sum0), mv(b1)).ok());
  for (std::size_t i = 0; i < sum1.size(); ++i) sum1[i] = b0[i] + b1[i];
  std::vector<float> y0(778), y1(778);
  REQUIRE(c0.decode_rounds(cv(sum1), 2, mv(y0), mv(r0)).ok());
  REQUIRE(c1.decode_rounds(cv(sum1), 2, mv(y1), mv(r1)).ok());
  REQUIRE(y0 == y1);  // every worker reconstructs the same mean
  for (std::size_t i = 0; i < 778; ++i) REQUIRE(y0[i] == Approx(2.0f * base[i]).margin(1e-3));
  // Error feedback: each residual is its own M minus the mean reconstruction; vectors none.
  for (std::size_t i = 0; i < 768; ++i) REQUIRE(r0[i] == Approx(g0[i] - y0[i]).margin(1e-3));
  for (std::size_t i = 768; i < 778; ++i) REQUIRE(r0[i] == 0.0f);
  REQUIRE_FALSE(pc::module_codec::make(*pc::parse_compress_spec("lgreco:powersgd:2"), segs).ok());
}

TEST_CASE("summed payloads: fp32 and bf16 arrays decode to the mean; half_sum rounds once",
          "[compress][module]") {
  const auto x = gaussian(300, 8);
  for (const char* text : {"fp32", "bf16", "fp16"}) {
    auto c = codec_of(text, pc::whole_span(300));
    REQUIRE(c.summed_bytes() == (std::string(text) == "fp32" ? 1200u : 600u));
    std::vector<std::byte> b(c.summed_bytes());
    std::vector<float> res(300, 0.0f), y(300);
    REQUIRE(c.encode_summed(cv(x), mv(res), b).ok());
    REQUIRE(c.decode_summed(b, 1, mv(y)).ok());
    for (std::size_t i = 0; i < 300; ++i) REQUIRE(y[i] + res[i] == Approx(x[i]).margin(1e-6));
  }
  REQUIRE(codec_of("int8", pc::whole_span(10)).summed_bytes() == 0);
  const pc::half_sum bf{pc::half_format::bf16};
  namespace fm = pc::formula;
  REQUIRE(fm::from_bf16(bf(fm::to_bf16(1.5f), fm::to_bf16(2.25f))) == 3.75f);
}

TEST_CASE("to_string(spec) is the canonical form and reads back", "[compress][spec]") {
  for (const char* text :
       {"fp32", "bf16", "fp16", "int8", "int4", "int2", "topk:0.01", "sign_prune:0.5", "powersgd:4",
        "lgreco:int", "lgreco:topk:0.01", "lgreco:powersgd:4", "int4+noef", "topk:0.25+noef"}) {
    auto s = pc::parse_compress_spec(text);
    REQUIRE(s.ok());
    REQUIRE(pc::to_string(*s) == text);
    REQUIRE(*pc::parse_compress_spec(pc::to_string(*s)) == *s);
  }
  REQUIRE(pc::to_string(*pc::parse_compress_spec("identity")) == "fp32");
}
