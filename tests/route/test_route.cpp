// route/: routers recover planted clusters; the logistic router's bias leaves no path empty.
#include <catch2/catch.hpp>

#include <algorithm>
#include <map>

#include "paco/core/rng.hpp"
#include "paco/nn/gemm.hpp"
#include "paco/nn/gpt.hpp"
#include "paco/route/route.hpp"

using namespace paco;
using namespace paco::route;

namespace {
// n points around k well-separated centres in D dims; returns points and true labels.
std::pair<std::vector<float>, std::vector<int>> clusters(int n, int k, int D, std::uint64_t seed,
                                                         double spread = 0.3) {
  rng r(seed);
  std::vector<float> centres(std::size_t(k) * D);
  for (auto& c : centres) c = float(8.0 * r.normal());
  std::vector<float> x(std::size_t(n) * D);
  std::vector<int> y(n);
  for (int i = 0; i < n; ++i) {
    y[i] = i % k;
    for (int d = 0; d < D; ++d)
      x[std::size_t(i) * D + d] = centres[std::size_t(y[i]) * D + d] + float(spread * r.normal());
  }
  return {x, y};
}
// Fraction of points whose predicted cluster agrees with the majority mapping of its true one.
template <class F>
double purity(const std::vector<int>& truth, int n, F route) {
  std::map<std::pair<int, int>, int> joint;
  std::map<int, int> best;
  for (int i = 0; i < n; ++i) ++joint[{route(i), truth[i]}];
  std::map<int, int> top;
  for (auto& [kv, c] : joint) top[kv.first] = std::max(top[kv.first], c);
  int s = 0;
  for (auto& [k, c] : top) s += c;
  return double(s) / n;
}
}  // namespace

TEST_CASE("kmeans recovers planted clusters and ranks centroids", "[route]") {
  const int n = 400, k = 4, D = 6;
  auto [x, y] = clusters(n, k, D, 3);
  auto m = kmeans_router::fit(x, n, D, {.k = k, .seed = 7});
  REQUIRE(m.ok());
  REQUIRE(purity(y, n, [&](int i) { return m->route(&x[std::size_t(i) * D]); }) == 1.0);
  auto r = m->rank(&x[0], 3);
  REQUIRE(r.size() == 3);
  REQUIRE(r[0] == m->route(&x[0]));
  REQUIRE(!kmeans_router::fit(x, 2, D, {.k = 4}).ok());
  // Same seed, same centroids.
  auto m2 = kmeans_router::fit(x, n, D, {.k = k, .seed = 7});
  REQUIRE(m2->centroids() == m->centroids());
}

TEST_CASE("product kmeans routes to k1·k2 shards", "[route]") {
  const int n = 600, D = 4;
  rng r(5);
  std::vector<float> x(std::size_t(n) * D);
  std::vector<int> y(n);
  for (int i = 0; i < n; ++i) {
    int a = i % 2, b = (i / 2) % 3;
    y[i] = a * 3 + b;
    x[std::size_t(i) * D + 0] = float(10 * a + 0.2 * r.normal());
    x[std::size_t(i) * D + 1] = float(0.2 * r.normal());
    x[std::size_t(i) * D + 2] = float(10 * b + 0.2 * r.normal());
    x[std::size_t(i) * D + 3] = float(0.2 * r.normal());
  }
  auto p = product_kmeans_router::fit(x, n, D, 2, 3);
  REQUIRE(p.ok());
  REQUIRE(p->k() == 6);
  REQUIRE(purity(y, n, [&](int i) { return p->route(&x[std::size_t(i) * D]); }) == 1.0);
}

