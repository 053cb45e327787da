// Muon against answers derived without its code: singular values from a Jacobi SVD written here
// (not the Newton–Schulz matrix iteration), closed forms on orthogonal inputs, AdamW alone on
// the elements outside the matrices.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "paco/nn/gpt.hpp"
#include "paco/optim/muon.hpp"
#include "paco/optim/one_of.hpp"

using namespace paco;
using namespace paco::optim;

namespace {

// Singular values of a (rows × cols, row-major) by one-sided Jacobi on its columns (of aᵀ when
// it is wide), in double: rotate column pairs until every pair is orthogonal; the singular
// values are then the column norms. Sorted descending.
std::vector<double> jacobi_singular_values(const std::vector<float>& a, std::size_t rows,
                                           std::size_t cols) {
  const bool wide = cols > rows;
  const std::size_t m = wide ? cols : rows, n = wide ? rows : cols;  // m × n, m ≥ n
  std::vector<double> u(m * n);
  for (std::size_t i = 0; i < rows; ++i)
    for (std::size_t j = 0; j < cols; ++j) (wide ? u[j * n + i] : u[i * n + j]) = a[i * cols + j];
  for (int sweep = 0; sweep < 60; ++sweep) {
    double off = 0;
    for (std::size_t p = 0; p < n; ++p)
      for (std::size_t q = p + 1; q < n; ++q) {
        double al = 0, be = 0, ga = 0;
        for (std::size_t i = 0; i < m; ++i) {
          al += u[i * n + p] * u[i * n + p];
          be += u[i * n + q] * u[i * n + q];
          ga += u[i * n + p] * u[i * n + q];
        }
        if (std::abs(ga) <= 1e-15 * std::sqrt(al * be)) continue;
        off = std::max(off, std::abs(ga) / std::sqrt(al * be));
        const double zeta = (be - al) / (2 * ga);
        const double t = (zeta >= 0 ? 1 : -1) / (std::abs(zeta) + std::sqrt(1 + zeta * zeta));
        const double c = 1 / std::sqrt(1 + t * t), s = c * t;
        for (std::size_t i = 0; i < m; ++i) {
          const double x = u[i * n + p], y = u[i * n + q];
          u[i * n + p] = c * x - s * y;
          u[i * n + q] = s * x + c * y;
        }
      }
    if (off < 1e-13) break;
  }
  std::vector<double> sv(n);
  for (std::size_t j = 0; j < n; ++j) {
    double s = 0;
    for (std::size_t i = 0; i < m; ++i) s += u[i * n + j] * u[i * n + j];
    sv[j] = std::sqrt(s);
  }
  std::sort(sv.rbegin(), sv.rend());
  return sv;
}

std::vector<float> gaussian(std::size_t n, unsigned seed) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d;
  std::vector<float> v(n);
  for (auto& x : v) x = d(g);
  return v;
}

// A rows × cols matrix with orthonormal columns (rows ≥ cols) by Gram–Schmidt on Gaussian columns.
std::vector<float> orthonormal_columns(std::size_t rows, std::size_t cols, unsigned seed) {
  auto v = gaussian(rows * cols, seed);
  std::vector<double> q(rows * cols);
  for (std::size_t j = 0; j < cols; ++j) {
    for (std::size_t i = 0; i < rows; ++i) q[i * cols + j] = v[i * cols + j];
    for (int pass = 0; pass < 2; ++pass)
      for (std::size_t k = 0; k < j; ++k) {
        double d = 0;
        for (std::size_t i = 0; i < rows; ++i) d += q[i * cols + j] * q[i * cols + k];
        for (std::size_t i = 0; i < rows; ++i) q[i * cols + j] -= d * q[i * cols + k];
      }
    double nrm = 0;
    for (std::size_t i = 0; i < rows; ++i) nrm += q[i * cols + j] * q[i * cols + j];
    for (std::size_t i = 0; i < rows; ++i) q[i * cols + j] /= std::sqrt(nrm);
  }
  return std::vector<float>(q.begin(), q.end());
}

}  // namespace

