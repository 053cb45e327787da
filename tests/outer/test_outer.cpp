// outer/: Nesterov against PyTorch's SGD(nesterov=True) convention; delta transforms.
#include <catch2/catch.hpp>

#include <cmath>

#include "paco/outer/outer.hpp"

using namespace paco::outer;

TEST_CASE("outer nesterov follows torch.optim.SGD(nesterov=True)", "[outer]") {
  nesterov o;  // 0.7, 0.9
  std::vector<float> th{1.0f}, b{0.0f};
  o.step(th, std::vector<float>{0.5f}, b);
  // b = 0.5; θ = 1 − 0.7·(0.5 + 0.45) = 0.335
  REQUIRE(b[0] == Approx(0.5f));
  REQUIRE(th[0] == Approx(0.335f));
  o.step(th, std::vector<float>{0.2f}, b);
  // b = 0.45 + 0.2 = 0.65; θ = 0.335 − 0.7·(0.2 + 0.585) = −0.2145
  REQUIRE(b[0] == Approx(0.65f));
  REQUIRE(th[0] == Approx(-0.2145f));
  REQUIRE(!nesterov{.momentum = 1.0f}.validate().ok());
}

TEST_CASE("outer sgd with lr 1 lands on θ − Δ", "[outer]") {
  std::vector<float> th{3, 4}, none;
  sgd{}.step(th, std::vector<float>{1, -1}, none);
  REQUIRE(th == std::vector<float>{2, 5});
}

TEST_CASE("delta coefficients: shard weights and the sqrt(P) rescale", "[outer]") {
  auto c = delta_coefficients({1, 3}, 4, {.weight_by_shard = true, .rescale = path_rescale::none});
  REQUIRE(c[0] == Approx(0.25));
  REQUIRE(c[1] == Approx(0.75));
  auto u = delta_coefficients({1, 3}, 4,
                              {.weight_by_shard = false, .rescale = path_rescale::sqrt_paths});
  REQUIRE(u[0] == Approx(1.0));  // √4 · 1/2
  auto v = delta_coefficients({5}, 4,
                              {.weight_by_shard = true, .rescale = path_rescale::inv_sqrt_paths});
  REQUIRE(v[0] == Approx(0.5));
  std::vector<float> out(2);
  std::vector<float> d1{1, 2}, d2{3, 4};
  combine_deltas(out, {d1, d2}, {0.25, 0.75});
  REQUIRE(out[0] == Approx(2.5f));
  REQUIRE(out[1] == Approx(3.5f));
  REQUIRE(parse_path_rescale("sqrt_paths").ok());
  REQUIRE(!parse_path_rescale("sqrt").ok());
}