TEST_CASE("logistic router learns labels and its bias balances the paths", "[route]") {
  const int n = 400, k = 4, D = 5;
  auto [x, y] = clusters(n, k, D, 11, 1.0);
  auto m = logistic_router::fit(x, n, D, y, {.k = k});
  REQUIRE(m.ok());
  int correct = 0;
  for (int i = 0; i < n; ++i) correct += m->route(&x[std::size_t(i) * D]) == y[i];
  REQUIRE(correct > 0.95 * n);
  // rank: top-n overlapping shards, most likely first, distinct, led by route().
  for (int i = 0; i < n; i += 37) {
    const float* xi = &x[std::size_t(i) * D];
    auto r2 = m->rank(xi, 2);
    REQUIRE(r2.size() == 2);
    REQUIRE(r2[0] == m->route(xi));
    REQUIRE(r2[1] != r2[0]);
    auto all = m->rank(xi, 9);
    REQUIRE(all.size() == std::size_t(k));
    std::sort(all.begin(), all.end());
    for (int c = 0; c < k; ++c) REQUIRE(all[c] == c);
  }
  // Skewed labels: 70% say path 0. The fitted bias still routes documents to every path,
  // near the uniform target.
  std::vector<int> skew(n);
  for (int i = 0; i < n; ++i) skew[i] = i % 10 < 3 ? y[i] : 0;
  auto b = logistic_router::fit(x, n, D, skew, {.k = k});
  REQUIRE(b.ok());
  std::vector<int> count(k, 0);
  for (int i = 0; i < n; ++i) ++count[b->route(&x[std::size_t(i) * D])];
  INFO("routed counts " << count[0] << " " << count[1] << " " << count[2] << " " << count[3]);
  for (int c : count) {
    REQUIRE(c > 0);
    REQUIRE(std::abs(c - n / k) <= n / k / 2);
  }
  // Paths that no document prefers still receive documents.
  std::vector<int> two(n);
  for (int i = 0; i < n; ++i) two[i] = y[i] % 2;
  auto t = logistic_router::fit(x, n, D, two, {.k = k});
  std::vector<int> tc(k, 0);
  for (int i = 0; i < n; ++i) ++tc[t->route(&x[std::size_t(i) * D])];
  for (int c : tc) REQUIRE(c > 0);
  REQUIRE(!logistic_router::fit(x, n, D, std::vector<int>(n, 9), {.k = k}).ok());
}

#include "paco/route/evaluate.hpp"
#include "paco/route/features.hpp"

namespace {
std::vector<std::int32_t> random_tokens(std::size_t n, std::uint64_t seed, int V = 32) {
  rng r(seed);
  std::vector<std::int32_t> s(n);
  for (auto& v : s) v = std::int32_t(r.below(std::uint64_t(V)));
  return s;
}
}  // namespace

TEST_CASE(
    "sliding_window: every target scored once, after the first T with >= T - S + 1 of context",
    "[route][scorer]") {
  for (auto [T, S] : {std::pair{8, 4}, {8, 8}, {8, 1}, {8, 3}}) {
    const auto rule = *sliding_window::make(T, S);
    std::vector<int> scored(200, 0);
    for (std::size_t k = 0; k < 200; ++k)
      for (std::size_t i = rule.first_target(k); i <= rule.start(k) + std::size_t(T) && i < 200;
           ++i) {
        ++scored[i];
        REQUIRE(rule.window_of(i) == k);
        if (i > std::size_t(T)) REQUIRE(i - rule.start(k) >= std::size_t(T - S + 1));
      }
    for (std::size_t i = 1; i < 200; ++i) REQUIRE(scored[i] == 1);
  }
  REQUIRE(sliding_window::make(8, 0)->S == 4);
  REQUIRE(!sliding_window::make(8, 9).ok());
  REQUIRE(sliding_window::make(128, 64)->name() == "sliding_window(T=128,S=64)");
}