TEST_CASE("the Jacobi SVD of this test recovers known singular values", "[optim][muon]") {
  // diag(3, 2, 1) rotated by orthonormal factors on both sides.
  const auto u = orthonormal_columns(5, 3, 11), v = orthonormal_columns(3, 3, 12);
  std::vector<float> a(5 * 3, 0);
  const double s[3] = {3, 2, 1};
  for (std::size_t i = 0; i < 5; ++i)
    for (std::size_t j = 0; j < 3; ++j)
      for (std::size_t k = 0; k < 3; ++k) a[i * 3 + j] += float(u[i * 3 + k] * s[k] * v[j * 3 + k]);
  const auto sv = jacobi_singular_values(a, 5, 3);
  REQUIRE(sv.size() == 3);
  for (int k = 0; k < 3; ++k) CHECK(sv[std::size_t(k)] == Approx(s[k]).epsilon(1e-5));
}

TEST_CASE("Newton–Schulz maps each singular value through the quintic, into its known band",
          "[optim][muon]") {
  for (auto [rows, cols] : {std::pair<std::size_t, std::size_t>{12, 20}, {24, 8}, {10, 14}}) {
    const auto u = gaussian(rows * cols, unsigned(rows * 31 + cols));
    const auto in = jacobi_singular_values(u, rows, cols);
    double fro = 0;
    for (float x : u) fro += double(x) * x;
    fro = std::sqrt(fro);
    std::vector<float> out(u.size());
    ns_workspace w;
    newton_schulz(u.data(), out.data(), rows, cols, 5, w);
    const auto got = jacobi_singular_values(out, rows, cols);
    REQUIRE(got.size() == in.size());
    INFO(rows << " x " << cols);
    // p⁵ is not monotone, so the values are compared as sorted sets.
    std::vector<double> want;
    for (double s : in) {
      REQUIRE(s / fro > 0.01);  // inside the range where the band below holds
      want.push_back(newton_schulz_scalar(s / fro, 5));
    }
    std::sort(want.rbegin(), want.rend());
    for (std::size_t k = 0; k < in.size(); ++k) {
      CHECK(got[k] == Approx(want[k]).epsilon(2e-3));
      CHECK(got[k] > 0.68);
      CHECK(got[k] < 1.135);
    }
  }
}

TEST_CASE("on an input with orthonormal columns Newton–Schulz returns it scaled", "[optim][muon]") {
  // Every singular value is 1, so after normalisation 1/√cols, and p⁵ maps it to one number.
  for (auto [rows, cols] : {std::pair<std::size_t, std::size_t>{8, 8}, {16, 4}}) {
    const auto q = orthonormal_columns(rows, cols, 5);
    std::vector<float> out(q.size());
    ns_workspace w;
    newton_schulz(q.data(), out.data(), rows, cols, 5, w);
    const double s = newton_schulz_scalar(1 / std::sqrt(double(cols)), 5);
    for (std::size_t i = 0; i < q.size(); ++i) CHECK(out[i] == Approx(s * q[i]).margin(2e-5));
  }
}

TEST_CASE("a muon step: orthogonalised momentum on the matrices, AdamW everywhere else",
          "[optim][muon]") {
  param_layout layout;
  layout.add("all", 3 + 16 * 4 + 5);
  const std::size_t total = layout.total();
  // One 16 × 4 matrix at offset 3; the other elements are AdamW's.
  muon m{.lr = 0.05f, .momentum = 0.0f, .nesterov = false, .weight_decay = 0.5f, .ns_steps = 5};
  m.aux = {.lr = 1e-2f, .weight_decay = 0.1f};
  m.matrices = {{3, 16, 4}};
  REQUIRE(m.validate().ok());
  arena<host> a(layout), ref(layout);
  const auto theta = gaussian(total, 1), grad_rest = gaussian(total, 2);
  const auto q = orthonormal_columns(16, 4, 3);
  for (arena<host>* x : {&a, &ref}) {
    std::copy(theta.begin(), theta.end(), x->get(plane::param).begin());
    auto g = x->get(plane::grad);
    std::copy(grad_rest.begin(), grad_rest.end(), g.begin());
    std::copy(q.begin(), q.end(), g.begin() + 3);
  }
  const float lr_t = 5e-3f;  // half the schedule's peak: the matrices get half their peak too
  m.step(a, 1, lr_t);
  // The matrix: momentum 0, so U = G = Q; θ ← θ·(1 − lr·wd) − lr·√(16/4)·p⁵(1/2)·Q.
  const double lr_m = 0.05 * 0.5, s = newton_schulz_scalar(0.5, 5);
  for (std::size_t i = 0; i < q.size(); ++i)
    CHECK(a.get(plane::param)[3 + i] ==
          Approx(theta[3 + i] * (1 - lr_m * 0.5) - lr_m * 2 * s * q[i]).margin(1e-6));
  // Elsewhere: AdamW alone on the same elements, bit for bit.
  m.aux.step(ref, 0, 3, 1, lr_t);
  m.aux.step(ref, 3 + 64, total, 1, lr_t);
  for (std::size_t i : {0, 1, 2, 67, 68, 71}) {
    CHECK(a.get(plane::param)[i] == ref.get(plane::param)[i]);
    CHECK(a.get(plane::moment2)[i] == ref.get(plane::moment2)[i]);
  }
}

