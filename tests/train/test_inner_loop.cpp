// train/inner_loop.hpp: the one inner loop against the loop written out by hand.
#include <catch2/catch.hpp>

#include "paco/nn/gpt.hpp"
#include "paco/optim/optim.hpp"
#include "paco/testing/token_streams.hpp"
#include "paco/train/inner_loop.hpp"

#include "small_gpt.hpp"

using namespace paco;

TEST_CASE("inner_loop: sample, forward_backward, clip, step at the schedule's lr, bit for bit",
          "[train][inner_loop]") {
  nn::gpt model(train_tests::small_gpt());
  const auto shard = testing::synthetic_stream(3, 5000, 7, 5);
  const train::inner_config cfg{
      .batch = 3,
      .ctx = 16,
      .steps = 5,
      .grad_clip = 0.5f,
      .schedule = {.lr = 1e-2f, .min_lr = 1e-3f, .warmup = 2, .total = 12},
      .threads = 2};
  const optim::adamw opt{.lr = 1e-2f};
  arena<host> a(model.layout()), b(model.layout());
  model.init(a, 4);
  model.init(b, 4);
  // The loop under test, in two runs (its step count and sampler stream carry on).
  train::inner_loop<nn::gpt, optim::adamw> loop(model, cfg, shard, 11);
  std::vector<long> seen;
  const double l1 = loop.run(a, opt, 5, [&](long t, double) { seen.push_back(t); });
  loop.run(a, opt, 7);
  REQUIRE(loop.step_count() == 12);
  REQUIRE(seen == std::vector<long>{1, 2, 3, 4, 5});
  // By hand: the same replica threads, the whole-arena optimizer step.
  nn::replica<nn::gpt> rep(model, 3, 16, 2);
  io::batch_sampler smp(shard, 3, 16, 11);
  std::vector<std::int32_t> x(48), y(48);
  double sum = 0;
  for (long t = 1; t <= 12; ++t) {
    smp.next(x.data(), y.data());
    const double l = rep.forward_backward(b, x.data(), y.data());
    if (t <= 5) sum += l;
    auto g = b.get(plane::grad);
    optim::clip_grad_norm(g.data(), g.size(), 0.5f);
    opt.step(b, t, cfg.schedule.lr_at(t));
  }
  REQUIRE(l1 == Approx(sum / 5).epsilon(1e-12));
  const auto pa = a.get(plane::param), pb = b.get(plane::param);
  REQUIRE(std::equal(pa.begin(), pa.end(), pb.begin()));  // chunked step == whole-arena step
  const auto ma = a.get(plane::moment2), mb = b.get(plane::moment2);
  REQUIRE(std::equal(ma.begin(), ma.end(), mb.begin()));
}

TEST_CASE("inner_loop: rebind carries the random stream on; a resumed loop continues the schedule",
          "[train][inner_loop]") {
  nn::gpt model(train_tests::small_gpt());
  const auto s1 = testing::synthetic_stream(5, 4000, 3, 2);
  const auto s2 = testing::synthetic_stream(6, 4000, 5, 3);
  const train::inner_config cfg{
      .batch = 2,
      .ctx = 16,
      .grad_clip = 0,
      .schedule = {.lr = 1e-2f, .min_lr = 1e-4f, .warmup = 0, .total = 10}};
  const optim::sgd opt{.lr = 1e-2f};
  arena<host> a(model.layout()), b(model.layout());
  model.init(a, 1);
  model.init(b, 1);
  // 4 steps on s1, then 6 on s2, by the loop and by hand (a sampler rebound the same way).
  train::inner_loop<nn::gpt, optim::sgd> loop(model, cfg, s1, 9);
  loop.run(a, opt, 4);
  loop.rebind(s2);
  loop.run(a, opt, 6);
  nn::replica<nn::gpt> rep(model, 2, 16, 1);
  io::batch_sampler smp(s1, 2, 16, 9);
  std::vector<std::int32_t> x(32), y(32);
  for (long t = 1; t <= 10; ++t) {
    if (t == 5) smp.rebind(s2);
    smp.next(x.data(), y.data());
    rep.forward_backward(b, x.data(), y.data());
    opt.step(b, t, cfg.schedule.lr_at(t));
  }
  auto pa = a.get(plane::param), pb = b.get(plane::param);
  REQUIRE(std::equal(pa.begin(), pa.end(), pb.begin()));
  // A loop resumed at step 7 takes its next step at the schedule's lr of step 8.
  auto c7 = cfg;
  c7.start_step = 7;
  train::inner_loop<nn::gpt, optim::sgd> resumed(model, c7, s2, 21);
  REQUIRE(resumed.step_count() == 7);
  resumed.run(a, opt, 1);
  io::batch_sampler fresh(s2, 2, 16, 21);
  fresh.next(x.data(), y.data());
  rep.forward_backward(b, x.data(), y.data());
  opt.step(b, 8, cfg.schedule.lr_at(8));
  REQUIRE(resumed.step_count() == 8);
  pa = a.get(plane::param);
  pb = b.get(plane::param);
  REQUIRE(std::equal(pa.begin(), pa.end(), pb.begin()));
}
