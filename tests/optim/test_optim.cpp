// Inner optimizers against hand-computed known answers.
#include <catch2/catch.hpp>

#include <cmath>

#include "paco/optim/optim.hpp"

using namespace paco;
using namespace paco::optim;

TEST_CASE("adamw first step moves each weight by lr·sign(g) after decay", "[optim]") {
  adamw o{.lr = 0.1f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .weight_decay = 0.5f};
  float th[3] = {1.0f, -2.0f, 0.5f}, g[3] = {0.3f, -4.0f, 0.0f}, m[3] = {}, v[3] = {};
  o.step(th, g, m, v, 3, 1, o.lr);
  // decay: θ·(1 − 0.05); Adam step 1: m̂ = g, v̂ = g² → Δ = lr·g/(|g|+ε)
  REQUIRE(th[0] == Approx(0.95f - 0.1f).epsilon(1e-5));
  REQUIRE(th[1] == Approx(-1.9f + 0.1f).epsilon(1e-5));
  REQUIRE(th[2] == Approx(0.475f).epsilon(1e-6));
  REQUIRE(m[0] == Approx(0.03f));
  REQUIRE(v[1] == Approx(0.016f).epsilon(1e-4));
}

TEST_CASE("adamw second step uses bias-corrected moments", "[optim]") {
  adamw o{.lr = 0.01f, .beta1 = 0.9f, .beta2 = 0.99f, .eps = 0.0f + 1e-8f, .weight_decay = 0};
  float th = 0, m = 0, v = 0, g1 = 1.0f, g2 = 3.0f;
  o.step(&th, &g1, &m, &v, 1, 1, o.lr);
  o.step(&th, &g2, &m, &v, 1, 2, o.lr);
  double mm = 0.9 * 0.1 + 0.1 * 3, vv = 0.99 * 0.01 + 0.01 * 9;
  double mh = mm / (1 - 0.81), vh = vv / (1 - 0.9801);
  REQUIRE(th == Approx(-0.01 - 0.01 * mh / std::sqrt(vh)).epsilon(1e-5));
}

TEST_CASE("sgd with momentum and nesterov follow PyTorch", "[optim]") {
  sgd o{.lr = 0.1f, .momentum = 0.9f, .nesterov = true};
  float th = 1, b = 0, g = 2;
  o.step(&th, &g, &b, 1, 1, o.lr);  // b = 2; step g + 0.9·b = 3.8
  REQUIRE(th == Approx(1 - 0.38));
  o.step(&th, &g, &b, 1, 2, o.lr);  // b = 0.9·2 + 2 = 3.8; step 2 + 3.42 = 5.42
  REQUIRE(b == Approx(3.8f));
  REQUIRE(th == Approx(1 - 0.38 - 0.542));
  sgd plain{.lr = 0.5f};
  float t2 = 1, g2 = 1;
  plain.step(&t2, &g2, nullptr, 1, 1, plain.lr);
  REQUIRE(t2 == Approx(0.5f));
}

TEST_CASE("warmup_cosine schedule endpoints", "[optim]") {
  warmup_cosine s{.lr = 1.0f, .min_lr = 0.1f, .warmup = 10, .total = 110};
  REQUIRE(s.lr_at(5) == Approx(0.5f));
  REQUIRE(s.lr_at(10) == Approx(1.0f));
  REQUIRE(s.lr_at(60) == Approx(0.55f));
  REQUIRE(s.lr_at(110) == Approx(0.1f));
  REQUIRE(s.lr_at(500) == Approx(0.1f));
}

TEST_CASE("clip_grad_norm scales to max_norm and reports the norm", "[optim]") {
  float g[2] = {3, 4};
  REQUIRE(clip_grad_norm(g, 2, 1.0) == Approx(5.0));
  REQUIRE(std::sqrt(g[0] * g[0] + g[1] * g[1]) == Approx(1.0).epsilon(1e-5));
  float h[2] = {0.3f, 0.4f};
  clip_grad_norm(h, 2, 1.0);
  REQUIRE(h[0] == 0.3f);
  REQUIRE(!adamw{.beta1 = 1.0f}.validate().ok());
}