TEST_CASE(
    "token_nats: each target against the model's own forward on its window; batching and "
    "span boundaries change nothing",
    "[route][scorer]") {
  nn::gpt m({.vocab = 32, .ctx = 8, .d = 8, .layers = 1, .heads = 2});
  arena<host> a(m.layout());
  m.init(a, 1);
  const float* th = a.get(plane::param).data();
  const auto rule = *sliding_window::make(8, 3);
  auto seq = random_tokens(9, 3);
  auto ws1 = m.make_workspace({1, 8});
  // One full window: the model's mean loss x 8.
  auto n = sequence_nll(m, th, seq, 1, 9, rule, ws1);
  REQUIRE(n.tokens == 8);
  std::vector<std::int32_t> x(seq.begin(), seq.end() - 1), y(seq.begin() + 1, seq.end());
  REQUIRE(n.nats == Approx(8 * m.loss(th, x.data(), y.data(), ws1)).epsilon(1e-5));
  // Longer: each target from the logits of the window the rule names.
  auto longer = random_tokens(41, 4);
  auto got = token_nats(m, th, {{longer, 1, 41}}, rule, ws1)[0];
  REQUIRE(got.size() == 40);
  for (std::size_t i = 1; i < 41; ++i) {
    const std::size_t s = rule.start(rule.window_of(i));
    std::vector<std::int32_t> w(8, 0);
    for (std::size_t t = 0; t < 8 && s + t < longer.size(); ++t) w[t] = longer[s + t];
    m.forward(th, w.data(), ws1);
    const double want = row_nll(ws1.logits.data() + (i - 1 - s) * 32, 32, longer[i]);
    REQUIRE(got[i - 1] == Approx(want).epsilon(1e-12));
  }
  // A sub-span gets the very same per-token nats (context never depends on what is scored), and
  // batching several spans changes nothing.
  auto wsb = m.make_workspace({3, 8});
  auto bat = token_nats(m, th, {{longer, 13, 30}, {seq, 1, 9}, {longer, 2, 5}}, rule, wsb);
  for (std::size_t i = 13; i < 30; ++i) REQUIRE(bat[0][i - 13] == Approx(got[i - 1]).epsilon(1e-6));
  for (std::size_t i = 2; i < 5; ++i) REQUIRE(bat[2][i - 2] == Approx(got[i - 1]).epsilon(1e-6));
  REQUIRE(sum_nats(bat[1], 0, 8).nats == Approx(n.nats).epsilon(1e-6));
  auto f = prefix_features(m, th, {std::span<const std::int32_t>(seq)}, 4);
  REQUIRE(f.size() == 8);
}

TEST_CASE("one scorer: one path scores the same nats through every evaluation entry point",
          "[route][scorer]") {
  nn::gpt m({.vocab = 32, .ctx = 16, .d = 8, .layers = 1, .heads = 2});
  arena<host> a(m.layout());
  m.init(a, 7);
  const std::vector<const float*> one{a.get(plane::param).data()};
  const auto rule = *sliding_window::make(16, 8);
  auto d0 = random_tokens(150, 11), d1 = random_tokens(97, 12), d2 = random_tokens(40, 13);
  const std::vector<scored_span> docs{{d0, 6, 150}, {d1, 6, 97}, {d2, 6, 40}};
  auto ws = m.make_workspace({4, 16});
  const auto routed = routed_nll(m, one, docs, {0, 0, 0}, rule, ws);
  REQUIRE(routed.tokens == 144 + 91 + 34);
  const auto by_router = rerouted_nll(
      m, one, docs, 10, [](std::size_t, std::span<const std::int32_t>) { return 0; }, rule, ws);
  const auto by_lik = likelihood_rerouted_nll(m, one, docs, 10, rule, ws);
  const auto per = per_path_nll(m, one, docs, rule, ws);
  nll oracle;
  for (auto& row : per) oracle += row[std::size_t(best_paths({row})[0])];
  for (const nll& n : {by_router, by_lik, oracle}) {
    REQUIRE(n.tokens == routed.tokens);
    REQUIRE(n.nats == Approx(routed.nats).epsilon(1e-6));
  }
}

