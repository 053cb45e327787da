#pragma once
// Scoring text with a model, and routed evaluation (DiPaCo §2.4, §7.3) — the one scorer behind
// every bits-per-byte figure paco prints.
//
// The context rule (sliding_window): windows of T tokens (the model's context) start at 0, S, 2S,
// …; window 0 scores its T targets, window k ≥ 1 only its last S. Every target is scored exactly
// once, and every target after the first T of a document sees at least T − S + 1 tokens of
// context. The windows are laid out from the document's start, whatever is scored: so which
// tokens are scored, and by which path, never changes how much context a token gets.
//
// Every evaluation below is token_nats (per-target nats under one θ) plus a choice of which
// path's θ scores each token:
//   routed_nll               each document scored by one path (routed by its prefix);
//   rerouted_nll             chunks of W tokens, the path of chunk i+1 chosen by a router on
//                            chunk i (chunk 0 by the prefix);
//   likelihood_rerouted_nll  the same, chosen by which path predicted chunk i best;
//   per_path_nll / best_paths  every path's nats of each span (likelihood routing, the oracle);
//   every_path_nats          every path's per-target nats, from which routed (by path:
//                            routed_nll_by_path) and likelihood re-routed figures are summed
//                            without scoring again.
// With one path every entry point returns the same nats.

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "paco/core/error.hpp"
#include "paco/nn/concepts.hpp"

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

// The parameters of every path as the entry points below take them: out[p] = thetas[p].data().
inline std::vector<const float*> theta_pointers(const std::vector<std::vector<float>>& thetas) {
  std::vector<const float*> p;
  for (auto& t : thetas) p.push_back(t.data());
  return p;
}

// −log softmax(row)[y] for one row of V logits, accumulated in double.
inline double row_nll(const float* row, int V, std::int32_t y) {
  float m = row[0];
  for (int v = 1; v < V; ++v) m = std::max(m, row[v]);
  double z = 0;
  for (int v = 0; v < V; ++v) z += std::exp(double(row[v] - m));
  return double(m) + std::log(z) - double(row[y]);
}

// The context rule: windows of T tokens with stride S (see the top of this file). Target i is
// the prediction of seq[i] from seq[0 … i).
struct sliding_window {
  int T = 128;  // window length: the model's context
  int S = 64;   // stride; every target after the first T sees ≥ T − S + 1 tokens of context

  // The rule for a model of context T: stride S, or T/2 when S is 0. Errors: invalid_argument
  // unless 1 ≤ S ≤ T.
  static result<sliding_window> make(int T, int S = 0) {
    if (S == 0) S = std::max(1, T / 2);
    if (T < 1 || S < 1 || S > T)
      return error(errc::invalid_argument, "scorer: the stride must be in [1, T = " +
                                               std::to_string(T) + "], got " + std::to_string(S));
    return sliding_window{T, S};
  }
  // The window that scores target i ≥ 1.
  std::size_t window_of(std::size_t i) const {
    const std::size_t t = std::size_t(T), s = std::size_t(S);
    return i <= t ? 0 : (i - t + s - 1) / s;
  }
  // Window k reads seq[start(k) … start(k) + T) and scores targets [first_target(k), start(k) + T].
  std::size_t start(std::size_t k) const { return k * std::size_t(S); }
  std::size_t first_target(std::size_t k) const {
    return k == 0 ? 1 : start(k) + std::size_t(T - S) + 1;
  }
  // The rule's name, as the JSON rows carry it.
  std::string name() const {
    return "sliding_window(T=" + std::to_string(T) + ",S=" + std::to_string(S) + ")";
  }
};

// A piece of text to score: targets seq[begin … end).
struct scored_span {
  std::span<const std::int32_t> seq;
  std::size_t begin = 1, end = 1;
};

// How far a scoring pass is: called on the calling thread with the batches scored so far (by
// every thread) and the pass's batches in all, after each batch it scored and once at the end.
using scoring_progress = std::function<void(std::size_t done, std::size_t total)>;

