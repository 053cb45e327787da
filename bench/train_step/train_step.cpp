// paco's GPT training step (forward + backward + AdamW) in tokens/second for one configuration.
// Prints one line: "tok_s <median> step_ms <median> params <n> flops_per_token <f> backend <b>".
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include <CLI/CLI.hpp>

#include "paco/nn/nn.hpp"
#include "paco/optim/optim.hpp"

int main(int argc, char** argv) {
  CLI::App app{"paco GPT training-step benchmark"};
  int d = 128, ctx = 128, layers = 4, heads = 4, batch = 16, threads = 1, steps = 10, warmup = 2;
  app.add_option("--d", d);
  app.add_option("--ctx", ctx);
  app.add_option("--layers", layers);
  app.add_option("--heads", heads);
  app.add_option("--batch", batch);
  app.add_option("--threads", threads);
  app.add_option("--steps", steps);
  app.add_option("--warmup", warmup);
  CLI11_PARSE(app, argc, argv);

  using namespace paco;
  nn::gpt model({.vocab = 256, .ctx = ctx, .d = d, .layers = layers, .heads = heads});
  arena<host> a(model.layout());
  model.init(a, 1);
  nn::replica<nn::gpt> rep(model, batch, ctx, threads);
  optim::adamw opt{};
  rng r(3);
  std::vector<std::int32_t> x(std::size_t(batch) * ctx), y(x.size());
  for (auto& v : x) v = std::int32_t(r.below(256));
  for (auto& v : y) v = std::int32_t(r.below(256));
  a.get(plane::moment1);
  a.get(plane::moment2);
  std::vector<double> times;
  for (int s = 0; s < warmup + steps; ++s) {
    auto t0 = std::chrono::steady_clock::now();
    rep.forward_backward(a, x.data(), y.data());
    auto th = a.get(plane::param);
    float* g = a.get(plane::grad).data();
    float* m = a.get(plane::moment1).data();
    float* v = a.get(plane::moment2).data();
    rep.for_chunks(th.size(), [&](std::size_t b, std::size_t e) {
      opt.step(th.data() + b, g + b, m + b, v + b, e - b, s + 1, opt.lr);
    });
    double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (s >= warmup) times.push_back(sec);
  }
  std::sort(times.begin(), times.end());
  double med = times[times.size() / 2];
  std::printf("tok_s %.1f step_ms %.2f params %zu flops_per_token %.1f backend %s\n",
              double(batch) * ctx / med, med * 1e3, model.param_count(),
              model.train_flops_per_token(ctx), nn::gemm_backend());
}
