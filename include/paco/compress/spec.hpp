#pragma once
// compress_spec: the compressor named by a config string, as the trainers' `compress = "..."`
// field spells it, parsed with an error that names the accepted forms.
//
//   "fp32" | "identity"          no compression                          (summed)
//   "bf16" | "fp16"              cast                                    (summed)
//   "int8" .. "int2"             blockwise absmax quantisation to 8..2 bits, block 256 (gathered)
//   "int8:minmax" .. "int2:minmax"  the same with a scale and a minimum per block (2^bits levels
//                                from the block's minimum to its maximum; int2 has 4, absmax 3)
//   "topk:D"                     top-k at density D ∈ (0, 1]             (all-gathered)
//   "sign_prune:P" | "ties:P"    TIES pruning of the fraction P ∈ [0,1)  (all-gathered, TIES merge)
//   "powersgd:R"                 rank-R PowerSGD, R >= 1                 (summed, two rounds)
//   "lgreco:int"                 L-GreCo over bits 2..8, default 4
//   "lgreco:topk:D"              L-GreCo over densities D·{1/4,1/2,1,2,4} ∩ (0,1], default D
//   "lgreco:powersgd:R"          L-GreCo over ranks ⌊R/2⌋..2R (γ = 0.5, β = 2), default R
// Lossy codecs run with error feedback unless the string ends in "+noef".

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "paco/core/error.hpp"

