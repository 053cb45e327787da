// A project outside paco's tree, built against an installed paco.
#include <cstdio>
#include <vector>

#include <paco/core/core.hpp>
#include <paco/nn/nn.hpp>
#include <paco/optim/optim.hpp>

int main() {
  paco::nn::gpt model({.vocab = 32, .ctx = 8, .d = 16, .layers = 1, .heads = 2});
  paco::arena<paco::host> a(model.layout());
  model.init(a, 1);
  paco::nn::replica<paco::nn::gpt> rep(model, 2, 8, 1);
  std::vector<std::int32_t> x(16, 3), y(16, 4);
  double l0 = rep.forward_backward(a, x.data(), y.data());
  paco::optim::adamw opt{.lr = 1e-2f};
  for (int t = 1; t <= 20; ++t) {
    rep.forward_backward(a, x.data(), y.data());
    opt.step(a, t, opt.lr);
  }
  double l1 = rep.loss(a, x.data(), y.data());
  std::printf("loss %.3f -> %.3f\n", l0, l1);
  return l1 < l0 ? 0 : 1;
}
