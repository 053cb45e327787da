#pragma once
// Documents as the one scorer (route/evaluate.hpp) reads them after a routing prefix:
// after_prefix picks the spans of token sequences one already holds (each document longer than
// prefix + 1 tokens, scored after its first `prefix`: the bytes a router reads); scored_docs
// tokenizes a corpus and owns the tokens its spans point into (move-only, so they stay valid).
//
//   auto val = route::scored_docs::of(brown.subset(io::split::validation), 32);
//   route::routed_nll(model, thetas, val.spans, routes, rule, ws).bits_per_token();

#include <algorithm>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "paco/io/corpus.hpp"
#include "paco/io/tokenizer.hpp"
#include "paco/route/evaluate.hpp"

namespace paco::route {

struct prefixed_spans {
  std::vector<scored_span> spans;  // targets seq[prefix … end) of each kept document
  std::vector<std::size_t> doc;    // the document of each span
};

// The documents longer than prefix + 1 tokens, each scored after its first `prefix` tokens (with
// prefix 0, from its second: the first token is no target).
// Ensures: spans[j] == {docs[doc[j]], max(prefix, 1), docs[doc[j]].size()}, doc ascending.
inline prefixed_spans after_prefix(const std::vector<std::span<const std::int32_t>>& docs,
                                   std::size_t prefix) {
  prefixed_spans r;
  for (std::size_t i = 0; i < docs.size(); ++i)
    if (docs[i].size() > prefix + 1) {
      r.spans.push_back({docs[i], std::max<std::size_t>(prefix, 1), docs[i].size()});
      r.doc.push_back(i);
    }
  return r;
}

struct scored_docs {
  std::vector<std::vector<std::int32_t>> tokens;  // one per scored document
  std::vector<std::string> domains;               // each document's domain (analysis only)
  std::vector<scored_span> spans;                 // targets [max(prefix, 1), size) of each

  scored_docs() = default;
  scored_docs(scored_docs&&) = default;
  scored_docs& operator=(scored_docs&&) = default;

  // Ensures: every document of c that after_prefix keeps, in corpus order, with its span.
  static scored_docs of(const io::corpus& c, std::size_t prefix = 0) {
    io::byte_tokenizer tok;
    std::vector<std::vector<std::int32_t>> all;
    for (auto& d : c.docs) all.push_back(tok.encode(d.text));
    auto kept = after_prefix({all.begin(), all.end()}, prefix);
    scored_docs s;
    for (auto i : kept.doc) {
      s.tokens.push_back(std::move(all[i]));  // moves the buffer the span points into
      s.domains.push_back(c.docs[i].domain);
    }
    s.spans = std::move(kept.spans);
    return s;
  }

  std::size_t size() const noexcept { return spans.size(); }
  // Every document's whole token sequence (e.g. for route::prefix_features).
  std::vector<std::span<const std::int32_t>> sequences() const {
    return {tokens.begin(), tokens.end()};
  }
};

}  // namespace paco::route