namespace paco::compress {

enum class codec_kind { identity, bf16, fp16, quantize, topk, sign_prune, powersgd };

struct compress_spec {
  codec_kind kind = codec_kind::identity;
  int bits = 8;                // quantize
  bool minmax = false;         // quantize: a scale and a minimum per block (else absmax)
  double density = 0.01;       // topk
  double prune = 0.5;          // sign_prune
  int rank = 4;                // powersgd
  bool lgreco = false;         // per-module adaptive levels (L-GreCo)
  bool error_feedback = true;  // keep a residual per module (ignored for lossless codecs)
  friend bool operator==(const compress_spec&, const compress_spec&) = default;
};

namespace detail {
inline bool parse_number(std::string_view s, double& v) {
  const std::string t(s);
  char* end = nullptr;
  v = std::strtod(t.c_str(), &end);
  return !t.empty() && end == t.c_str() + t.size() && std::isfinite(v);
}
}  // namespace detail

// Ensures: the spec of `text`, or invalid_argument naming the accepted forms.
inline result<compress_spec> parse_compress_spec(std::string_view text) {
  const auto bad = [&](const std::string& why) {
    return result<compress_spec>(
        errc::invalid_argument,
        "compress = \"" + std::string(text) + "\": " + why +
            "; accepted fp32, bf16, fp16, int8 .. int2 (each optionally :minmax), topk:D (0<D<=1), "
            "sign_prune:P "
            "(0<=P<1), powersgd:R (R>=1), lgreco:int, lgreco:topk:D, lgreco:powersgd:R, "
            "optionally followed by +noef");
  };
  compress_spec s;
  std::string_view t = text;
  if (t.size() >= 5 && t.substr(t.size() - 5) == "+noef") {
    s.error_feedback = false;
    t.remove_suffix(5);
  }
  if (t.substr(0, 7) == "lgreco:") {
    s.lgreco = true;
    t.remove_prefix(7);
    if (t == "int") t = "int4";
  }
  const auto colon = t.find(':');
  const std::string_view head = t.substr(0, colon);
  const std::string_view arg = colon == std::string_view::npos ? "" : t.substr(colon + 1);
  double v = 0;
  if ((head == "fp32" || head == "identity") && arg.empty() && !s.lgreco) {
    s.kind = codec_kind::identity;
  } else if ((head == "bf16" || head == "fp16") && arg.empty() && !s.lgreco) {
    s.kind = head == "bf16" ? codec_kind::bf16 : codec_kind::fp16;
  } else if (head.size() == 4 && head.substr(0, 3) == "int" && head[3] >= '2' && head[3] <= '8' &&
             (arg.empty() || (arg == "minmax" && !s.lgreco))) {
    s.kind = codec_kind::quantize;
    s.bits = head[3] - '0';
    s.minmax = !arg.empty();
  } else if (head == "topk") {
    if (!detail::parse_number(arg, v) || !(v > 0 && v <= 1)) return bad("density out of (0, 1]");
    s.kind = codec_kind::topk;
    s.density = v;
  } else if ((head == "sign_prune" || head == "ties") && !s.lgreco) {
    if (!detail::parse_number(arg, v) || !(v >= 0 && v < 1)) return bad("prune out of [0, 1)");
    s.kind = codec_kind::sign_prune;
    s.prune = v;
  } else if (head == "powersgd") {
    if (!detail::parse_number(arg, v) || v < 1 || v != std::floor(v) || v > 65535)
      return bad("rank must be an integer >= 1");
    s.kind = codec_kind::powersgd;
    s.rank = static_cast<int>(v);
  } else {
    return bad("unknown compressor");
  }
  return s;
}

inline const char* to_string(codec_kind k) {
  switch (k) {
    case codec_kind::identity: return "fp32";
    case codec_kind::bf16: return "bf16";
    case codec_kind::fp16: return "fp16";
    case codec_kind::quantize: return "quantize";
    case codec_kind::topk: return "topk";
    case codec_kind::sign_prune: return "sign_prune";
    case codec_kind::powersgd: return "powersgd";
  }
  return "?";
}

// The canonical config string of a spec. Ensures: parse_compress_spec(to_string(s)) == s for
// every spec parse_compress_spec returns (densities and fractions in their shortest exact form).
inline std::string to_string(const compress_spec& s) {
  const auto num = [](double v) {  // the shortest %g form that reads back to v
    char c[32];
    for (int p = 1; p < 17; ++p) {
      std::snprintf(c, sizeof c, "%.*g", p, v);
      if (std::strtod(c, nullptr) == v) return std::string(c);
    }
    std::snprintf(c, sizeof c, "%.17g", v);
    return std::string(c);
  };
  std::string t;
  switch (s.kind) {
    case codec_kind::identity: t = "fp32"; break;
    case codec_kind::bf16: t = "bf16"; break;
    case codec_kind::fp16: t = "fp16"; break;
    case codec_kind::quantize:
      t = s.lgreco && s.bits == 4 ? "int" : "int" + std::to_string(s.bits);
      if (s.minmax) t += ":minmax";
      break;
    case codec_kind::topk: t = "topk:" + num(s.density); break;
    case codec_kind::sign_prune: t = "sign_prune:" + num(s.prune); break;
    case codec_kind::powersgd: t = "powersgd:" + std::to_string(s.rank); break;
  }
  if (s.lgreco) t = "lgreco:" + t;
  if (!s.error_feedback) t += "+noef";
  return t;
}

// L-GreCo candidate bit widths for quantize (ALGORITHMS.md §5.1: bits 2..8).
// Ensures: {2, 3, 4, 5, 6, 7, 8}.
inline std::vector<int> lgreco_bits() {
  return {2, 3, 4, 5, 6, 7, 8};
}
// L-GreCo candidate densities around d: d·{1/4, 1/2, 1, 2, 4} within (0, 1].
inline std::vector<double> lgreco_densities(double d) {
  std::vector<double> out;
  for (double f : {0.25, 0.5, 1.0, 2.0, 4.0})
    if (d * f > 0 && d * f <= 1) out.push_back(d * f);
  return out;
}
// L-GreCo candidate ranks ⌊γ r0⌋ … ⌈β r0⌉ (ALGORITHMS.md §5.1; γ = 0.5, β = 2), at least 1.
inline std::vector<int> lgreco_ranks(int r0, double gamma = 0.5, double beta = 2.0) {
  std::vector<int> out;
  const int lo = std::max(1, static_cast<int>(std::floor(gamma * r0)));
  const int hi = std::max(lo, static_cast<int>(std::ceil(beta * r0)));
  for (int r = lo; r <= hi; ++r) out.push_back(r);
  return out;
}

}  // namespace paco::compress