// Per-target nats of every span under θ: out[j][i − begin] for target i of span j, by the rule,
// windows batched ws.d.B at a time; with several workspaces, wss.size() threads score disjoint
// batches (each window scores its own targets, so the figures do not depend on the threads).
// progress (optional): see scoring_progress.
// Requires: 1 ≤ begin ≤ end ≤ seq.size() for every span; every workspace made for dims
// {B, rule.T} with one B; with more than one workspace the caller runs the GEMM backend
// single-threaded (nn::gemm_threads(1)).
// Cost: one forward pass of (B, T) per B windows that hold a scored target.
template <nn::LanguageModel M>
std::vector<std::vector<double>> token_nats(const M& model, const float* theta,
                                            const std::vector<scored_span>& spans,
                                            const sliding_window& rule,
                                            std::span<typename M::workspace> wss,
                                            const scoring_progress& progress = {}) {
  PACO_ASSERT(!wss.empty() && wss[0].d.T == rule.T, "the workspaces' T is the rule's");
  const int B = wss[0].d.B, T = wss[0].d.T, V = model.vocab();
  struct window {
    std::size_t span, k, lo, hi;  // scores targets [lo, hi) of span `span`
  };
  std::vector<window> all;
  std::vector<std::vector<double>> out(spans.size());
  for (std::size_t j = 0; j < spans.size(); ++j) {
    const auto& sp = spans[j];
    PACO_ASSERT(1 <= sp.begin && sp.begin <= sp.end && sp.end <= sp.seq.size(), "span in range");
    out[j].assign(sp.end - sp.begin, 0.0);
    if (sp.begin == sp.end) continue;
    for (std::size_t k = rule.window_of(sp.begin); k <= rule.window_of(sp.end - 1); ++k)
      all.push_back({j, k, std::max(sp.begin, rule.first_target(k)),
                     std::min(sp.end, rule.start(k) + std::size_t(T) + 1)});
  }
  const std::size_t batches = (all.size() + std::size_t(B) - 1) / std::size_t(B);
  std::atomic<std::size_t> scored{0};
  // Thread t scores batches t, t + n, t + 2n, …
  auto score = [&](std::size_t t, typename M::workspace& ws) {
    PACO_ASSERT(ws.d.B == B && ws.d.T == T, "every workspace of one shape");
    std::vector<std::int32_t> x(std::size_t(B) * T);
    for (std::size_t bi = t; bi < batches; bi += wss.size()) {
      const std::size_t w0 = bi * std::size_t(B);
      const std::size_t nb = std::min<std::size_t>(std::size_t(B), all.size() - w0);
      for (std::size_t b = 0; b < std::size_t(B); ++b) {
        const window& w = all[w0 + std::min(b, nb - 1)];
        const auto& seq = spans[w.span].seq;
        for (int t2 = 0; t2 < T; ++t2) {
          const std::size_t i = rule.start(w.k) + std::size_t(t2);
          x[b * T + t2] = i < seq.size() ? seq[i] : 0;
        }
      }
      model.forward(theta, x.data(), ws);
      for (std::size_t b = 0; b < nb; ++b) {
        const window& w = all[w0 + b];
        const auto& sp = spans[w.span];
        for (std::size_t i = w.lo; i < w.hi; ++i) {
          const std::size_t r = i - 1 - rule.start(w.k);  // the logits row that predicts seq[i]
          out[w.span][i - sp.begin] =
              row_nll(model.logits(ws) + (b * std::size_t(T) + r) * std::size_t(V), V, sp.seq[i]);
        }
      }
      const std::size_t done = scored.fetch_add(1) + 1;
      if (t == 0 && progress) progress(done, batches);
    }
  };
  std::vector<std::thread> pool;
  for (std::size_t t = 1; t < wss.size(); ++t) pool.emplace_back(score, t, std::ref(wss[t]));
  score(0, wss[0]);
  for (auto& th : pool) th.join();
  if (progress) progress(batches, batches);
  return out;
}

// The same with one workspace, on the calling thread.
template <nn::LanguageModel M>
std::vector<std::vector<double>> token_nats(const M& model, const float* theta,
                                            const std::vector<scored_span>& spans,
                                            const sliding_window& rule, typename M::workspace& ws) {
  return token_nats(model, theta, spans, rule, std::span<typename M::workspace>(&ws, 1));
}

// The nats of targets [from, to) of a span scored by token_nats (positions relative to begin).
inline nll sum_nats(const std::vector<double>& v, std::size_t from, std::size_t to) {
  nll r;
  for (std::size_t i = from; i < to; ++i) r.nats += v[i];
  r.tokens = to - from;
  return r;
}

// Nats of seq[begin … end) by one θ (sequence scoring under the rule).
template <nn::LanguageModel M>
nll sequence_nll(const M& model, const float* theta, std::span<const std::int32_t> seq,
                 std::size_t begin, std::size_t end, const sliding_window& rule,
                 typename M::workspace& ws) {
  auto v = token_nats(model, theta, {scored_span{seq, begin, end}}, rule, ws);
  return sum_nats(v[0], 0, v[0].size());
}

