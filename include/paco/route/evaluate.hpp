#pragma once
// Scoring text with a model, and routed evaluation (DiPaCo §2.4, §7.3).
//   sequence_nll: nats of predicting tokens [begin, end) of a sequence, in windows of ctx tokens
//     (each window sees only its own past: the same for every model compared);
//   routed scoring: a document is routed by its prefix and the chosen path scores the rest;
//   re-routing every W tokens: the path chosen from chunk i scores chunk i+1, chosen by a router
//     on chunk i (rerouted_nll) or by which path predicted chunk i best (likelihood_rerouted_nll).

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "paco/nn/gpt.hpp"

namespace paco::route {

struct nll {
  double nats = 0;
  std::size_t tokens = 0;
  nll& operator+=(const nll& o) {
    nats += o.nats;
    tokens += o.tokens;
    return *this;
  }
  double bits_per_token() const { return tokens ? nats / tokens / 0.6931471805599453 : NAN; }
};

// −log softmax(row)[y] for one row of V logits, accumulated in double.
inline double row_nll(const float* row, int V, std::int32_t y) {
  float m = row[0];
  for (int v = 1; v < V; ++v) m = std::max(m, row[v]);
  double z = 0;
  for (int v = 0; v < V; ++v) z += std::exp(double(row[v] - m));
  return double(m) + std::log(z) - double(row[y]);
}

// A piece of text to score: targets seq[begin … end) (as sequence_nll).
struct scored_span {
  std::span<const std::int32_t> seq;
  std::size_t begin = 1, end = 1;
};

// Nats of many spans with one model, batching their windows B at a time (each span scored as
// sequence_nll does: windows of T tokens from begin−1, each seeing only its own past).
inline nll batched_nll(const nn::gpt& model, const float* theta,
                       const std::vector<scored_span>& spans, nn::gpt::workspace& ws) {
  const int B = ws.d.B, T = ws.d.T, V = model.config().vocab;
  struct window {
    const scored_span* sp;
    std::size_t s, cnt;
  };
  std::vector<window> all;
  for (auto& sp : spans)
    for (std::size_t s = sp.begin - 1; s + 1 < sp.end; s += std::size_t(T))
      all.push_back({&sp, s, std::min<std::size_t>(std::size_t(T), sp.end - (s + 1))});
  std::vector<std::int32_t> x(std::size_t(B) * T), y(x.size());
  nll r;
  for (std::size_t w0 = 0; w0 < all.size(); w0 += std::size_t(B)) {
    const std::size_t nb = std::min<std::size_t>(std::size_t(B), all.size() - w0);
    for (std::size_t b = 0; b < std::size_t(B); ++b) {
      const window& w = all[std::min(w0 + b, all.size() - 1)];
      for (int t = 0; t < T; ++t) {
        const std::size_t i = w.s + std::size_t(t);
        x[b * T + t] = i + 1 < w.sp->seq.size() ? w.sp->seq[i] : 0;
        y[b * T + t] = i + 1 < w.sp->seq.size() ? w.sp->seq[i + 1] : 0;
      }
    }
    model.forward(theta, x.data(), ws);
    for (std::size_t b = 0; b < nb; ++b)
      for (std::size_t t = 0; t < all[w0 + b].cnt; ++t) {
        r.nats += row_nll(ws.logits.data() + (b * T + t) * std::size_t(V), V, y[b * T + t]);
        ++r.tokens;
      }
  }
  return r;
}

// Nats of predicting seq[begin … end) from its past, window by window (a window of T tokens
// starts at begin−1 and scores up to T targets). Requires: 1 ≤ begin ≤ end ≤ seq.size(); ws made
// for dims {B, T} (any B).
inline nll sequence_nll(const nn::gpt& model, const float* theta,
                        std::span<const std::int32_t> seq, std::size_t begin, std::size_t end,
                        nn::gpt::workspace& ws) {
  return batched_nll(model, theta, {scored_span{seq, begin, end}}, ws);
}

// Nats of seq[b … e) predicted with the most context a window allows: the window of T tokens
// that ends at e (so up to T − (e − b) tokens before b are context).
// Requires: 1 ≤ b ≤ e ≤ seq.size(), e − b ≤ T; ws made for dims {1, T}.
inline nll chunk_nll(const nn::gpt& model, const float* theta, std::span<const std::int32_t> seq,
                     std::size_t b, std::size_t e, nn::gpt::workspace& ws) {
  const std::size_t T = std::size_t(ws.d.T);
  const int V = model.config().vocab;
  const std::size_t s = e > T + 1 ? e - 1 - T : 0;  // window x = seq[s, s+T), targets s+1 …
  std::vector<std::int32_t> x(T), y(T);
  for (std::size_t t = 0; t < T; ++t) {
    const std::size_t i = s + t;
    x[t] = i + 1 < seq.size() ? seq[i] : 0;
    y[t] = i + 1 < seq.size() ? seq[i + 1] : 0;
  }
  model.forward(theta, x.data(), ws);
  nll r;
  for (std::size_t t = b - s - 1; t + s + 1 < e; ++t) {
    r.nats += row_nll(ws.logits.data() + t * std::size_t(V), V, y[t]);
    ++r.tokens;
  }
  return r;
}

// Frequent re-routing at test time: seq[begin … end) is cut into chunks of W tokens; chunk 0 is
// scored by route(seq[0 … begin)) (the prefix), chunk i+1 by route(chunk i).
// score(path, b, e) scores seq[b … e) with that path (e.g. chunk_nll with its θ).
inline nll rerouted_nll(std::span<const std::int32_t> seq, std::size_t begin, std::size_t end,
                        std::size_t W,
                        const std::function<int(std::span<const std::int32_t>)>& route,
                        const std::function<nll(int, std::size_t, std::size_t)>& score) {
  nll r;
  int path = route(seq.subspan(0, begin));
  for (std::size_t b = begin; b < end; b += W) {
    const std::size_t e = std::min(end, b + W);
    r += score(path, b, e);
    path = route(seq.subspan(b, e - b));
  }
  return r;
}

// Re-routing by likelihood every W tokens (DiPaCo Table 3's frequent re-routing, with the
// paths themselves as the router): every path scores chunk i, which is all known when chunk
// i+1 is predicted, and the path that predicted it best scores chunk i+1; chunk 0 goes to the
// path that best predicts the prefix seq[1 … begin). The scores of a chunk serve both its
// scoring and its routing.
// Requires: thetas non-empty (one parameter vector per path); 2 <= begin <= end <= seq.size();
//   1 <= W; W and begin − 1 <= ws.d.T; ws made for dims {1, T}.
// Ensures: the nats of seq[begin … end), each chunk scored by its chosen path.
// Cost: thetas.size() forward passes of T tokens per chunk.
inline nll likelihood_rerouted_nll(const nn::gpt& model, std::span<const float* const> thetas,
                                   std::span<const std::int32_t> seq, std::size_t begin,
                                   std::size_t end, std::size_t W, nn::gpt::workspace& ws) {
  std::vector<nll> per(thetas.size());
  std::size_t per_b = 0, per_e = 0;  // the span `per` holds the scores of
  auto score_all = [&](std::size_t b, std::size_t e) {
    if (b == per_b && e == per_e) return;
    for (std::size_t p = 0; p < thetas.size(); ++p)
      per[p] = chunk_nll(model, thetas[p], seq, b, e, ws);
    per_b = b, per_e = e;
  };
  return rerouted_nll(
      seq, begin, end, W,
      [&](std::span<const std::int32_t> chunk) {
        const std::size_t b = std::size_t(chunk.data() - seq.data());
        score_all(std::max<std::size_t>(b, 1), b + chunk.size());
        return int(std::min_element(per.begin(), per.end(),
                                    [](const nll& x, const nll& y) { return x.nats < y.nats; }) -
                   per.begin());
      },
      [&](int p, std::size_t b, std::size_t e) {
        score_all(b, e);
        return per[std::size_t(p)];
      });
}

}  // namespace paco::route