TEST_CASE("muon's momentum follows the reference's lerp form, with Nesterov", "[optim][muon]") {
  param_layout layout;
  layout.add("w", 8 * 8);
  arena<host> a(layout);
  muon m{.momentum = 0.9f};
  m.aux.lr = m.lr;
  m.matrices = {{0, 8, 8}};
  const auto g1 = gaussian(64, 7), g2 = gaussian(64, 8);
  auto g = a.get(plane::grad);
  std::copy(g1.begin(), g1.end(), g.begin());
  m.step(a, 1, m.lr);
  std::copy(g2.begin(), g2.end(), g.begin());
  m.step(a, 2, m.lr);
  for (std::size_t i = 0; i < 64; ++i)  // B₂ = 0.9·(0.1·g₁) + 0.1·g₂
    CHECK(a.get(plane::moment1)[i] == Approx(0.9 * 0.1 * g1[i] + 0.1 * g2[i]).margin(1e-6));
}

TEST_CASE("muon on a pool's threads gives the bits of one thread", "[optim][muon]") {
  const nn::gpt model({.vocab = 64, .ctx = 16, .d = 32, .layers = 2, .heads = 2});
  const auto mats = hidden_matrices(model.tensors());
  REQUIRE(mats.size() == 8);  // c_attn, c_proj, c_fc, c_proj per block
  CHECK(mats[0].rows == 96);
  CHECK(mats[0].cols == 32);
  muon m = muon_for(model, {.lr = 0.02f});
  m.aux.lr = 1e-3f;
  arena<host> one(model.layout()), two(model.layout());
  model.init(one, 1);
  model.init(two, 1);
  const auto g = gaussian(model.layout().total(), 9);
  thread_pool p1(1), p2(2);
  for (long t = 1; t <= 3; ++t) {
    std::copy(g.begin(), g.end(), one.get(plane::grad).begin());
    std::copy(g.begin(), g.end(), two.get(plane::grad).begin());
    m.step(one, t, 1e-3f, p1);
    step_on(p2, one_of<adamw, muon>(m), two, t, 1e-3f);
  }
  const auto x = one.get(plane::param), y = two.get(plane::param);
  CHECK(std::equal(x.begin(), x.end(), y.begin()));
}

TEST_CASE("one_of<adamw, muon> holding adamw steps as adamw does", "[optim][muon]") {
  param_layout layout;
  layout.add("all", 100);
  arena<host> a(layout), b(layout);
  const auto th = gaussian(layout.total(), 4), g = gaussian(layout.total(), 5);
  for (arena<host>* x : {&a, &b}) {
    std::copy(th.begin(), th.end(), x->get(plane::param).begin());
    std::copy(g.begin(), g.end(), x->get(plane::grad).begin());
  }
  const adamw o{.lr = 1e-2f};
  thread_pool p2(2);
  o.step(a, 1, 1e-2f);
  step_on(p2, one_of<adamw, muon>(o), b, 1, 1e-2f);
  const auto x = a.get(plane::param), y = b.get(plane::param);
  CHECK(std::equal(x.begin(), x.end(), y.begin()));
  CHECK(!one_of<adamw, muon>(muon{.ns_steps = 0}).validate().ok());
}
