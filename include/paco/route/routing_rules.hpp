#pragma once
// routing_rules: one set of path parameters scored under each routing rule of DiPaCo §2.4 and
// Table 3, by the one scorer (route/evaluate.hpp) on the same tokens, so the rules differ only
// in which path scores each token:
//
//   ""                span j by router.route(its prefix features)
//   "_prefix_lik"     by the path that best predicts its prefix seq[1 … begin)
//   "_reroute<W>"     chunks of W tokens; chunk i+1 by the router on chunk i's features (the
//                     frozen base model's, over min(W, T) tokens), chunk 0 by the prefix's
//   "_reroute<W>_lik" chunk i+1 by the path that predicted chunk i best
//
// route/scored_docs.hpp's after_prefix gives the spans: every document scored after its routing
// prefix.
//
//   auto ev = route::after_prefix(docs, 32);
//   auto s = route::score_routing_rules(model, thetas, ev.spans, features, router,
//                                       base_theta, rule, ws);  // s.scores[0]: the router's

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "paco/nn/concepts.hpp"
#include "paco/route/concepts.hpp"
#include "paco/route/evaluate.hpp"
#include "paco/route/features.hpp"
#include "paco/route/scored_docs.hpp"

namespace paco::route {

struct rule_score {
  std::string suffix;  // "" for the router's routing, else the rule's (see the top)
  nll n;
  double seconds = 0;  // wall time of this rule's scoring
};

struct routing_rule_scores {
  std::vector<int> routed;         // per span: the router's path (for the diagnostics)
  std::vector<rule_score> scores;  // in the order at the top of this file
};

// Requires: thetas non-empty; features row j = span j's prefix features (router.dim() floats
// each); base_theta the parameters those features come from; every span's begin ≥ 2; W ≥ 1;
// ws made for {B, rule.T}.
// Cost: 1 + |thetas| token_nats passes over the spans' targets, |thetas| over their prefixes,
// |thetas| over seq[1 … end), and one feature pass per chunk.
template <nn::LanguageModel M, Router R>
routing_rule_scores score_routing_rules(const M& model, std::span<const float* const> thetas,
                                        const std::vector<scored_span>& spans,
                                        std::span<const float> features, const R& router,
                                        const float* base_theta, const sliding_window& rule,
                                        typename M::workspace& ws, std::size_t W = 64) {
  using clk = std::chrono::steady_clock;
  routing_rule_scores r;
  const std::size_t D = spans.empty() ? 0 : features.size() / spans.size();
  auto timed = [&](std::string suffix, auto&& score) {
    const auto t0 = clk::now();
    const nll n = score();
    r.scores.push_back(
        {std::move(suffix), n, std::chrono::duration<double>(clk::now() - t0).count()});
  };
  timed("", [&] {
    for (std::size_t j = 0; j < spans.size(); ++j)
      r.routed.push_back(router.route(&features[j * D]));
    return routed_nll(model, thetas, spans, r.routed, rule, ws);
  });
  const std::string w = std::to_string(W);
  timed("_prefix_lik", [&] {
    std::vector<scored_span> prefixes;
    for (auto& sp : spans) prefixes.push_back({sp.seq, 1, sp.begin});
    const auto by_prefix = best_paths(per_path_nll(model, thetas, prefixes, rule, ws));
    return routed_nll(model, thetas, spans, by_prefix, rule, ws);
  });
  timed("_reroute" + w, [&] {
    const int fp = std::min(int(W), rule.T);
    auto wsf = model.make_workspace({1, fp});
    return rerouted_nll(
        model, thetas, spans, W,
        [&](std::size_t, std::span<const std::int32_t> chunk) {
          return router.route(prefix_features(model, base_theta, {chunk}, fp, 1, &wsf).data());
        },
        rule, ws);
  });
  timed("_reroute" + w + "_lik",
        [&] { return likelihood_rerouted_nll(model, thetas, spans, W, rule, ws); });
  return r;
}

}  // namespace paco::route
