// route/routing_rules.hpp: each rule's score is the one scorer's entry point for that rule; with
// one path every rule scores the same tokens and nats.
#include <catch2/catch.hpp>

#include "paco/nn/gpt.hpp"
#include "paco/route/routing_rules.hpp"
#include "paco/testing/token_streams.hpp"

using namespace paco;

namespace {
// Routes by the sign of the first feature: ≥ 0 → path 1.
struct sign_router {
  using router_tag = void;
  int k() const { return 2; }
  int route(const float* x) const { return x[0] >= 0 ? 1 : 0; }
};
static_assert(route::Router<sign_router>);
}  // namespace

TEST_CASE("after_prefix: documents longer than prefix + 1, scored after the prefix",
          "[route][routing_rules]") {
  const std::vector<std::int32_t> a(5, 1), b(3, 2), c(9, 3);
  const auto p = route::after_prefix({a, b, c}, 3);
  REQUIRE(p.doc == std::vector<std::size_t>{0, 2});
  REQUIRE(p.spans.size() == 2);
  REQUIRE(p.spans[1].seq.data() == c.data());
  REQUIRE(p.spans[1].begin == 3);
  REQUIRE(p.spans[1].end == 9);
}

TEST_CASE("score_routing_rules: every rule equals its scorer entry point",
          "[route][routing_rules]") {
  nn::gpt model({.vocab = 64, .ctx = 16, .d = 16, .layers = 1, .heads = 2});
  std::vector<std::vector<float>> th;
  for (std::uint64_t seed : {1u, 2u, 3u}) {
    arena<host> a(model.layout());
    model.init(a, seed);
    th.emplace_back(a.get(plane::param).begin(), a.get(plane::param).end());
  }
  const float* base = th[2].data();
  std::vector<io::token_stream> text;
  for (std::uint64_t i = 0; i < 5; ++i)
    text.push_back(testing::synthetic_stream(10 + i, 40 + 7 * i, 3 + i, 2));
  std::vector<std::span<const std::int32_t>> docs;
  for (auto& t : text) docs.push_back(t.ids);
  const auto ev = route::after_prefix(docs, 6);
  REQUIRE(ev.spans.size() == 5);
  const std::vector<float> feat{1, -1, 2, -2, 0};  // one feature per span
  const auto rule = *route::sliding_window::make(16, 8);
  auto ws = model.make_workspace({3, 16});
  const sign_router router;
  const std::vector<const float*> two{th[0].data(), th[1].data()};

  const auto s = route::score_routing_rules(model, two, ev.spans, feat, router, base, rule, ws, 8);
  REQUIRE(s.routed == std::vector<int>{1, 0, 1, 0, 1});
  REQUIRE(s.scores.size() == 4);
  REQUIRE(s.scores[0].suffix.empty());
  REQUIRE(s.scores[1].suffix == "_prefix_lik");
  REQUIRE(s.scores[2].suffix == "_reroute8");
  REQUIRE(s.scores[3].suffix == "_reroute8_lik");
  auto same = [](const route::nll& a, const route::nll& b) {
    return a.nats == b.nats && a.tokens == b.tokens;
  };
  REQUIRE(same(s.scores[0].n, route::routed_nll(model, two, ev.spans, s.routed, rule, ws)));
  std::vector<route::scored_span> prefixes;
  for (auto& sp : ev.spans) prefixes.push_back({sp.seq, 1, sp.begin});
  const auto by_prefix = route::best_paths(route::per_path_nll(model, two, prefixes, rule, ws));
  REQUIRE(same(s.scores[1].n, route::routed_nll(model, two, ev.spans, by_prefix, rule, ws)));
  auto wsf = model.make_workspace({1, 8});
  const auto by_chunk = route::rerouted_nll(
      model, two, ev.spans, 8,
      [&](std::size_t, std::span<const std::int32_t> chunk) {
        return router.route(route::prefix_features(model, base, {chunk}, 8, 1, &wsf).data());
      },
      rule, ws);
  REQUIRE(same(s.scores[2].n, by_chunk));
  REQUIRE(same(s.scores[3].n, route::likelihood_rerouted_nll(model, two, ev.spans, 8, rule, ws)));
  for (auto& r : s.scores) REQUIRE(r.n.tokens == s.scores[0].n.tokens);

  // One path: every rule scores the same nats (the router's choices all fall on path 0).
  struct zero_router {
    using router_tag = void;
    int k() const { return 1; }
    int route(const float*) const { return 0; }
  };
  const std::vector<const float*> one{th[0].data()};
  const auto o =
      route::score_routing_rules(model, one, ev.spans, feat, zero_router{}, base, rule, ws, 8);
  // The same per-token nats, summed per chunk or per span: in another order, and from forward
  // passes over other batch shapes, whose kernels may round differently on another CPU (an
  // AVX-512 EPYC gave 1.1e-11 relative): equal to well within 1e-9.
  for (auto& r : o.scores) {
    REQUIRE(r.n.tokens == o.scores[0].n.tokens);
    REQUIRE(r.n.nats == Approx(o.scores[0].n.nats).epsilon(1e-9));
  }
}