TEST_CASE("re-routing: chunk i+1 is scored by the path chosen on chunk i (router or likelihood)",
          "[route][scorer]") {
  nn::gpt m({.vocab = 32, .ctx = 8, .d = 8, .layers = 1, .heads = 2});
  arena<host> a(m.layout()), b(m.layout());
  m.init(a, 1);
  m.init(b, 2);
  const float* ta = a.get(plane::param).data();
  const float* tb = b.get(plane::param).data();
  const std::vector<const float*> both{ta, tb};
  const auto rule = *sliding_window::make(8, 4);
  auto seq = random_tokens(40, 5);
  auto ws = m.make_workspace({2, 8});
  const auto na = token_nats(m, ta, {{seq, 1, 40}}, rule, ws)[0];
  const auto nb = token_nats(m, tb, {{seq, 1, 40}}, rule, ws)[0];
  // By a router that alternates (call n returns n mod 2): chunk 0 [4, 10) by b, [10, 16) by a, …
  std::vector<std::size_t> seen;
  auto r = rerouted_nll(
      m, both, {{seq, 4, 40}}, 6,
      [&](std::size_t, std::span<const std::int32_t> s) {
        seen.push_back(s.size());
        return int(seen.size() % 2);
      },
      rule, ws);
  REQUIRE(seen == std::vector<std::size_t>{4, 6, 6, 6, 6, 6, 6});
  nll alt;
  for (std::size_t c = 0; c < 6; ++c) alt += sum_nats(c % 2 ? na : nb, 3 + 6 * c, 9 + 6 * c);
  REQUIRE(r.tokens == 36);
  REQUIRE(r.nats == Approx(alt.nats).epsilon(1e-9));
  // By likelihood: the reference chunk by chunk from the per-token nats.
  auto pick = [&](std::size_t lo, std::size_t hi) {
    return sum_nats(na, lo - 1, hi - 1).nats <= sum_nats(nb, lo - 1, hi - 1).nats ? &na : &nb;
  };
  nll want;
  const auto* path = pick(1, 4);
  for (std::size_t lo = 4; lo < 40; lo += 6) {
    const std::size_t hi = std::min<std::size_t>(40, lo + 6);
    want += sum_nats(*path, lo - 1, hi - 1);
    path = pick(lo, hi);
  }
  auto got = likelihood_rerouted_nll(m, both, {{seq, 4, 40}}, 6, rule, ws);
  REQUIRE(got.tokens == 36);
  REQUIRE(got.nats == Approx(want.nats).epsilon(1e-9));
  // best_paths over per_path_nll picks the lower score of each span.
  auto per = per_path_nll(m, both, {{seq, 1, 20}, {seq, 20, 40}}, rule, ws);
  auto bp = best_paths(per);
  for (std::size_t j = 0; j < 2; ++j)
    REQUIRE(per[j][std::size_t(bp[j])].nats <= per[j][std::size_t(1 - bp[j])].nats);
}

