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

TEST_CASE("outer co2: penalised momentum, element and norm clipping", "[outer][co2]") {
  // β = 0.5, p = 2, α = 1, no clipping: m = Δ/2, then 0.5·m + Δ/2.
  co2 o{.lr = 1.0f, .momentum = 0.5f, .gap_penalty = 2.0f};
  std::vector<float> th{1.0f, 1.0f}, m{0.0f, 0.0f};
  o.step(th, std::vector<float>{0.4f, -0.2f}, m);
  REQUIRE(m[0] == Approx(0.2f));
  REQUIRE(m[1] == Approx(-0.1f));
  REQUIRE(th[0] == Approx(0.8f));
  REQUIRE(th[1] == Approx(1.1f));
  o.step(th, std::vector<float>{0.4f, -0.2f}, m);
  REQUIRE(m[0] == Approx(0.3f));   // 0.1 + 0.2
  REQUIRE(th[0] == Approx(0.5f));  // 0.8 − 0.3

  // Element clipping clamps each entry of m (and m keeps the clamped value).
  co2 e{.lr = 0.5f, .momentum = 0.0f, .clip = co2::clip_mode::element, .clip_threshold = 0.3f};
  std::vector<float> th2{0.0f, 0.0f, 0.0f}, m2(3, 0.0f);
  e.step(th2, std::vector<float>{1.0f, -2.0f, 0.1f}, m2);
  REQUIRE(m2 == std::vector<float>{0.3f, -0.3f, 0.1f});
  REQUIRE(th2[0] == Approx(-0.15f));
  REQUIRE(th2[1] == Approx(0.15f));
  REQUIRE(th2[2] == Approx(-0.05f));

  // Norm clipping scales m to norm φ when it is longer, and leaves a short m alone.
  co2 nc{.momentum = 0.0f, .clip = co2::clip_mode::norm, .clip_threshold = 1.0f};
  std::vector<float> th3{0.0f, 0.0f}, m3(2, 0.0f);
  nc.step(th3, std::vector<float>{3.0f, 4.0f}, m3);  // ‖m‖ = 5 → m = (0.6, 0.8)
  REQUIRE(m3[0] == Approx(0.6f));
  REQUIRE(m3[1] == Approx(0.8f));
  REQUIRE(th3[1] == Approx(-0.8f));
  nc.step(th3, std::vector<float>{0.3f, 0.4f}, m3);  // ‖m‖ = 0.5: unclipped
  REQUIRE(m3[0] == Approx(0.3f));

  // With β = 0, p = 1, α = 1 and no clipping it is FedAvg, as sgd{1} is.
  std::vector<float> a{3, 4}, b{3, 4}, mm(2, 0.0f), none;
  co2{.momentum = 0.0f}.step(a, std::vector<float>{1, -1}, mm);
  sgd{}.step(b, std::vector<float>{1, -1}, none);
  REQUIRE(a == b);

  REQUIRE(co2{}.validate().ok());
  REQUIRE(!co2{.momentum = 1.0f}.validate().ok());
  REQUIRE(!co2{.gap_penalty = 0.0f}.validate().ok());
  REQUIRE(!co2{.clip = co2::clip_mode::norm, .clip_threshold = 0.0f}.validate().ok());
  REQUIRE(*parse_co2_clip("element") == co2::clip_mode::element);
  const auto bad = parse_co2_clip("elementwise");
  REQUIRE(!bad);
  REQUIRE(bad.error().message.find("none, element, norm") != std::string::npos);
}
