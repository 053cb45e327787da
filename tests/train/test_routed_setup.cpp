// train/routed_setup.hpp: the shared setup of a routed comparison equals its pieces called by
// hand; base_key; the one-line reports of routing.hpp and routed_training.hpp.
#include <catch2/catch.hpp>

#include <cstdio>
#include <filesystem>
#include <random>
#include <string>

#include "paco/nn/gpt.hpp"
#include "paco/optim/optim.hpp"
#include "paco/train/dense_run.hpp"
#include "paco/train/routed_setup.hpp"
#include "paco/train/routed_training.hpp"

using namespace paco;

namespace {
const nn::gpt_config routed_setup_cfg{.vocab = 256, .ctx = 16, .d = 16, .layers = 1, .heads = 2};

// 60 documents of 40 to 199 bytes over two alphabets (domains "lo" and "hi").
io::corpus small_corpus() {
  io::corpus c;
  std::mt19937 g(5);
  for (int i = 0; i < 60; ++i) {
    const char base = i % 2 ? 'a' : 'M';
    std::string t(40 + std::size_t(g() % 160), ' ');
    for (auto& ch : t) ch = char(base + int(g() % 8));
    c.docs.push_back({"doc" + std::to_string(i), '?', t, i % 2 ? "lo" : "hi"});
  }
  return c;
}

std::string read_all(std::FILE* f) {
  std::rewind(f);
  std::string s;
  for (int ch; (ch = std::fgetc(f)) != EOF;) s += char(ch);
  return s;
}

const train::routed_setup_config cfg{.router_bytes = 16, .prefix = 8, .k = 2, .overlap = 2};
}  // namespace

TEST_CASE("make_routed_setup: documents, θ0, features, k-means router and shards by hand",
          "[train][routed_setup]") {
  const nn::gpt model(routed_setup_cfg);
  const auto c = small_corpus();
  REQUIRE(io::check_splits(c).ok());
  int pretrained = 0;
  const train::pretrain_fn pretrain = [&](arena<host>& a, const io::token_stream& s) {
    ++pretrained;
    train::dense_run(model, a, s, {.batch = 2, .ctx = 16}, optim::adamw{.lr = 1e-2f}, 3, 9);
  };
  auto made = train::make_routed_setup(model, c, io::split::validation, cfg, pretrain);
  REQUIRE(made.ok());
  REQUIRE(pretrained == 1);
  const train::routed_setup s = std::move(made).value();  // spans survive the move

  // Documents: the train split with tails held out; the evaluation split whole.
  const auto train = train::hold_out_tails(c.subset(io::split::train), 16);
  REQUIRE(s.train.tokens == train.tokens);
  REQUIRE(s.train.cut == train.cut);
  REQUIRE(s.eval.tokens == train::hold_out_tails(c.subset(io::split::validation), 0).tokens);
  REQUIRE(s.eval.cut.size() == s.eval.size());
  std::size_t trained_tokens = 0;
  for (std::size_t i = 0; i < s.train.size(); ++i) trained_tokens += s.train.cut[i];
  REQUIRE(s.train_stream.ids.size() == trained_tokens);
  REQUIRE(s.docs.size() == s.train.size());
  REQUIRE(s.docs.train[0].data() == s.train.tokens[0].data());

  // θ0: init(seed) then the pretraining, as load_or_pretrain gives it without a file.
  arena<host> a(model.layout());
  train::load_or_pretrain(model, a, {}, cfg.seed,
                          [&](arena<host>& b) { pretrain(b, s.train_stream); });
  REQUIRE(s.base.origin == train::base_origin::pretrained);
  REQUIRE(s.theta0 == std::vector<float>(a.get(plane::param).begin(), a.get(plane::param).end()));

  // Features of every training document and of every scored evaluation document.
  REQUIRE(s.dim == routed_setup_cfg.d);
  REQUIRE(s.train_features == route::prefix_features(model, s.theta0.data(), s.train.wholes(), 8));
  REQUIRE(s.docs.features.data() == s.train_features.data());
  const auto scored = route::after_prefix(s.eval.wholes(), 8);
  REQUIRE(s.scored.doc == scored.doc);
  REQUIRE(s.scored.spans.size() == scored.spans.size());
  REQUIRE(s.scored_domain.size() == scored.doc.size());
  std::vector<std::span<const std::int32_t>> seqs;
  for (std::size_t j = 0; j < scored.doc.size(); ++j) {
    REQUIRE(s.scored.spans[j].seq.data() == s.eval.tokens[scored.doc[j]].data());
    REQUIRE(s.scored.spans[j].begin == 8);
    REQUIRE(s.scored_domain[j] == s.eval.domain[scored.doc[j]]);
    seqs.push_back(s.eval.whole(scored.doc[j]));
  }
  REQUIRE(s.eval_features == route::prefix_features(model, s.theta0.data(), seqs, 8));

  // The k-means router, its sets, shards and evaluation routes.
  REQUIRE(s.kmeans.k() == 2);
  std::size_t documents = 0;
  for (std::size_t i = 0; i < s.train.size(); ++i) {
    REQUIRE(s.kmeans_sets[i] == s.kmeans.rank(s.docs.feature(i), 1));
    REQUIRE(s.kmeans_top[i] == s.kmeans.rank(s.docs.feature(i), 2));
  }
  const auto shards = train::shards_of(s.docs, s.kmeans_sets, 2);
  for (int p = 0; p < 2; ++p) {
    REQUIRE(s.kmeans_shards[std::size_t(p)].ids == shards[std::size_t(p)].ids);
    documents += s.kmeans_documents(p);
  }
  REQUIRE(documents == s.train.size());
  for (std::size_t j = 0; j < s.kmeans_routes.size(); ++j)
    REQUIRE(s.kmeans_routes[j] == s.kmeans.route(&s.eval_features[j * 16]));
  REQUIRE(s.kmeans_routes.size() == s.scored.spans.size());

  // The reports.
  std::FILE* f = std::tmpfile();
  s.print_documents(f, "small", "validation");
  s.print_kmeans_shards(f);
  char want[512];
  std::snprintf(want, sizeof want,
                "small: %zu training documents (%.2f MB for training, %.2f MB held out for the "
                "router), %zu validation documents\nk-means shards (documents / MB): 0: %zu / "
                "%.2f 1: %zu / %.2f\n",
                s.train.size(), trained_tokens / 1e6, s.train.tail_tokens() / 1e6, s.eval.size(),
                s.kmeans_documents(0), shards[0].ids.size() / 1e6, s.kmeans_documents(1),
                shards[1].ids.size() / 1e6);
  REQUIRE(read_all(f) == want);
  std::fclose(f);
}

