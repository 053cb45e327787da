#pragma once
// compression: how the workers of a DiLoCo / DiPaCo run compress their pushes (the trainers'
// `compress = "..."` and `lgreco_every` settings), and the module codecs built from it. Workers
// and stores build their codecs from the same compression and model, so the segment tables
// (one segment per tensor of the module) agree; a payload's header carries their fingerprint.

#include <string>
#include <string_view>
#include <vector>

#include "paco/compress/module_codec.hpp"
#include "paco/path/level_map.hpp"

namespace paco::store {

struct compression {
  compress::compress_spec spec{};  // fp32: the plain float push
  std::size_t lgreco_every = 4;    // F: rounds between L-GreCo adjustments (window A = F)
  double lgreco_alpha = 1.0;       // α: error budget α·Σ e(default level), per module

  std::string name() const { return compress::to_string(spec); }
  compress::module_codec_options options() const {
    compress::module_codec_options o;
    o.lgreco.alpha = lgreco_alpha;
    o.lgreco.period = lgreco_every;
    o.lgreco.window = lgreco_every;
    return o;
  }
};

// Ensures: the compression named by `text` (compress/spec.hpp's forms). Errors: invalid_argument
// naming the accepted forms, or lgreco_every < 1, or alpha <= 0.
inline result<compression> parse_compression(std::string_view text, std::size_t lgreco_every = 4,
                                             double lgreco_alpha = 1.0) {
  auto s = compress::parse_compress_spec(text);
  if (!s) return s.error();
  if (lgreco_every < 1)
    return error(errc::invalid_argument,
                 "lgreco_every = " + std::to_string(lgreco_every) + ", accepted >= 1 (rounds)");
  if (!(lgreco_alpha > 0)) return error(errc::invalid_argument, "lgreco alpha must be > 0");
  return compression{*s, lgreco_every, lgreco_alpha};
}

// Whether a module store (local_store, server) can take this compression's pushes: it
// decodes every push and combines them with its weighted mean. Errors: unsupported for
// powersgd (two summed rounds: use train::round_loop over an all-reduce) and sign_prune (the TIES
// merge is not a mean: use train::round_loop, which all-gathers and TIES-merges).
inline status check_store_compression(const compression& c) {
  using compress::codec_kind;
  if (c.spec.kind == codec_kind::powersgd)
    return {errc::unsupported,
            "compress = \"" + c.name() +
                "\": PowerSGD needs two rounds summed over the workers, "
                "which a module store does not do; run it with the all-reduce DiLoCo "
                "(train::round_loop), or push int8, int4, lgreco:int or topk:D to the store"};
  if (c.spec.kind == codec_kind::sign_prune)
    return {errc::unsupported,
            "compress = \"" + c.name() +
                "\": TIES sign pruning merges by sign election, not by "
                "the store's weighted mean; run it with the all-reduce DiLoCo (train::round_loop), "
                "or push int8, int4, lgreco:int or topk:D to the store"};
  return {};
}

// The segments of a module span: one per tensor of the model inside it (a single vector segment
// for a model that names no tensors). Errors: a tensor straddling the span.
template <class Model>
result<std::vector<compress::segment>> module_segments(const Model& model,
                                                       const path::level_span& span) {
  if constexpr (requires { model.tensors(); }) {
    const auto t = model.tensors();
    return compress::segments_of(t, span.offset, span.size);
  } else {
    return compress::whole_span(span.size);
  }
}

// One codec per span (a worker's: its path's levels; a store's: every module's level span).
// Ensures: out[i].size() == spans[i].size. Errors: module_segments' or module_codec::make's.
template <class Model>
result<std::vector<compress::module_codec>> make_codecs(
    const compression& c, const Model& model, const std::vector<path::level_span>& spans) {
  std::vector<compress::module_codec> out;
  for (auto& sp : spans) {
    auto segs = module_segments(model, sp);
    if (!segs) return segs.error();
    auto codec = compress::module_codec::make(c.spec, std::move(*segs), c.options());
    if (!codec) return codec.error();
    out.push_back(std::move(*codec));
  }
  return result<std::vector<compress::module_codec>>(std::move(out));  // nvcc: no implicit move
}

}  // namespace paco::store