// Every path's nats of every span: out[j][p] for span j scored by thetas[p].
// Cost: thetas.size() × token_nats of the spans.
template <nn::LanguageModel M>
std::vector<std::vector<nll>> per_path_nll(const M& model, std::span<const float* const> thetas,
                                           const std::vector<scored_span>& spans,
                                           const sliding_window& rule, typename M::workspace& ws) {
  std::vector<std::vector<nll>> out(spans.size(), std::vector<nll>(thetas.size()));
  for (std::size_t p = 0; p < thetas.size(); ++p) {
    auto v = token_nats(model, thetas[p], spans, rule, ws);
    for (std::size_t j = 0; j < spans.size(); ++j) out[j][p] = sum_nats(v[j], 0, v[j].size());
  }
  return out;
}

// The path with the fewest nats for each row of per_path_nll (the first of equals).
inline std::vector<int> best_paths(const std::vector<std::vector<nll>>& per) {
  std::vector<int> r(per.size(), 0);
  for (std::size_t j = 0; j < per.size(); ++j)
    for (std::size_t p = 1; p < per[j].size(); ++p)
      if (per[j][p].nats < per[j][std::size_t(r[j])].nats) r[j] = int(p);
  return r;
}

// Nats of spans where spans_of[p] are scored by thetas[p] (any assignment of tokens to paths).
template <nn::LanguageModel M>
nll assigned_nll(const M& model, std::span<const float* const> thetas,
                 const std::vector<std::vector<scored_span>>& spans_of, const sliding_window& rule,
                 typename M::workspace& ws) {
  nll r;
  for (std::size_t p = 0; p < spans_of.size(); ++p) {
    if (spans_of[p].empty()) continue;
    auto v = token_nats(model, thetas[p], spans_of[p], rule, ws);
    for (auto& t : v) r += sum_nats(t, 0, t.size());
  }
  return r;
}

// Routed scoring: span j is scored by path route[j].
// Requires: route.size() == spans.size(), each route[j] in [0, thetas.size()).
template <nn::LanguageModel M>
nll routed_nll(const M& model, std::span<const float* const> thetas,
               const std::vector<scored_span>& spans, const std::vector<int>& route,
               const sliding_window& rule, typename M::workspace& ws) {
  std::vector<std::vector<scored_span>> of(thetas.size());
  for (std::size_t j = 0; j < spans.size(); ++j) of[std::size_t(route[j])].push_back(spans[j]);
  return assigned_nll(model, thetas, of, rule, ws);
}

// Bits per byte (byte tokens) of whole documents under one θ, each scored from its second token.
// With a token budget every k-th document is scored so that about `budget` tokens are (the same
// documents every time); budget 0 scores them all. The one scorer of a single model's results
// (an LM job, a pipeline job's gathered model).
template <nn::LanguageModel M>
double score_bpb(const M& model, const float* theta,
                 const std::vector<std::vector<std::int32_t>>& docs, std::size_t budget,
                 const sliding_window& rule, typename M::workspace& ws) {
  std::size_t total = 0;
  for (auto& d : docs) total += d.size();
  const std::size_t every = budget ? std::max<std::size_t>(1, total / budget) : 1;
  std::vector<scored_span> spans;
  for (std::size_t i = 0; i < docs.size(); i += every)
    if (docs[i].size() > 1) spans.push_back({docs[i], 1, docs[i].size()});
  const std::vector<const float*> one{theta};
  return routed_nll(model, one, spans, std::vector<int>(spans.size(), 0), rule, ws)
      .bits_per_token();
}

// The chunks of a span for re-routing every W tokens: [begin, begin + W), … up to end.
inline std::vector<std::pair<std::size_t, std::size_t>> chunks_of(const scored_span& sp,
                                                                  std::size_t W) {
  std::vector<std::pair<std::size_t, std::size_t>> c;
  for (std::size_t b = sp.begin; b < sp.end; b += W) c.emplace_back(b, std::min(sp.end, b + W));
  return c;
}

