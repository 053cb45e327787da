#pragma once
// held_out_docs: a corpus split's documents, tokenised, each cut into the part that trains and a
// held-out tail (DiPaCo §2.3–2.4: a document is labelled for the router by how well each path
// predicts text it never trained on). routed() is routed training's view (train/routing.hpp);
// the prefix features come from the whole document.
//
//   auto docs = train::hold_out_tails(corpus.subset(io::split::train), 1024);
//   auto view = docs.routed(features, d);  // train::shards_of(view, sets, paths), …

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "paco/io/corpus.hpp"
#include "paco/io/tokenizer.hpp"
#include "paco/train/routing.hpp"

namespace paco::train {

struct held_out_docs {
  std::vector<std::string> domain;                // per document (for analysis, never routing)
  std::vector<std::vector<std::int32_t>> tokens;  // per document: all its tokens
  std::vector<std::size_t> cut;  // per document: tokens [0, cut) train, [cut, end) are held out

  std::size_t size() const noexcept { return tokens.size(); }
  std::span<const std::int32_t> whole(std::size_t i) const { return tokens[i]; }
  std::span<const std::int32_t> train(std::size_t i) const { return whole(i).first(cut[i]); }
  std::span<const std::int32_t> tail(std::size_t i) const { return whole(i).subspan(cut[i]); }
  // Every document whole (the router's prefix features read these).
  std::vector<std::span<const std::int32_t>> wholes() const {
    return {tokens.begin(), tokens.end()};
  }
  // Held-out tokens in all.
  std::size_t tail_tokens() const {
    std::size_t n = 0;
    for (std::size_t i = 0; i < size(); ++i) n += tail(i).size();
    return n;
  }
  // Routed training's view (spans into this object: it must outlive the view), with the
  // documents' prefix features (row i = document i, `dim` each) when given.
  routed_docs routed(std::span<const float> features = {}, int dim = 0) const {
    routed_docs r;
    for (std::size_t i = 0; i < size(); ++i) {
      r.train.push_back(train(i));
      r.tail.push_back(tail(i));
    }
    r.features = features;
    r.dim = dim;
    return r;
  }
};

// Every document of c tokenised; a document longer than 2·tail tokens holds out its last `tail`,
// a shorter one trains whole (no tail: its label stays its previous path).
// Ensures: cut[i] == size − tail when size > 2·tail, else size; tail 0 keeps every document whole.
inline held_out_docs hold_out_tails(const io::corpus& c, std::size_t tail,
                                    const io::byte_tokenizer& tok = {}) {
  held_out_docs h;
  for (auto& d : c.docs) {
    h.domain.push_back(d.domain);
    h.tokens.push_back(tok.encode(d.text));
    const std::size_t n = h.tokens.back().size();
    h.cut.push_back(n > 2 * tail ? n - tail : n);
  }
  return h;
}

}  // namespace paco::train
