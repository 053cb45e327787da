// train/routing.hpp: shards from path sets, the re-routing schedule, discriminative re-routing.
#include <catch2/catch.hpp>

#include "paco/nn/gpt.hpp"
#include "paco/optim/optim.hpp"
#include "paco/testing/token_streams.hpp"
#include "paco/train/inner_loop.hpp"
#include "paco/train/routing.hpp"

using namespace paco;

TEST_CASE("shards_of: each path's shard holds the documents whose set names it, as documents",
          "[train][routing]") {
  const std::vector<std::int32_t> d0{1, 2, 3}, d1{4, 5}, d2{6, 7, 8, 9};
  train::routed_docs docs;
  docs.train = {d0, d1, d2};
  docs.tail = {{}, {}, {}};
  const auto s = train::shards_of(docs, {{0}, {0, 1}, {1}}, 3);
  REQUIRE(s.size() == 3);
  REQUIRE(s[0].ids == std::vector<std::int32_t>{1, 2, 3, 4, 5});
  REQUIRE(s[0].doc_start == std::vector<std::size_t>{0, 3});
  REQUIRE(s[1].ids == std::vector<std::int32_t>{4, 5, 6, 7, 8, 9});
  REQUIRE(s[1].doc_start == std::vector<std::size_t>{0, 2});
  REQUIRE(s[2].ids.empty());
}

TEST_CASE("reroute_phases: a third on the initial shards, then evenly spaced re-routings",
          "[train][routing]") {
  REQUIRE(*train::reroute_phases(20, 4) == std::vector<int>{6, 9, 13, 16, 20});
  REQUIRE(*train::reroute_phases(3, 2) == std::vector<int>{1, 2, 3});
  REQUIRE(*train::reroute_phases(60, 8) == std::vector<int>{20, 25, 30, 35, 40, 45, 50, 55, 60});
  REQUIRE(!train::reroute_phases(20, 0).ok());
  REQUIRE(!train::reroute_phases(20, 15).ok());  // 14 rounds after the first third
  REQUIRE(!train::reroute_phases(2, 1).ok());
  REQUIRE(train::reroute_phases(20, 15).error().message.find("1 to 14") != std::string::npos);
}

TEST_CASE("discriminative_reroute: documents go to the path that predicts their tail best",
          "[train][routing]") {
  // Two paths trained on two kinds of text (strides 7 and 3); documents of both kinds with a
  // one-number feature that separates them (+1, −1). Every document starts on path 0.
  nn::gpt model({.vocab = 64, .ctx = 16, .d = 16, .layers = 1, .heads = 2});
  std::vector<std::vector<float>> th;
  for (std::uint64_t stride : {7u, 3u}) {
    arena<host> a(model.layout());
    model.init(a, 1);
    const auto s = testing::synthetic_stream(stride, 6000, stride, 2);
    train::inner_loop<nn::gpt, optim::adamw> loop(
        model,
        {.batch = 8,
         .ctx = 16,
         .schedule = {.lr = 1e-2f, .min_lr = 1e-2f, .warmup = 0, .total = 80}},
        s, 3);
    loop.run(a, optim::adamw{.lr = 1e-2f}, 80);
    th.emplace_back(a.get(plane::param).begin(), a.get(plane::param).end());
  }
  std::vector<io::token_stream> text;
  for (std::uint64_t i = 0; i < 6; ++i) {
    const std::uint64_t stride = i < 3 ? 7 : 3;
    text.push_back(testing::synthetic_stream(100 + i, 300, stride, 2));
  }
  train::routed_docs docs;
  std::vector<float> feat;
  for (std::size_t i = 0; i < 6; ++i) {
    docs.train.push_back(std::span<const std::int32_t>(text[i].ids).first(200));
    docs.tail.push_back(std::span<const std::int32_t>(text[i].ids).subspan(200));
    feat.push_back(i < 3 ? 1.0f : -1.0f);
  }
  docs.tail[5] = {};  // no tail: keeps its previous path as its label
  docs.features = feat;
  docs.dim = 1;
  const std::vector<const float*> ptr{th[0].data(), th[1].data()};
  auto ws = model.make_workspace({4, 16});
  const auto rule = *route::sliding_window::make(16);
  auto r = train::discriminative_reroute(model, ptr, docs, std::vector<int>(6, 0), rule, ws,
                                         {.overlap = 2});
  REQUIRE(r.ok());
  REQUIRE(r->labels == std::vector<int>{0, 0, 0, 1, 1, 0});
  for (std::size_t i = 0; i < 6; ++i) {
    REQUIRE(r->sets[i].size() == 2);
    REQUIRE(r->sets[i][0] != r->sets[i][1]);
    REQUIRE(r->sets[i][0] == r->router.route(docs.feature(i)));
  }
  // The router follows the labels where the features allow it: the first three on path 0, the
  // two labelled documents of the second kind on path 1.
  REQUIRE(r->sets[0][0] == 0);
  REQUIRE(r->sets[3][0] == 1);
  REQUIRE(r->sets[4][0] == 1);
  int moved = 0;
  for (auto& s : r->sets) moved += s[0] != 0;
  REQUIRE(r->moved == moved);
  REQUIRE(!train::discriminative_reroute(model, ptr, docs, std::vector<int>(6, 0), rule, ws,
                                         {.overlap = 3})
               .ok());
}