// Frequent re-routing by a router: span j is cut into chunks of W tokens; chunk 0 is scored by
// route(j, seq[0 … begin)) (the prefix), chunk i+1 by route(j, chunk i's tokens).
// Requires: W ≥ 1; route returns a path in [0, thetas.size()).
template <nn::LanguageModel M>
nll rerouted_nll(const M& model, std::span<const float* const> thetas,
                 const std::vector<scored_span>& spans, std::size_t W,
                 const std::function<int(std::size_t, std::span<const std::int32_t>)>& route,
                 const sliding_window& rule, typename M::workspace& ws) {
  std::vector<std::vector<scored_span>> of(thetas.size());
  for (std::size_t j = 0; j < spans.size(); ++j) {
    const auto& sp = spans[j];
    int path = route(j, sp.seq.subspan(0, sp.begin));
    for (auto [b, e] : chunks_of(sp, W)) {
      of[std::size_t(path)].push_back({sp.seq, b, e});
      path = route(j, sp.seq.subspan(b, e - b));
    }
  }
  return assigned_nll(model, thetas, of, rule, ws);
}

// Every path's per-target nats of every span: out[p][j][i − begin] (token_nats under each θ,
// on wss.size() threads). Cost: thetas.size() × token_nats of the spans.
using path_nats = std::vector<std::vector<std::vector<double>>>;
// progress (optional): batches of every path's pass, (p · n + done, paths · n).
template <nn::LanguageModel M>
path_nats every_path_nats(const M& model, std::span<const float* const> thetas,
                          const std::vector<scored_span>& spans, const sliding_window& rule,
                          std::span<typename M::workspace> wss,
                          const scoring_progress& progress = {}) {
  path_nats v;
  for (std::size_t p = 0; p < thetas.size(); ++p) {
    scoring_progress of_path;
    if (progress)
      of_path = [&](std::size_t done, std::size_t n) { progress(p * n + done, thetas.size() * n); };
    v.push_back(token_nats(model, thetas[p], spans, rule, wss, of_path));
  }
  return v;
}

// The spans' targets from 1: what likelihood re-routing needs every path to score (the prefix
// seq[1 … begin) picks the first chunk's path).
inline std::vector<scored_span> from_first_target(const std::vector<scored_span>& spans) {
  std::vector<scored_span> whole;
  for (auto& sp : spans) whole.push_back({sp.seq, 1, sp.end});
  return whole;
}

// Routed scoring from every path's nats of from_first_target(spans), path by path: out[p] sums
// the targets [begin, end) of the spans j with route[j] = p (routed_nll's figures without
// scoring again; their sum is routed_nll's).
// Requires: v = every_path_nats(…, from_first_target(spans), …); route[j] in [0, v.size()).
inline std::vector<nll> routed_nll_by_path(const path_nats& v,
                                           const std::vector<scored_span>& spans,
                                           const std::vector<int>& route) {
  std::vector<nll> out(v.size());
  for (std::size_t j = 0; j < spans.size(); ++j) {
    const auto p = std::size_t(route[j]);
    out[p] += sum_nats(v[p][j], spans[j].begin - 1, spans[j].end - 1);
  }
  return out;
}

// Re-routing by likelihood every W tokens (DiPaCo Table 3's frequent re-routing, the paths
// themselves as the router): every path scores chunk i, which is all known when chunk i+1 is
// predicted, and the path that predicted it best scores chunk i+1; chunk 0 goes to the path that
// best predicts the prefix seq[1 … begin).
// Requires: v = every_path_nats(…, from_first_target(spans), …), v non-empty; 2 ≤ begin for
// every span; W ≥ 1.
inline nll likelihood_rerouted_nll(const path_nats& v, const std::vector<scored_span>& spans,
                                   std::size_t W) {
  auto best = [&](std::size_t j, std::size_t b, std::size_t e) {  // targets [b, e) of span j
    std::size_t bp = 0;
    double bn = INFINITY;
    for (std::size_t p = 0; p < v.size(); ++p)
      if (const double n = sum_nats(v[p][j], b - 1, e - 1).nats; n < bn) bn = n, bp = p;
    return bp;
  };
  nll r;
  for (std::size_t j = 0; j < spans.size(); ++j) {
    std::size_t path = best(j, 1, spans[j].begin);
    for (auto [b, e] : chunks_of(spans[j], W)) {
      r += sum_nats(v[path][j], b - 1, e - 1);
      path = best(j, b, e);
    }
  }
  return r;
}

// The same, every path scoring the spans with one workspace.
// Cost: thetas.size() × token_nats of seq[1 … end) per span.
template <nn::LanguageModel M>
nll likelihood_rerouted_nll(const M& model, std::span<const float* const> thetas,
                            const std::vector<scored_span>& spans, std::size_t W,
                            const sliding_window& rule, typename M::workspace& ws) {
  const auto v = every_path_nats(model, thetas, from_first_target(spans), rule,
                                 std::span<typename M::workspace>(&ws, 1));
  return likelihood_rerouted_nll(v, spans, W);
}

}  // namespace paco::route
