#pragma once
// token_stream + batch_sampler: documents concatenated into one token stream (documents
// separated by a newline), sampled as B random windows of T+1 tokens: inputs x = w[0:T],
// targets y = w[1:T+1]. Seeded, so a given (seed, step) always yields the same batch.

#include <cstdint>
#include <utility>
#include <vector>

#include "paco/core/error.hpp"
#include "paco/core/rng.hpp"
#include "paco/io/corpus.hpp"
#include "paco/io/tokenizer.hpp"

namespace paco::io {

struct token_stream {
  std::vector<std::int32_t> ids;
  std::vector<std::size_t> doc_start;  // start of each document in ids

  static token_stream from(const corpus& c) {
    token_stream s;
    byte_tokenizer tok;
    for (auto& d : c.docs) {
      s.doc_start.push_back(s.ids.size());
      auto ids = tok.encode(d.text);
      s.ids.insert(s.ids.end(), ids.begin(), ids.end());
      if (d.text.empty() || d.text.back() != '\n') s.ids.push_back('\n');
    }
    return s;
  }
};

// Token sequences dealt round-robin to k shards in the order of a Fisher–Yates shuffle seeded
// with `seed`, each appended as it is (no separator), and `all`: every sequence in that order.
// The random shards of a comparison whose rows train on the same split. Requires: k ≥ 1.
struct dealt_shards {
  std::vector<token_stream> shards;
  token_stream all;
};
inline dealt_shards deal_random_shards(const std::vector<std::vector<std::int32_t>>& docs, int k,
                                       std::uint64_t seed) {
  std::vector<std::size_t> perm(docs.size());
  for (std::size_t i = 0; i < perm.size(); ++i) perm[i] = i;
  rng shuffle(seed);
  for (std::size_t i = perm.size(); i > 1; --i) std::swap(perm[i - 1], perm[shuffle.below(i)]);
  dealt_shards d{std::vector<token_stream>(std::size_t(k)), {}};
  auto append = [](token_stream& s, const std::vector<std::int32_t>& doc) {
    s.doc_start.push_back(s.ids.size());
    s.ids.insert(s.ids.end(), doc.begin(), doc.end());
  };
  for (std::size_t i = 0; i < perm.size(); ++i) {
    append(d.shards[i % std::size_t(k)], docs[perm[i]]);
    append(d.all, docs[perm[i]]);
  }
  return d;
}

class batch_sampler {
 public:
  // Requires: stream has more than T tokens (checked: throws error_exception otherwise).
  batch_sampler(const token_stream& s, int B, int T, std::uint64_t seed)
      : s_(&s), B_(B), T_(T), rng_(seed) {
    if (B < 1 || T < 1)
      throw error_exception({errc::invalid_argument, "batch_sampler: B and T must be ≥ 1"});
    check(s);
  }

  // Samples from s from now on, continuing the same random stream (a worker whose shard changes
  // does not replay its first batches). Requires: as the constructor (checked: throws).
  void rebind(const token_stream& s) {
    check(s);
    s_ = &s;
  }

  // Where the random stream stands: a sampler given it (seek) draws the same batches from then
  // on as this one (a checkpoint's resume point).
  rng::state_type position() const noexcept { return rng_.state(); }
  void seek(const rng::state_type& p) noexcept { rng_.set_state(p); }

  // Fills x, y (B,T) with the next batch.
  void next(std::int32_t* x, std::int32_t* y) {
    const std::size_t span = s_->ids.size() - std::size_t(T_);
    for (int b = 0; b < B_; ++b) {
      const std::size_t o = rng_.below(span);
      for (int t = 0; t < T_; ++t) {
        x[std::size_t(b) * T_ + t] = s_->ids[o + t];
        y[std::size_t(b) * T_ + t] = s_->ids[o + t + 1];
      }
    }
  }

 private:
  void check(const token_stream& s) const {
    if (s.ids.size() <= std::size_t(T_))
      throw error_exception({errc::invalid_argument,
                             "batch_sampler: stream of " + std::to_string(s.ids.size()) +
                                 " tokens is too short for windows of " + std::to_string(T_ + 1)});
  }
  const token_stream* s_;
  int B_, T_;
  rng rng_;
};

}  // namespace paco::io
