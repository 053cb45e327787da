// route/: routers recover planted clusters; the logistic router's bias leaves no path empty.
#include <catch2/catch.hpp>

#include <algorithm>
#include <map>

#include "paco/core/rng.hpp"
#include "paco/route/route.hpp"
#include "paco/nn/gpt.hpp"

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
    for (int d = 0; d < D; ++d) x[std::size_t(i) * D + d] = centres[std::size_t(y[i]) * D + d] + float(spread * r.normal());
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

TEST_CASE("sequence_nll and chunk_nll agree with the model's loss; re-routing uses chunk i for i+1",
          "[route]") {
  nn::gpt m({.vocab = 32, .ctx = 8, .d = 8, .layers = 1, .heads = 2});
  arena<host> a(m.layout());
  m.init(a, 1);
  rng r(3);
  std::vector<std::int32_t> seq(9);
  for (auto& v : seq) v = std::int32_t(r.below(32));
  auto ws = m.make_workspace({1, 8});
  // One full window: the same as the model's mean loss × 8.
  auto n = sequence_nll(m, a.get(plane::param).data(), seq, 1, 9, ws);
  REQUIRE(n.tokens == 8);
  std::vector<std::int32_t> x(seq.begin(), seq.end() - 1), y(seq.begin() + 1, seq.end());
  REQUIRE(n.nats == Approx(8 * m.loss(a.get(plane::param).data(), x.data(), y.data(), ws)).epsilon(1e-5));
  // chunk_nll of the last 3 targets with full context equals the tail of that window.
  auto c = chunk_nll(m, a.get(plane::param).data(), seq, 6, 9, ws);
  REQUIRE(c.tokens == 3);
  // Longer sequences: windows tile [begin, end) exactly.
  std::vector<std::int32_t> longer(30);
  for (auto& v : longer) v = std::int32_t(r.below(32));
  auto one = sequence_nll(m, a.get(plane::param).data(), longer, 4, 30, ws);
  REQUIRE(one.tokens == 26);
  auto wsb = m.make_workspace({3, 8});
  auto bat = batched_nll(m, a.get(plane::param).data(),
                         {{longer, 4, 30}, {seq, 1, 9}, {longer, 2, 5}}, wsb);
  auto sep = one;
  sep += sequence_nll(m, a.get(plane::param).data(), seq, 1, 9, ws);
  sep += sequence_nll(m, a.get(plane::param).data(), longer, 2, 5, ws);
  REQUIRE(bat.tokens == sep.tokens);
  REQUIRE(bat.nats == Approx(sep.nats).epsilon(1e-5));
  // Re-routing: the path for chunk i+1 is route(chunk i).
  std::vector<int> used;
  auto total = rerouted_nll(
      longer, 4, 30, 10,
      [&](std::span<const std::int32_t> s) { return int(s.size()); },
      [&](int p, std::size_t b, std::size_t e) {
        used.push_back(p);
        return nll{1.0, e - b};
      });
  REQUIRE(total.tokens == 26);
  REQUIRE(used == std::vector<int>{4, 10, 10});
  auto f = prefix_features(m, a.get(plane::param).data(), {std::span<const std::int32_t>(seq)}, 4);
  REQUIRE(f.size() == 8);
}

TEST_CASE("likelihood re-routing: each chunk goes to the path that best predicted the previous",
          "[route]") {
  nn::gpt m({.vocab = 32, .ctx = 8, .d = 8, .layers = 1, .heads = 2});
  arena<host> a(m.layout()), b(m.layout());
  m.init(a, 1);
  m.init(b, 2);
  rng r(5);
  std::vector<std::int32_t> seq(40);
  for (auto& v : seq) v = std::int32_t(r.below(32));
  auto ws = m.make_workspace({1, 8});
  const float* ta = a.get(plane::param).data();
  const float* tb = b.get(plane::param).data();
  // The reference, chunk by chunk: prefix [1, 4), chunks of 6 from 4.
  auto best = [&](std::size_t lo, std::size_t hi) {
    return chunk_nll(m, ta, seq, lo, hi, ws).nats <= chunk_nll(m, tb, seq, lo, hi, ws).nats ? ta
                                                                                            : tb;
  };
  nll want;
  const float* path = best(1, 4);
  for (std::size_t lo = 4; lo < 40; lo += 6) {
    const std::size_t hi = std::min<std::size_t>(40, lo + 6);
    want += chunk_nll(m, path, seq, lo, hi, ws);
    path = best(lo, hi);
  }
  const std::vector<const float*> both{ta, tb};
  auto got = likelihood_rerouted_nll(m, both, seq, 4, 40, 6, ws);
  REQUIRE(got.tokens == 36);
  REQUIRE(got.nats == Approx(want.nats).epsilon(1e-12));
  // One path: the plain chunked score of that path.
  const std::vector<const float*> one{ta};
  nll only;
  for (std::size_t lo = 4; lo < 40; lo += 6)
    only += chunk_nll(m, ta, seq, lo, std::min<std::size_t>(40, lo + 6), ws);
  REQUIRE(likelihood_rerouted_nll(m, one, seq, 4, 40, 6, ws).nats == Approx(only.nats).epsilon(1e-12));
}
