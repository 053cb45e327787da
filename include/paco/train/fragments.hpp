#pragma once
// fragments: the parts of a parameter plane that Streaming DiLoCo syncs together (Douillard et
// al. 2025; ALGORITHMS.md §6.1). A fragment is a list of disjoint spans of the plane; the
// fragments of a replica cover every tensor of the layout once.
//
//   auto f = train::gpt_fragments(model.layout(), layers, 2, train::fragment_order::strided);
//   // f[0]: embed, ln_f, head;  f[1]: block.0, block.2;  f[2]: block.1, block.3
//
// Strided fragments (block b → fragment 1 + b mod P) are the paper's default: slightly better
// loss, and the early layers are never synced together; sequential ones take consecutive blocks.
// Every tensor outside the blocks is fragment 0 (as in MaxText), so the embedding is synced on
// its own schedule.

#include <algorithm>
#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "paco/compress/module_codec.hpp"
#include "paco/core/error.hpp"
#include "paco/core/param_layout.hpp"
#include "paco/path/level_map.hpp"
#include "paco/store/compression.hpp"

namespace paco::train {

struct fragment {
  std::vector<path::level_span> spans;  // ascending, disjoint; entries name the tensors
  std::size_t size() const noexcept {
    std::size_t n = 0;
    for (auto& s : spans) n += s.size;
    return n;
  }
};

// Fragments from a rule naming each layout entry's fragment (0 … count−1). Consecutive entries
// of one fragment share a span (with the alignment padding between them). Errors:
// invalid_argument for count < 1, an index out of range, or a fragment that gets no tensor.
inline result<std::vector<fragment>> fragments_by(
    const param_layout& layout, int count,
    const std::function<int(const std::string&)>& fragment_of) {
  if (count < 1) return error(errc::invalid_argument, "fragments: need at least one fragment");
  std::vector<fragment> out(std::size_t(count), fragment{});
  int prev = -1;
  for (std::size_t i = 0; i < layout.count(); ++i) {
    const auto& e = layout.entry(i);
    const int f = fragment_of(e.name);
    if (f < 0 || f >= count)
      return error(errc::invalid_argument, "fragments: tensor '" + e.name +
                                               "' is put in fragment " + std::to_string(f) +
                                               " of " + std::to_string(count));
    auto& spans = out[std::size_t(f)].spans;
    if (f == prev && !spans.empty()) {
      spans.back().size = e.offset + e.size - spans.back().offset;
      spans.back().entries.push_back(e.name);
    } else {
      spans.push_back({e.offset, e.size, {e.name}});
    }
    prev = f;
  }
  for (int f = 0; f < count; ++f)
    if (out[std::size_t(f)].spans.empty())
      return error(errc::invalid_argument,
                   "fragments: fragment " + std::to_string(f) + " holds no tensor");
  return out;
}

enum class fragment_order { strided, sequential };

// "strided" | "sequential". Errors: invalid_argument naming the accepted values.
inline result<fragment_order> parse_fragment_order(const std::string& s) {
  if (s == "strided") return fragment_order::strided;
  if (s == "sequential") return fragment_order::sequential;
  return error(errc::invalid_argument,
               "fragment order: '" + s + "' is not one of strided, sequential");
}

// The fragments of a GPT-style layout (embed, block.0 … block.{n−1}, ln_f[, head]): fragment 0
// holds every tensor outside the blocks; the blocks go to fragments 1 … block_fragments.
// Errors: invalid_argument unless 1 ≤ block_fragments ≤ blocks.
inline result<std::vector<fragment>> gpt_fragments(const param_layout& layout, int blocks,
                                                   int block_fragments, fragment_order order) {
  if (block_fragments < 1 || block_fragments > blocks)
    return error(errc::invalid_argument, "fragments: cannot put " + std::to_string(blocks) +
                                             " blocks in " + std::to_string(block_fragments) +
                                             " fragments");
  return fragments_by(layout, block_fragments + 1, [&](const std::string& name) {
    if (name.rfind("block.", 0) != 0) return 0;
    const int b = std::stoi(name.substr(6));
    return 1 +
           (order == fragment_order::strided ? b % block_fragments : b * block_fragments / blocks);
  });
}

// The whole parameter plane of a layout as one fragment, padding included (rules with P = 1).
inline std::vector<fragment> whole_plane(const param_layout& layout) {
  fragment f;
  f.spans.push_back({0, layout.total(), {}});
  return {f};
}

// Checks that fragments cover every tensor of the layout exactly once and lie within its plane.
// Errors: invalid_argument naming a tensor in no fragment or in two, or a span past the plane.
inline status check_fragments(const param_layout& layout, const std::vector<fragment>& frags) {
  if (frags.empty()) return {errc::invalid_argument, "fragments: none given"};
  for (std::size_t f = 0; f < frags.size(); ++f)
    for (auto& s : frags[f].spans)
      if (s.offset + s.size > layout.total())
        return {errc::invalid_argument,
                "fragments: fragment " + std::to_string(f) + " spans [" + std::to_string(s.offset) +
                    ", " + std::to_string(s.offset + s.size) + "), past the plane of " +
                    std::to_string(layout.total()) + " elements"};
  for (std::size_t i = 0; i < layout.count(); ++i) {
    const auto& e = layout.entry(i);
    int owners = 0;
    for (auto& f : frags)
      for (auto& s : f.spans)
        if (e.offset >= s.offset && e.offset + e.size <= s.offset + s.size) ++owners;
    if (owners != 1)
      return {errc::invalid_argument, "fragments: tensor '" + e.name + "' is in " +
                                          std::to_string(owners) + " fragments, not one"};
  }
  return {};
}

// One codec per fragment for compressed syncs: the fragment's spans laid end to end, one
// segment per tensor. Errors: make_codecs'.
template <class Model>
result<std::vector<compress::module_codec>> fragment_codecs(const store::compression& c,
                                                            const Model& model,
                                                            const std::vector<fragment>& frags) {
  std::vector<compress::module_codec> out;
  for (auto& f : frags) {
    std::vector<compress::segment> segs;
    std::size_t at = 0;
    for (auto& sp : f.spans) {
      auto s = store::module_segments(model, sp);
      if (!s) return s.error();
      for (auto seg : *s) {
        seg.offset += at;
        segs.push_back(seg);
      }
      at += sp.size;
    }
    auto codec = compress::module_codec::make(c.spec, std::move(segs), c.options());
    if (!codec) return codec.error();
    out.push_back(std::move(*codec));
  }
  return result<std::vector<compress::module_codec>>(std::move(out));  // nvcc: no implicit move
}

}  // namespace paco::train
