// train/dense_run.hpp and train/base_model.hpp: a dense run is the inner loop from zeroed
// moments; the base model is pretrained once, then loaded only for its own configuration.
#include <catch2/catch.hpp>

#include <filesystem>

#include "paco/nn/gpt.hpp"
#include "paco/optim/optim.hpp"
#include "paco/testing/token_streams.hpp"
#include "paco/train/base_model.hpp"
#include "paco/train/dense_run.hpp"

using namespace paco;

namespace {
const train::inner_config cfg{.batch = 2,
                              .ctx = 16,
                              .grad_clip = 1.0f,
                              .schedule = {.lr = 1e-2f, .min_lr = 1e-3f, .warmup = 2, .total = 12}};
}

TEST_CASE("dense_run: the inner loop from zeroed moments; the curve of every n steps",
          "[train][dense_run]") {
  nn::gpt model({.vocab = 64, .ctx = 16, .d = 16, .layers = 1, .heads = 2});
  const auto s = testing::synthetic_stream(1, 3000, 5, 4);
  arena<host> a(model.layout()), b(model.layout());
  model.init(a, 3);
  model.init(b, 3);
  a.get(plane::moment1)[0] = 7.0f;  // stale moments are cleared
  const optim::adamw opt{.lr = 1e-2f};
  std::vector<double> seen;
  const auto curve =
      train::dense_run(model, a, s, cfg, opt, 12, 9, 4, [&](long, double l) { seen.push_back(l); });
  train::inner_loop<nn::gpt, optim::adamw> loop(model, cfg, s, 9);
  std::vector<double> by_hand;
  loop.run(b, opt, 12, [&](long, double l) { by_hand.push_back(l); });
  REQUIRE(seen == by_hand);
  REQUIRE(curve == train::window_means(by_hand, 4));
  REQUIRE(curve.size() == 3);
  REQUIRE(std::equal(a.get(plane::param).begin(), a.get(plane::param).end(),
                     b.get(plane::param).begin()));
}

TEST_CASE("load_or_pretrain: pretrains and saves, loads its own key, replaces another's",
          "[train][base_model]") {
  nn::gpt model({.vocab = 64, .ctx = 16, .d = 16, .layers = 1, .heads = 2});
  const auto s = testing::synthetic_stream(2, 3000, 5, 4);
  const auto file = std::filesystem::temp_directory_path() / "paco_test_base_model.safetensors";
  std::filesystem::remove(file);
  int pretrained = 0;
  auto pretrain = [&](arena<host>& a) {
    ++pretrained;
    train::dense_run(model, a, s, cfg, optim::adamw{.lr = 1e-2f}, 6, 5);
  };
  auto params = [](arena<host>& a) {
    return std::vector<float>(a.get(plane::param).begin(), a.get(plane::param).end());
  };

  arena<host> none(model.layout());  // no file: pretrain, nothing saved
  auto b0 = train::load_or_pretrain(model, none, {}, 3, pretrain);
  REQUIRE(b0.origin == train::base_origin::pretrained);
  REQUIRE(b0.saved.ok());
  REQUIRE(pretrained == 1);

  arena<host> first(model.layout());
  auto b1 =
      train::load_or_pretrain(model, first, {.file = file, .key = "k1", .step = 6}, 3, pretrain);
  REQUIRE(b1.origin == train::base_origin::pretrained);
  REQUIRE(b1.saved.ok());
  REQUIRE(pretrained == 2);
  REQUIRE(std::filesystem::exists(file));
  REQUIRE(params(first) == params(none));  // init(seed) then pretrain, file or not

  arena<host> again(model.layout());
  auto b2 =
      train::load_or_pretrain(model, again, {.file = file, .key = "k1", .step = 6}, 3, pretrain);
  REQUIRE(b2.origin == train::base_origin::loaded);
  REQUIRE(pretrained == 2);
  REQUIRE(params(again) == params(first));

  arena<host> other(model.layout());
  auto b3 =
      train::load_or_pretrain(model, other, {.file = file, .key = "k2", .step = 6}, 3, pretrain);
  REQUIRE(b3.origin == train::base_origin::replaced);
  REQUIRE(pretrained == 3);
  REQUIRE(params(other) == params(first));
  arena<host> k2(model.layout());  // the file now holds k2's model
  REQUIRE(train::load_or_pretrain(model, k2, {.file = file, .key = "k2"}, 3, pretrain).origin ==
          train::base_origin::loaded);
  std::filesystem::remove(file);
}
