#pragma once
// check_module: the gradient checker shipped with paco (dlib's test_layer, for pure modules).
// For a module m, batch shape d and element type T it checks:
//   1. forward writes every output: y and the cache are filled with NaN first, y must be finite;
//   2. backward accumulates: running backward onto dx, dθ pre-filled with c gives c + (result
//      from zero) exactly;
//   3. central differences of f(θ, x) = Σ y ⊙ w (w random) match dθ and dx.
// Usable on any Module, including user-composed ones.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "paco/core/rng.hpp"
#include "paco/nn/concepts.hpp"

namespace paco::testing {

struct check_options {
  double step = 0;           // finite-difference step; 0 = 1e-2 for float, 1e-5 for double
  std::size_t samples = 64;  // coordinates of θ and of x checked (all if fewer)
  std::uint64_t seed = 1;
  double input_scale = 1.0;  // std of random inputs
  int vocab = 0;             // token-id range for token inputs; 0 = the module's V (else 2)
};

struct check_report {
  bool forward_writes_all = false;
  bool backward_accumulates = false;
  double max_err_theta = 0;  // max |fd − analytic| / max(1, |fd|, |analytic|)
  double max_err_x = 0;
  std::string detail;  // where the worst error was
};

template <class T, nn::Module M>
check_report check_module(const M& m, nn::dims d, check_options o = {}) {
  using X = nn::input_t<M, T>;
  constexpr bool tokens = nn::takes_tokens_v<M>;
  const double h = o.step > 0 ? o.step : (std::is_same_v<T, float> ? 1e-2 : 1e-5);
  rng r(o.seed);
  const std::size_t N = d.rows(), P = m.param_count();
  const std::size_t nx = N * (tokens ? 1 : m.in_width()), ny = N * m.out_width();
  std::vector<T> theta(P), dy(ny), y(ny), cache(m.cache_size(d));
  std::vector<X> x(nx);
  m.init(theta.data(), r);
  for (auto& t : theta) t += T(0.1 * r.normal());  // break symmetric inits (LN γ=1, β=0)
  if constexpr (tokens) {
    int V = o.vocab;
    if constexpr (requires { m.V; })
      if (V == 0) V = m.V;
    for (auto& v : x) v = X(r.below(std::uint64_t(std::max(2, V))));
  } else {
    for (auto& v : x) v = T(o.input_scale * r.normal());
  }
  for (auto& v : dy) v = T(r.normal());
  nn::context ctx;
  ctx.reserve(m.scratch_bytes(d) + 4096);

  check_report rep;
  const T nan = std::numeric_limits<T>::quiet_NaN();
  std::fill(y.begin(), y.end(), nan);
  std::fill(cache.begin(), cache.end(), nan);
  m.forward(theta.data(), x.data(), y.data(), cache.data(), d, ctx);
  rep.forward_writes_all = std::all_of(y.begin(), y.end(), [](T v) { return std::isfinite(v); });

  // Analytic gradients from zero and from c.
  std::vector<T> dth0(P, T(0)), dx0(tokens ? 0 : nx, T(0));
  m.backward(theta.data(), x.data(), dy.data(), tokens ? nullptr : dx0.data(), dth0.data(),
             cache.data(), d, ctx);
  const T c = T(0.5);
  std::vector<T> dth1(P, c), dx1(tokens ? 0 : nx, c);
  m.backward(theta.data(), x.data(), dy.data(), tokens ? nullptr : dx1.data(), dth1.data(),
             cache.data(), d, ctx);
  rep.backward_accumulates = true;
  const double acc_tol = std::is_same_v<T, float> ? 1e-5 : 1e-12;
  for (std::size_t i = 0; i < P; ++i)
    if (std::abs(double(dth1[i]) - double(c) - double(dth0[i])) > acc_tol * (1 + std::abs(dth0[i])))
      rep.backward_accumulates = false;
  for (std::size_t i = 0; i < dx0.size(); ++i)
    if (std::abs(double(dx1[i]) - double(c) - double(dx0[i])) > acc_tol * (1 + std::abs(dx0[i])))
      rep.backward_accumulates = false;

  auto f = [&]() {
    std::vector<T> yy(ny), cc(cache.size());
    m.forward(theta.data(), x.data(), yy.data(), cc.data(), d, ctx);
    double s = 0;
    for (std::size_t i = 0; i < ny; ++i) s += double(yy[i]) * double(dy[i]);
    return s;
  };
  auto pick = [&](std::size_t n) {
    std::vector<std::size_t> idx;
    if (n <= o.samples) {
      for (std::size_t i = 0; i < n; ++i) idx.push_back(i);
    } else {
      for (std::size_t k = 0; k < o.samples; ++k) idx.push_back(r.below(n));
    }
    return idx;
  };
  auto check = [&](auto& vec, const std::vector<T>& grad, double& worst, const char* what) {
    for (std::size_t i : pick(vec.size())) {
      const T keep = vec[i];
      vec[i] = T(double(keep) + h);
      const double fp = f();
      vec[i] = T(double(keep) - h);
      const double fm = f();
      vec[i] = keep;
      const double fd = (fp - fm) / (2 * h);
      const double an = grad[i];
      const double err = std::abs(fd - an) / std::max({1.0, std::abs(fd), std::abs(an)});
      if (err > worst) {
        worst = err;
        rep.detail = std::string(what) + "[" + std::to_string(i) + "] fd=" + std::to_string(fd) +
                     " analytic=" + std::to_string(an);
      }
    }
  };
  check(theta, dth0, rep.max_err_theta, "theta");
  if constexpr (!tokens) check(x, dx0, rep.max_err_x, "x");
  return rep;
}

}  // namespace paco::testing
