#pragma once
// The bits per byte paco_train's LM and pipeline jobs report: the one scorer
// (route/evaluate.hpp) over whole documents with one model.

#include <algorithm>
#include <cstdint>
#include <vector>

#include "paco/nn/gpt.hpp"
#include "paco/route/evaluate.hpp"

namespace paco_train {

// Bits per byte of documents under θ. With a token budget, every k-th document is scored so that
// about `budget` tokens are (the same documents every time); budget 0 scores them all.
inline double score_bpb(const paco::nn::gpt& model, const float* theta,
                        const std::vector<std::vector<std::int32_t>>& docs, std::size_t budget,
                        const paco::route::sliding_window& rule, paco::nn::gpt::workspace& ws) {
  std::size_t total = 0;
  for (auto& d : docs) total += d.size();
  const std::size_t every = budget ? std::max<std::size_t>(1, total / budget) : 1;
  std::vector<paco::route::scored_span> spans;
  for (std::size_t i = 0; i < docs.size(); i += every)
    if (docs[i].size() > 1) spans.push_back({docs[i], 1, docs[i].size()});
  const std::vector<const float*> one{theta};
  return paco::route::routed_nll(model, one, spans, std::vector<int>(spans.size(), 0), rule, ws)
      .bits_per_token();
}

}  // namespace paco_train
