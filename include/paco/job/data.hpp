#pragma once
// A job's documents, tokenized by the byte tokenizer (ids 0–255): the training split, and the
// split its results table scores (dipaco.eval_split), with the shard of a path.
#include <cstdint>
#include <vector>

#include "paco/io/batches.hpp"
#include "paco/io/text_corpus.hpp"
#include "paco/io/tokenizer.hpp"
#include "paco/job/settings.hpp"
#include "paco/train/routing.hpp"

namespace paco::job {

struct job_data {
  // val: the documents of dipaco.eval_split (validation unless the run reports on test).
  std::vector<std::vector<std::int32_t>> train, val;
};

inline result<job_data> load_job_data(const settings& cfg) {
  auto c = load_data(cfg.data);
  if (!c) return c.error();
  io::byte_tokenizer tok;
  job_data j;
  for (auto& doc : c->subset(io::split::train).docs) j.train.push_back(tok.encode(doc.text));
  const auto eval = cfg.dipaco.eval_split == "test" ? io::split::test : io::split::validation;
  for (auto& doc : c->subset(eval).docs) j.val.push_back(tok.encode(doc.text));
  return j;
}

// The shard of `path`: the training documents routed to it (path < 0: every document).
inline io::token_stream stream_of(const job_data& j, const std::vector<int>& route, int path) {
  const train::routed_docs docs{.train = {j.train.begin(), j.train.end()}};
  std::vector<std::vector<int>> sets(j.train.size());
  for (std::size_t i = 0; i < j.train.size(); ++i)
    if (path < 0 || route[i] == path) sets[i] = {0};
  return train::shards_of(docs, sets, 1)[0];
}

}  // namespace paco::job
