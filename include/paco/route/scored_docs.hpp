#pragma once
// scored_docs: a corpus's documents as byte tokens, with the spans the one scorer
// (route/evaluate.hpp) reads: each document longer than prefix + 1 bytes, scored after its first
// `prefix` bytes (the bytes a router reads; 0: from the second byte). Owns the tokens the spans
// point into (move-only, so the spans stay valid).
//
//   auto val = route::scored_docs::of(brown.subset(io::split::validation), 32);
//   route::routed_nll(model, thetas, val.spans, routes, rule, ws).bits_per_token();

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "paco/io/corpus.hpp"
#include "paco/io/tokenizer.hpp"
#include "paco/route/evaluate.hpp"

namespace paco::route {

struct scored_docs {
  std::vector<std::vector<std::int32_t>> tokens;  // one per scored document
  std::vector<std::string> domains;               // each document's domain (analysis only)
  std::vector<scored_span> spans;                 // targets [max(prefix, 1), size) of each

  scored_docs() = default;
  scored_docs(scored_docs&&) = default;
  scored_docs& operator=(scored_docs&&) = default;

  // Ensures: every document of c with more than prefix + 1 bytes, in corpus order.
  static scored_docs of(const io::corpus& c, std::size_t prefix = 0) {
    scored_docs s;
    io::byte_tokenizer tok;
    for (auto& d : c.docs)
      if (d.text.size() > prefix + 1) {
        s.tokens.push_back(tok.encode(d.text));
        s.domains.push_back(d.domain);
      }
    for (auto& t : s.tokens) s.spans.push_back({t, std::max<std::size_t>(prefix, 1), t.size()});
    return s;
  }

  std::size_t size() const noexcept { return spans.size(); }
  // Every document's whole token sequence (e.g. for route::prefix_features).
  std::vector<std::span<const std::int32_t>> sequences() const {
    return {tokens.begin(), tokens.end()};
  }
};

}  // namespace paco::route
