// The GPT model: layout, determinism, gradient check of the whole model, threaded replica.
#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include "paco/nn/nn.hpp"

using namespace paco;
using namespace paco::nn;

namespace {
gpt_config tiny() {
  return {.vocab = 17, .ctx = 8, .d = 8, .layers = 2, .heads = 2};
}

void random_batch(rng& r, int B, int T, int V, std::vector<std::int32_t>& x,
                  std::vector<std::int32_t>& y) {
  x.resize(B * T);
  y.resize(B * T);
  for (auto& v : x) v = std::int32_t(r.below(V));
  for (auto& v : y) v = std::int32_t(r.below(V));
}
}  // namespace

TEST_CASE("gpt_config validation names the bad field", "[nn][gpt]") {
  auto s = gpt_config{.d = 10, .heads = 3}.validate();
  REQUIRE(!s.ok());
  REQUIRE(s.error().message.find("heads") != std::string::npos);
  REQUIRE(!gpt_config{.layers = -1}.validate().ok());
  REQUIRE(gpt_config{}.validate().ok());
  REQUIRE_THROWS_AS(gpt(gpt_config{.ctx = 0}), error_exception);
}

TEST_CASE("gpt layout has one entry per module and tensors tile it", "[nn][gpt]") {
  gpt m(tiny());
  REQUIRE(m.layout().count() == 2 + 2 + 1);
  std::size_t n = 0;
  for (auto& t : m.tensors()) {
    n += t.size();
    REQUIRE(t.offset + t.size() <= m.layout().total());
  }
  REQUIRE(n == m.param_count());
  gpt tied(gpt_config{.vocab = 17, .ctx = 8, .d = 8, .layers = 1, .heads = 2, .tie_weights = true});
  REQUIRE(!tied.layout().find("head"));
}

TEST_CASE("gpt init is a function of the seed", "[nn][gpt]") {
  gpt m(tiny());
  arena<host> a(m.layout()), b(m.layout()), c(m.layout());
  m.init(a, 7);
  m.init(b, 7);
  m.init(c, 8);
  auto pa = a.get(plane::param), pb = b.get(plane::param), pc = c.get(plane::param);
  REQUIRE(std::equal(pa.begin(), pa.end(), pb.begin()));
  REQUIRE(!std::equal(pa.begin(), pa.end(), pc.begin()));
}

TEST_CASE("gpt gradients match central differences of the loss", "[nn][gpt]") {
  for (bool tie : {false, true}) {
    auto cfg = tiny();
    cfg.tie_weights = tie;
    cfg.init_std = 0.3f;
    gpt m(cfg);
    arena<host> a(m.layout());
    m.init(a, 3);
    rng r(5);
    std::vector<std::int32_t> x, y;
    random_batch(r, 2, 6, cfg.vocab, x, y);
    auto ws = m.make_workspace({2, 6});
    auto th = a.get(plane::param);
    auto g = a.get(plane::grad);
    m.forward_backward(th.data(), g.data(), x.data(), y.data(), ws);
    double worst = 0;
    for (int k = 0; k < 60; ++k) {
      std::size_t i = r.below(th.size());
      float keep = th[i];
      const float h = 1e-2f;
      th[i] = keep + h;
      double fp = m.loss(th.data(), x.data(), y.data(), ws);
      th[i] = keep - h;
      double fm = m.loss(th.data(), x.data(), y.data(), ws);
      th[i] = keep;
      double fd = (fp - fm) / (2 * h);
      worst = std::max(worst, std::abs(fd - g[i]) / std::max(1e-2, std::abs(fd)));
      // padding between modules has zero gradient
    }
    INFO("tie=" << tie << " worst relative error " << worst);
    REQUIRE(worst < 5e-2);
  }
}

TEST_CASE("replica on 1 and 2 threads gives the same loss and gradient", "[nn][gpt]") {
  gpt m(gpt_config{.vocab = 32, .ctx = 16, .d = 16, .layers = 2, .heads = 2});
  arena<host> a(m.layout()), b(m.layout());
  m.init(a, 1);
  m.init(b, 1);
  rng r(2);
  std::vector<std::int32_t> x, y;
  random_batch(r, 4, 16, 32, x, y);
  replica<gpt> one(m, 4, 16, 1), two(m, 4, 16, 2);
  REQUIRE(two.threads() == 2);
  double l1 = one.forward_backward(a, x.data(), y.data());
  double l2 = two.forward_backward(b, x.data(), y.data());
  REQUIRE(l1 == Approx(l2).epsilon(1e-6));
  REQUIRE(std::abs(l1 - std::log(32.0)) < 0.2);  // near uniform at init
  auto ga = a.get(plane::grad), gb = b.get(plane::grad);
  double md = 0;
  for (std::size_t i = 0; i < ga.size(); ++i) md = std::max(md, double(std::abs(ga[i] - gb[i])));
  REQUIRE(md < 1e-6);
  // A second step must not see stale per-thread gradients.
  double l3 = two.forward_backward(b, x.data(), y.data());
  REQUIRE(l3 == Approx(l2).epsilon(1e-6));
  for (std::size_t i = 0; i < ga.size(); ++i) REQUIRE(std::abs(ga[i] - gb[i]) < 1e-6);
  REQUIRE(one.loss(a, x.data(), y.data()) == Approx(l1).epsilon(1e-6));
}

TEST_CASE("replica chunks uneven batches and is bit-reproducible across runs", "[nn][gpt]") {
  gpt m(gpt_config{.vocab = 32, .ctx = 8, .d = 16, .layers = 1, .heads = 2});
  rng r(9);
  std::vector<std::int32_t> x, y;
  random_batch(r, 5, 8, 32, x, y);
  arena<host> a(m.layout()), b(m.layout()), c(m.layout());
  for (auto* ar : {&a, &b, &c}) m.init(*ar, 4);
  replica<gpt> one(m, 5, 8, 1), three(m, 5, 8, 3);
  REQUIRE(three.chunks() == 5);
  double l1 = one.forward_backward(a, x.data(), y.data());
  double l3 = three.forward_backward(b, x.data(), y.data());
  REQUIRE(l1 == Approx(l3).epsilon(1e-6));
  auto ga = a.get(plane::grad), gb = b.get(plane::grad), gc = c.get(plane::grad);
  for (std::size_t i = 0; i < ga.size(); ++i) REQUIRE(std::abs(ga[i] - gb[i]) < 1e-6);
  // The same replica again, and a second replica: identical bits whatever thread ran a chunk.
  for (int rep = 0; rep < 5; ++rep) {
    replica<gpt> again(m, 5, 8, 3);
    again.forward_backward(c, x.data(), y.data());
    REQUIRE(std::equal(gb.begin(), gb.end(), gc.begin()));
  }
}