TEST_CASE("make_routed_setup: the base model's cache; errors of the splits and of k-means",
          "[train][routed_setup]") {
  const nn::gpt model(routed_setup_cfg);
  const auto c = small_corpus();
  int pretrained = 0;
  auto pretrain = [&](arena<host>& a, const io::token_stream& s) {
    ++pretrained;
    train::dense_run(model, a, s, {.batch = 2, .ctx = 16}, optim::adamw{.lr = 1e-2f}, 2, 9);
  };
  const auto file = std::filesystem::temp_directory_path() / "paco_test_routed_setup.safetensors";
  std::filesystem::remove(file);
  auto with_file = cfg;
  with_file.base = {.file = file, .key = train::base_key(std::string("small"), 16, 2.5f)};
  REQUIRE(with_file.base.key == "small/16/2.500000");
  auto first = train::make_routed_setup(model, c, io::split::test, with_file, pretrain);
  REQUIRE(first.ok());
  REQUIRE(first->base.origin == train::base_origin::pretrained);
  REQUIRE(first->base.saved.ok());
  auto again = train::make_routed_setup(model, c, io::split::test, with_file, pretrain);
  REQUIRE(again.ok());
  REQUIRE(pretrained == 1);
  REQUIRE(again->base.origin == train::base_origin::loaded);
  REQUIRE(again->theta0 == first->theta0);
  REQUIRE(again->kmeans_sets == first->kmeans_sets);
  std::FILE* f = std::tmpfile();
  train::print_base_origin(f, first->base, "b.st");  // pretrained without a file to read
  train::print_base_origin(f, again->base, "b.st");
  train::print_base_origin(f, {.origin = train::base_origin::replaced}, "b.st");
  REQUIRE(read_all(f) ==
          "base model loaded from b.st\n"
          "b.st does not hold this configuration's base model; pretraining\n");
  std::fclose(f);
  std::filesystem::remove(file);

  auto too_many = cfg;
  too_many.k = int(c.subset(io::split::train).docs.size()) + 1;
  REQUIRE(!train::make_routed_setup(model, c, io::split::test, too_many, pretrain).ok());
  io::corpus one;
  one.docs.push_back(c.docs[0]);
  const auto e = train::make_routed_setup(model, one, io::split::test, cfg, pretrain);
  REQUIRE(!e.ok());
  REQUIRE(e.error().what().find("split") != std::string::npos);
}

TEST_CASE("base_key: strings as they are, numbers by std::to_string, joined by '/'",
          "[train][base_model]") {
  REQUIRE(train::base_key(std::string("a:"), 1, 2.5f) == "a:/1/2.500000");
  REQUIRE(train::base_key(std::string("brown:"), std::uint64_t(7), std::string()) == "brown:/7/");
  REQUIRE(train::base_key() == "");
}

TEST_CASE("print_rerouting and print_early_stopping: one line each", "[train][routed]") {
  std::FILE* f = std::tmpfile();
  train::rerouting r;
  r.moved = 3;
  std::vector<io::token_stream> shards(2);
  shards[0].ids.resize(1'500'000);
  shards[1].ids.resize(20'000);
  train::print_rerouting(f, "moe", 2, 7, r, 10, shards);
  train::routed_paths p;
  train::print_early_stopping(f, "moe", p);  // no early stopping: nothing
  p.best_round = {4, 9};
  p.best_bits = {3.25, 3.5};
  train::print_early_stopping(f, "moe", p);
  REQUIRE(read_all(f) ==
          "moe: re-routing 2 at round 7: 3 of 10 training documents changed path; shards (MB): "
          "1.50 0.02\n"
          "moe: early stopping kept each path's parameters of round (held-out bpb): 5 (3.2500) "
          "10 (3.5000)\n");
  std::fclose(f);
}