TEST_CASE(
    "every path's nats: routed and re-routed figures summed from them equal the scoring entry "
    "points, and threads change no nat",
    "[route][scorer]") {
  nn::gemm_single_threaded();  // the scorer's threads each run a single-threaded GEMM
  nn::gpt m({.vocab = 32, .ctx = 16, .d = 8, .layers = 1, .heads = 2});
  arena<host> a(m.layout()), b(m.layout());
  m.init(a, 3);
  m.init(b, 4);
  const std::vector<const float*> both{a.get(plane::param).data(), b.get(plane::param).data()};
  const auto rule = *sliding_window::make(16, 8);
  auto d0 = random_tokens(150, 21), d1 = random_tokens(97, 22), d2 = random_tokens(40, 23);
  const std::vector<scored_span> docs{{d0, 6, 150}, {d1, 6, 97}, {d2, 6, 40}};
  auto ws = m.make_workspace({2, 16});
  std::vector<nn::gpt::workspace> three;
  for (int t = 0; t < 3; ++t) three.push_back(m.make_workspace({2, 16}));
  const auto whole = from_first_target(docs);
  const auto v1 = every_path_nats(m, both, whole, rule, std::span(&ws, 1));
  const auto v3 = every_path_nats(m, both, whole, rule, std::span(three));
  REQUIRE(v1 == v3);  // each batch is the same windows on whichever thread scores it
  // Routed, path by path: against assigned_nll's own scoring of each path's documents.
  const std::vector<int> route{1, 0, 1};
  const auto by_path = routed_nll_by_path(v3, docs, route);
  REQUIRE(by_path.size() == 2);
  for (std::size_t p = 0; p < 2; ++p) {
    std::vector<scored_span> mine;
    for (std::size_t j = 0; j < docs.size(); ++j)
      if (route[j] == int(p)) mine.push_back(docs[j]);
    const nll want = routed_nll(m, std::span(both).subspan(p, 1), mine,
                                std::vector<int>(mine.size(), 0), rule, ws);
    REQUIRE(by_path[p].tokens == want.tokens);
    REQUIRE(by_path[p].nats == Approx(want.nats).epsilon(1e-9));
  }
  const nll all = routed_nll(m, both, docs, route, rule, ws);
  REQUIRE(by_path[0].tokens + by_path[1].tokens == all.tokens);
  REQUIRE(by_path[0].nats + by_path[1].nats == Approx(all.nats).epsilon(1e-9));
  // Re-routed by likelihood: the model entry point scores again on one thread.
  const nll lik = likelihood_rerouted_nll(v3, docs, 5);
  const nll lik1 = likelihood_rerouted_nll(m, both, docs, 5, rule, ws);
  REQUIRE(lik.tokens == lik1.tokens);
  REQUIRE(lik.nats == Approx(lik1.nats).epsilon(1e-12));
}

TEST_CASE("kmeans: a re-seeded point leaves its old cluster (its centroid is the mean of the rest)",
          "[route][kmeans]") {
  // 1-D points {0, 1, 2, 10}; centroids start at {0, 100}: every point goes to cluster 0,
  // cluster 1 is empty and takes the worst-fitted point, 10.
  const std::vector<float> x{0, 1, 2, 10};
  auto km = kmeans_router::fit(x, 4, 1, {.k = 2, .iterations = 1, .init = {0, 100}});
  REQUIRE(km.ok());
  REQUIRE(km->centroids()[0] == Approx(1.0f));
  REQUIRE(km->centroids()[1] == Approx(10.0f));
  REQUIRE(!kmeans_router::fit(x, 4, 1, {.k = 2, .init = {0}}).ok());
}

TEST_CASE("specialisation_of: per-domain path bits/byte, routed and best counts, the oracle",
          "[route][specialisation]") {
  using route::nll;
  const double ln2 = 0.6931471805599453;
  // Three documents, two paths: "b" documents are best on path 1, the "a" document on path 0.
  const std::vector<std::vector<nll>> per = {{{1.0 * ln2, 1}, {2.0 * ln2, 1}},
                                             {{3.0 * ln2, 1}, {1.0 * ln2, 1}},
                                             {{4.0 * ln2, 2}, {2.0 * ln2, 2}}};
  const auto s = route::specialisation_of(per, {0, 0, 1}, {"a", "b", "b"});
  REQUIRE(s.domains == std::vector<std::string>{"a", "b"});
  REQUIRE(s.documents == 3);
  REQUIRE(s.router_picks_best == 2);  // documents 0 and 2
  REQUIRE(s.oracle.tokens == 4);
  REQUIRE(s.oracle.bits_per_token() == Approx((1.0 + 1.0 + 2.0) / 4));
  REQUIRE(s.nats[1][1].bits_per_token() == Approx((1.0 + 2.0) / 3));  // domain b on path 1
  REQUIRE(s.nats[0][0].bits_per_token() == Approx(1.0));
  REQUIRE(s.routed[1] == std::vector<int>{1, 1});
  REQUIRE(s.best[1] == std::vector<int>{0, 2});
  REQUIRE(s.best[0] == std::vector<int>{1, 0});
  REQUIRE(s.bits(1) ==
          std::vector<double>{s.nats[1][0].bits_per_token(), s.nats[1][1].bits_per_token()});
}
