// bench/run dipaco_table (Brown) and bench/run dipaco_mix (the multi-domain corpus): the DiPaCo
// paper's Table 1 at our scale.
//
// Every row starts from the same briefly pretrained base model (also the router's frozen feature
// extractor), uses the same per-path model, the same inner loop and steps per worker, and is
// scored by the one scorer (route/evaluate.hpp: sliding windows of ctx with stride S, the same
// context for every token of every row) on the held-out TEST documents (--split validation for
// the validation documents; nothing is chosen on either): each document is routed by its first
// `prefix` bytes and the chosen path scores the rest. Every multi-worker row is evaluated with the
// store's parameters after its final outer step. Rows:
//   dense          one worker, S steps on all training documents
//   dense_4x       one worker, 4·S steps
//   diloco_p4      DiLoCo, 4 workers on k-means shards, S steps each (H per round)
//   moe_p4         flat MoE: 4 independent paths on k-means shards, routed by k-means
//   moe_p4_routed  flat MoE with DiPaCo's routing: top-n overlapping shards, then --reroutes
//                  discriminative re-routings; routed by the logistic router
//   dipaco_2x2     DiPaCo, 2 levels × 2 experts, the same routing as moe_p4_routed
// and for each routed model (moe_p4_routed, dipaco_2x2) three more evaluations of the same
// parameters: _prefix_lik (routed by which path best predicts the prefix), _reroute64 (re-routed
// every 64 bytes by the logistic router on the previous chunk), _reroute64_lik (… by which path
// predicted the previous chunk best).
// Diagnostics (JSON "diagnostics"): tokens per path, the path × domain routing matrix and each
// path's bits/byte on each domain's documents (do paths specialise?), the oracle best-path bound,
// and each row's learning curve (mean inner training loss every 10 rounds).
// bytes_sent: bytes each worker pushed; dp_bytes: what a ring all-reduce data-parallel run with
// the same workers and steps would have sent per worker.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <numeric>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "paco/io/io.hpp"
#include "paco/nn/nn.hpp"
#include "paco/optim/optim.hpp"
#include "paco/outer/outer.hpp"
#include "paco/path/level_map.hpp"
#include "paco/path/module_grid.hpp"
#include "paco/path/path_plan.hpp"
#include "paco/route/route.hpp"
#include "paco/route/specialisation.hpp"
#include "paco/sync/dipaco_local.hpp"
#include "paco/train/inner_loop.hpp"
#include "paco/train/local_trainer.hpp"
#include "paco/train/routing.hpp"

using namespace paco;
using clk = std::chrono::steady_clock;
using json = nlohmann::ordered_json;  // keys in the order written: bench, split, rows, …

namespace {

struct options {
  std::string bench = "dipaco_table";
  std::string corpus = "brown", data;  // data: the corpus directory (default: Brown's)
  std::string split = "test";          // the documents every row is reported on
  int d = 64, ctx = 128, layers = 2, heads = 4, batch = 16;
  int steps = 2000;     // S: inner steps per worker (sized so a table runs in < 40 min on 2 cores)
  int inner = 100;      // H: inner steps per round
  int pretrain = 3000;  // base model steps (shared by every row)
  int threads = 2;
  int stride = 0;   // the scorer's stride S (0: ctx / 2)
  int prefix = 32;  // routing prefix (bytes)
  int overlap = 2;  // routed rows train each path on the documents ranking it in their top n
  int router_bytes = 1024;               // tail of each training document held out as router data
  float lr = 2e-3f, min_lr = 2e-4f;      // base model schedule
  float row_lr = 1e-3f, row_min_lr = 0;  // every row's schedule after the base (0: 0.1·peak)
  std::string rows = "dense,dense_4x,diloco_p4,moe_p4,moe_p4_routed,dipaco_2x2";
  std::string base_file;              // cache of the base model (loaded if it matches)
  std::string path_rescale = "none";  // routed rows' outer-gradient rescale (outer/delta.hpp)
  float outer_lr = 0.7f, outer_momentum = 0.9f;  // outer Nesterov of every multi-worker row
  int reroutes = 4;  // discriminative re-routings over the rounds after the k-means third
  std::uint64_t seed = 1;
  bool wants(std::string_view r) const {
    std::string_view s = rows;
    while (!s.empty()) {
      const auto c = s.find(',');
      if (s.substr(0, c) == r) return true;
      s = c == std::string_view::npos ? std::string_view{} : s.substr(c + 1);
    }
    return false;
  }
};

double secs(clk::time_point t0) {
  return std::chrono::duration<double>(clk::now() - t0).count();
}

struct doc {
  std::string domain;
  std::vector<std::int32_t> train;   // the part used for training shards
  std::vector<std::int32_t> router;  // held-out tail (router data)
  std::vector<std::int32_t> all;
};

// Dense training: n AdamW steps of the inner loop from θ (in place) on the stream; the mean loss
// of every 1000 steps.
std::vector<double> train_dense(const nn::gpt& m, arena<host>& a, const io::token_stream& s, int n,
                                const options& o, float lr, float min_lr, std::uint64_t seed,
                                const char* label) {
  train::inner_loop<nn::gpt, optim::adamw> loop(
      m,
      {.batch = o.batch,
       .ctx = o.ctx,
       .grad_clip = 1.0f,
       .schedule = {.lr = lr, .min_lr = min_lr, .warmup = 50, .total = n},
       .threads = o.threads},
      s, seed);
  a.zero(plane::moment1);
  a.zero(plane::moment2);
  io::progress bar(label, n);
  std::vector<double> curve;
  double ema = NAN, window = 0;
  loop.run(a, optim::adamw{.lr = lr}, n, [&](long t, double l) {
    ema = std::isnan(ema) ? l : 0.98 * ema + 0.02 * l;
    window += l;
    if (t % 1000 == 0) curve.push_back(window / 1000), window = 0;
    char txt[64];
    std::snprintf(txt, sizeof txt, "loss %.3f", ema);
    bar.update(t, txt);
  });
  return curve;
}

struct row {
  std::string name;
  double bpb = 0, bytes_sent = 0, dp_bytes = 0, wall_s = 0;
  std::size_t params_total = 0;
  std::vector<double> curve;  // mean training loss (nats/byte) every 1000 inner steps per worker
};

double round4(double x) {
  return std::round(x * 1e4) / 1e4;
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  options o;
  CLI::App app{"DiPaCo Table 1 at our scale"};
  app.add_option("--bench", o.bench, "name in the JSON line (dipaco_table, dipaco_mix)");
  app.add_option("--corpus", o.corpus, "brown, or files (a directory of text files: --data)")
      ->check(CLI::IsMember({"brown", "files"}));
  app.add_option("--data", o.data, "the corpus directory (default: the Brown cache)");
  app.add_option("--split", o.split, "documents every row is reported on")
      ->check(CLI::IsMember({"test", "validation"}));
  app.add_option("--steps", o.steps, "inner steps per worker (S)");
  app.add_option("--inner", o.inner, "inner steps per round (H)");
  app.add_option("--pretrain", o.pretrain, "steps of the shared base model");
  app.add_option("--d", o.d);
  app.add_option("--ctx", o.ctx);
  app.add_option("--layers", o.layers);
  app.add_option("--batch", o.batch);
  app.add_option("--threads", o.threads);
  app.add_option("--stride", o.stride, "the scorer's stride S in [1, ctx] (0: ctx/2)");
  app.add_option("--lr", o.lr, "peak AdamW lr of the base model");
  app.add_option("--row-lr", o.row_lr, "peak AdamW lr of every row after the base");
  app.add_option("--row-min-lr", o.row_min_lr, "final lr of every row (default 0.1 x its peak)");
  app.add_option("--rows", o.rows, "comma-separated rows to run");
  app.add_option("--base-file", o.base_file,
                 "checkpoint of the base model: loaded when it exists and matches the "
                 "configuration, else written after pretraining");
  app.add_option("--prefix", o.prefix, "routing prefix in bytes (scoring starts after it)");
  app.add_option("--overlap", o.overlap,
                 "routed rows: each training document goes to the shards of its top-n paths");
  app.add_option("--seed", o.seed);
  app.add_option("--path-rescale", o.path_rescale,
                 "routed rows: outer gradient of a module × √P (sqrt_paths, the paper's §2.7), "
                 "1/√P (inv_sqrt_paths) or 1 (none), P = paths through the module")
      ->check(CLI::IsMember({"none", "sqrt_paths", "inv_sqrt_paths"}));
  app.add_option("--reroutes", o.reroutes,
                 "routed rows: discriminative re-routings, evenly spaced over the rounds after "
                 "the first third (k-means shards)")
      ->check(CLI::Range(1, 100));
  app.add_option("--outer-lr", o.outer_lr, "outer Nesterov lr of the multi-worker rows");
  app.add_option("--outer-momentum", o.outer_momentum,
                 "outer Nesterov momentum of the multi-worker rows");
  CLI11_PARSE(app, argc, argv);
  if (o.row_lr <= 0) o.row_lr = o.lr;
  if (o.row_min_lr <= 0) o.row_min_lr = 0.1f * o.row_lr;
  if (o.steps % o.inner != 0 || o.steps < 3 * o.inner) {
    std::fprintf(stderr, "%s: --steps must be a multiple of --inner and ≥ 3 rounds\n",
                 o.bench.c_str());
    return 2;
  }
  if (auto p = train::reroute_phases(o.steps / o.inner, o.reroutes); !p) {
    std::fprintf(stderr, "%s: --reroutes: %s\n", o.bench.c_str(), p.error().what().c_str());
    return 2;
  }
  auto rule_or = route::sliding_window::make(o.ctx, o.stride);
  if (!rule_or) {
    std::fprintf(stderr, "%s: --stride: %s\n", o.bench.c_str(), rule_or.error().what().c_str());
    return 2;
  }
  const route::sliding_window rule = *rule_or;
  const auto t_all = clk::now();

  // ---- data: documents split train / validation / test; router data = training doc tails ----
  auto corpus = io::load_corpus(o.corpus, o.data);
  if (corpus)
    if (auto s = io::check_splits(*corpus); !s) corpus = s.error();
  if (!corpus) {
    std::fprintf(stderr, "%s: %s\n", o.bench.c_str(), corpus.error().what().c_str());
    return 2;
  }
  io::byte_tokenizer tok;
  std::vector<doc> train, eval;
  for (auto& d : corpus->subset(io::split::train).docs) {
    doc x;
    x.domain = d.domain;
    x.all = tok.encode(d.text);
    const std::size_t cut = x.all.size() > std::size_t(2 * o.router_bytes)
                                ? x.all.size() - std::size_t(o.router_bytes)
                                : x.all.size();
    x.train.assign(x.all.begin(), x.all.begin() + std::ptrdiff_t(cut));
    x.router.assign(x.all.begin() + std::ptrdiff_t(cut), x.all.end());
    train.push_back(std::move(x));
  }
  const auto eval_split = o.split == "test" ? io::split::test : io::split::validation;
  for (auto& d : corpus->subset(eval_split).docs)
    eval.push_back({d.domain, {}, {}, tok.encode(d.text)});
  // Routed training's view of the training documents (train/routing.hpp): the tokens that go
  // into shards, the held-out tails that label them (their prefix features come below).
  train::routed_docs rdocs;
  for (auto& d : train) {
    rdocs.train.push_back(d.train);
    rdocs.tail.push_back(d.router);
  }
  const auto full = train::shards_of(rdocs, std::vector<std::vector<int>>(train.size(), {0}), 1)[0];
  std::printf(
      "%s: %zu training documents (%.2f MB for training, %.2f MB held out for the "
      "router), %zu %s documents\n",
      o.corpus.c_str(), train.size(), full.ids.size() / 1e6,
      std::accumulate(train.begin(), train.end(), 0.0,
                      [](double a, const doc& d) { return a + d.router.size(); }) /
          1e6,
      eval.size(), o.split.c_str());

  nn::gpt model({.vocab = 256, .ctx = o.ctx, .d = o.d, .layers = o.layers, .heads = o.heads});
  const std::size_t P = model.param_count();
  std::printf(
      "per-path model: GPT d=%d layers=%d ctx=%d, %.2fM parameters; S=%d inner steps per "
      "worker, H=%d, batch %d; GEMM %s; scorer %s\n",
      o.d, o.layers, o.ctx, P / 1e6, o.steps, o.inner, o.batch, nn::gemm_backend(),
      rule.name().c_str());

  // ---- the shared base model (pretraining, also the router's frozen feature extractor) ----
  arena<host> base(model.layout());
  model.init(base, o.seed);
  const std::string base_key = o.corpus + ":" + o.data + "/" + std::to_string(o.d) + "/" +
                               std::to_string(o.layers) + "/" + std::to_string(o.ctx) + "/" +
                               std::to_string(o.batch) + "/" + std::to_string(o.pretrain) + "/" +
                               std::to_string(o.lr) + "/" + std::to_string(o.seed);
  bool loaded = false;
  if (!o.base_file.empty() && std::filesystem::exists(o.base_file)) {
    auto info = io::load_checkpoint(o.base_file, model.tensors(), base);
    if (info && info->metadata.count("base_key") && info->metadata.at("base_key") == base_key) {
      loaded = true;
      std::printf("base model loaded from %s\n", o.base_file.c_str());
    } else {
      model.init(base, o.seed);
      std::printf("%s does not hold this configuration's base model; pretraining\n",
                  o.base_file.c_str());
    }
  }
  if (!loaded) {
    train_dense(model, base, full, o.pretrain, o, o.lr, o.min_lr, o.seed + 1, "base");
    if (!o.base_file.empty()) {
      base.zero(plane::moment1);
      base.zero(plane::moment2);
      if (auto s = io::save_checkpoint(o.base_file, model.tensors(), base, o.pretrain,
                                       {{"base_key", base_key}});
          !s)
        std::fprintf(stderr, "%s: %s\n", o.bench.c_str(), s.error().what().c_str());
    }
  }
  const std::vector<float> theta0(base.get(plane::param).begin(), base.get(plane::param).end());

  // ---- the evaluation documents (scored after the prefix) and the one scorer ----
  std::vector<route::scored_span> spans;
  std::vector<std::size_t> span_doc;  // eval document of each span
  for (std::size_t i = 0; i < eval.size(); ++i)
    if (eval[i].all.size() > std::size_t(o.prefix) + 1) {
      spans.push_back({eval[i].all, std::size_t(o.prefix), eval[i].all.size()});
      span_doc.push_back(i);
    }
  auto ws_eval = model.make_workspace({o.batch, o.ctx});
  auto pointers = [](const std::vector<std::vector<float>>& th) {
    std::vector<const float*> p;
    for (auto& t : th) p.push_back(t.data());
    return p;
  };

  // ---- router features and k-means shards ----
  std::vector<std::span<const std::int32_t>> tf, ef;
  for (auto& d : train) tf.push_back(d.all);
  for (auto i : span_doc) ef.push_back(eval[i].all);
  auto ftrain = route::prefix_features(model, theta0.data(), tf, o.prefix);
  auto feval = route::prefix_features(model, theta0.data(), ef, o.prefix);
  const int D = o.d, K = 4;
  auto km = route::kmeans_router::fit(ftrain, int(train.size()), D, {.k = K, .seed = o.seed});
  if (!km) {
    std::fprintf(stderr, "%s: %s\n", o.bench.c_str(), km.error().what().c_str());
    return 2;
  }
  std::vector<int> km_train(train.size()), km_eval(spans.size());
  for (std::size_t i = 0; i < train.size(); ++i) km_train[i] = km->route(&ftrain[i * D]);
  for (std::size_t j = 0; j < spans.size(); ++j) km_eval[j] = km->route(&feval[j * D]);
  rdocs.features = ftrain;
  rdocs.dim = D;
  auto shards_of_sets = [&](const std::vector<std::vector<int>>& r) {
    return train::shards_of(rdocs, r, K);
  };
  std::vector<std::vector<int>> km_sets(train.size());
  for (std::size_t i = 0; i < train.size(); ++i) km_sets[i] = {km_train[i]};
  auto km_shards = shards_of_sets(km_sets);
  std::printf("k-means shards (documents / MB):");
  for (int k = 0; k < K; ++k)
    std::printf(" %d: %zu / %.2f", k, std::count(km_train.begin(), km_train.end(), k),
                km_shards[std::size_t(k)].ids.size() / 1e6);
  std::printf("\n");

  std::vector<row> rows;
  json diagnostics = json::object();
  auto dp_bytes = [&](int workers) {  // ring all-reduce of fp32 gradients every step, per worker
    return double(o.steps) * 2.0 * (workers - 1) / workers * double(P) * 4.0;
  };
  auto add_row = [&](row r) {
    std::printf("%-26s %s %.4f bpb  (%.0f s)\n", r.name.c_str(), o.split.c_str(), r.bpb, r.wall_s);
    rows.push_back(std::move(r));
  };

  // ---- dense and dense_4x ----
  for (int mult : {1, 4}) {
    const char* name = mult == 1 ? "dense" : "dense_4x";
    if (!o.wants(name)) continue;
    const auto t0 = clk::now();
    arena<host> a(model.layout());
    std::copy(theta0.begin(), theta0.end(), a.get(plane::param).begin());
    auto curve = train_dense(model, a, full, mult * o.steps, o, o.row_lr, o.row_min_lr,
                             o.seed + 10 + std::uint64_t(mult), name);
    const std::vector<const float*> th{a.get(plane::param).data()};
    const auto n =
        route::routed_nll(model, th, spans, std::vector<int>(spans.size(), 0), rule, ws_eval);
    add_row({name, n.bits_per_token(), 0, 0, secs(t0), P, std::move(curve)});
  }

  const int rounds = o.steps / o.inner;
  train::inner_config icfg{
      .batch = o.batch,
      .ctx = o.ctx,
      .steps = o.inner,
      .grad_clip = 1.0f,
      .schedule = {.lr = o.row_lr, .min_lr = o.row_min_lr, .warmup = 50, .total = o.steps},
      .threads = 1};
  optim::adamw inner{.lr = o.row_lr};
  const outer::nesterov outer_opt{.lr = o.outer_lr, .momentum = o.outer_momentum};
  if (auto v = outer_opt.validate(); !v) {
    std::fprintf(stderr, "%s: %s\n", o.bench.c_str(), v.error().what().c_str());
    return 2;
  }

  // A multi-worker row: `wpp` workers per path of `grid` (worker w on shards[w]) trained by
  // train::local_trainer for `rounds` rounds in phases (phases[i] = the round phase i ends at);
  // before phase i > 0, reshard(i, θ of every path) gives the workers new shards (a re-routing;
  // the workers keep their inner state). Returns every path's θ after the final outer step.
  struct trained {
    std::vector<std::vector<float>> theta;  // per path
    double bytes = 0;                       // per worker
    std::vector<double> curve;
  };
  using trainer_t = train::local_trainer<nn::gpt, optim::adamw, outer::nesterov>;
  auto run_grid = [&](const std::string& name, auto grid, int wpp,
                      std::vector<io::token_stream> shards, const std::vector<int>& phases,
                      const trainer_t::reshard_fn& reshard, outer::delta_options dopt) {
    const int L = int(decltype(grid)::levels);
    auto plan =
        path::path_plan::make(grid, *path::split_gpt_levels(model.layout(), o.layers, L), wpp);
    if (!plan) throw error_exception(plan.error());
    auto t = trainer_t::make(model, std::move(*plan), theta0, std::move(shards), inner,
                             {.inner = icfg,
                              .outer = outer_opt,
                              .delta = dopt,
                              .rounds = rounds,
                              .phases = phases,
                              .seed = o.seed + 100});
    if (!t) throw error_exception(t.error());
    trained r;
    io::progress bar(name.c_str(), rounds);
    double window = 0;
    auto st = (*t)->run(reshard, [&](const sync::round_report& rr) {
      double l = 0;
      for (double x : rr.worker_loss) l += x / double(rr.worker_loss.size());
      window += l;
      if ((rr.round + 1) % 10 == 0) r.curve.push_back(window / 10), window = 0;
      char txt[64];
      std::snprintf(txt, sizeof txt, "inner loss %.3f", l);
      bar.update(rr.round + 1, txt);
    });
    if (!st) throw error_exception(st.error());
    r.bytes = (*t)->fp32_bytes_per_worker();
    r.theta = (*t)->path_thetas();
    return r;
  };
  const std::vector<int> one_phase{rounds};

  // ---- DiLoCo P=4: one module, 4 workers on the k-means shards ----
  if (o.wants("diloco_p4")) {
    const auto t0 = clk::now();
    auto t =
        run_grid("diloco_p4", path::module_grid<1>::experts({1}), K, km_shards, one_phase, {}, {});
    const auto n = route::routed_nll(model, pointers(t.theta), spans,
                                     std::vector<int>(spans.size(), 0), rule, ws_eval);
    add_row({"diloco_p4", n.bits_per_token(), t.bytes, dp_bytes(K), secs(t0), P, t.curve});
  }

  // ---- flat MoE P=4: one level of 4 experts on the k-means shards, routed by k-means ----
  if (o.wants("moe_p4")) {
    const auto t0 = clk::now();
    auto t =
        run_grid("moe_p4", path::module_grid<1>::experts({K}), 1, km_shards, one_phase, {}, {});
    const auto n = route::routed_nll(model, pointers(t.theta), spans, km_eval, rule, ws_eval);
    add_row({"moe_p4", n.bits_per_token(), t.bytes, 0, secs(t0), K * P, t.curve});
  }

  // ---- routed rows: top-n k-means shards, then discriminative re-routing phases ----
  // Re-routing (train/routing.hpp): label each training document by the path with the fewest
  // nats on its held-out tail (the one scorer), fit the logistic router on prefix features,
  // re-shard by its top n.
  const auto phases = *train::reroute_phases(rounds, o.reroutes);
  std::vector<std::vector<int>> km_top(train.size());
  for (std::size_t i = 0; i < train.size(); ++i) km_top[i] = km->rank(&ftrain[i * D], o.overlap);
  auto routed_rows = [&](const std::string& name, auto grid, std::size_t params_total) {
    const auto t0 = clk::now();
    route::logistic_router lr;
    std::vector<int> routed_before = km_train;
    std::vector<std::size_t> path_tokens(K, 0);
    auto reshard = [&](int q, const std::vector<std::vector<float>>& th) {
      auto rr = train::discriminative_reroute(model, pointers(th), rdocs, routed_before, rule,
                                              ws_eval, {.overlap = o.overlap});
      if (!rr) throw error_exception(rr.error());
      lr = std::move(rr->router);
      for (std::size_t i = 0; i < train.size(); ++i) routed_before[i] = rr->sets[i][0];
      auto s = shards_of_sets(rr->sets);
      std::printf(
          "%s: re-routing %d at round %d: %d of %zu training documents changed path; "
          "shards (MB):",
          name.c_str(), q, phases[std::size_t(q) - 1], rr->moved, train.size());
      for (int k = 0; k < K; ++k) {
        path_tokens[std::size_t(k)] = s[std::size_t(k)].ids.size();
        std::printf(" %.2f", s[std::size_t(k)].ids.size() / 1e6);
      }
      std::printf("\n");
      return s;
    };
    auto t =
        run_grid(name, grid, 1, shards_of_sets(km_top), phases, reshard,
                 {.weight_by_shard = true, .rescale = *outer::parse_path_rescale(o.path_rescale)});
    const double train_s = secs(t0);
    const auto th = pointers(t.theta);
    std::vector<int> routed(spans.size());
    for (std::size_t j = 0; j < spans.size(); ++j) routed[j] = lr.route(&feval[j * D]);
    const auto n = route::routed_nll(model, th, spans, routed, rule, ws_eval);
    add_row({name, n.bits_per_token(), t.bytes, dp_bytes(K), train_s, params_total, t.curve});
    // The same parameters under other routings (same scorer, same tokens).
    auto variant = [&](const std::string& suffix, const route::nll& v, clk::time_point t1) {
      add_row({name + suffix,
               v.bits_per_token(),
               t.bytes,
               dp_bytes(K),
               train_s + secs(t1),
               params_total,
               {}});
    };
    {
      const auto t1 = clk::now();
      std::vector<route::scored_span> prefixes;
      for (auto& sp : spans) prefixes.push_back({sp.seq, 1, sp.begin});
      const auto by_prefix =
          route::best_paths(route::per_path_nll(model, th, prefixes, rule, ws_eval));
      variant("_prefix_lik", route::routed_nll(model, th, spans, by_prefix, rule, ws_eval), t1);
    }
    {
      const auto t1 = clk::now();
      auto wsf = model.make_workspace({1, std::min(64, o.ctx)});
      const auto v = route::rerouted_nll(
          model, th, spans, 64,
          [&](std::size_t, std::span<const std::int32_t> chunk) {
            auto f =
                route::prefix_features(model, theta0.data(), {chunk}, std::min(64, o.ctx), 1, &wsf);
            return lr.route(f.data());
          },
          rule, ws_eval);
      variant("_reroute64", v, t1);
    }
    {
      const auto t1 = clk::now();
      variant("_reroute64_lik", route::likelihood_rerouted_nll(model, th, spans, 64, rule, ws_eval),
              t1);
    }
    // Diagnostics: does each path specialise? Every path scores every document.
    std::vector<std::string> span_domain;
    for (auto i : span_doc) span_domain.push_back(eval[i].domain);
    const auto sp = route::specialisation_of(route::per_path_nll(model, th, spans, rule, ws_eval),
                                             routed, span_domain);
    std::printf(
        "%s: the router picks a document's best path for %d of %zu; the oracle best "
        "path scores %.4f bpb\n",
        name.c_str(), sp.router_picks_best, sp.documents, sp.oracle.bits_per_token());
    std::printf(
        "%s: bits/byte of each path (columns) on each domain's %s documents, and how "
        "many documents the router sends to each path:\n",
        name.c_str(), o.split.c_str());
    json mat = json::object();
    for (std::size_t d = 0; d < sp.domains.size(); ++d) {
      std::printf("  %-28s", sp.domains[d].substr(0, 28).c_str());
      std::vector<double> b;
      for (int p = 0; p < K; ++p) {
        b.push_back(round4(sp.nats[d][std::size_t(p)].bits_per_token()));
        std::printf(" %7.4f (%2d)", b.back(), sp.routed[d][std::size_t(p)]);
      }
      std::printf("\n");
      mat[sp.domains[d]] = {{"bpb", b}, {"routed", sp.routed[d]}, {"best", sp.best[d]}};
    }
    diagnostics[name] = {{"oracle_bpb", round4(sp.oracle.bits_per_token())},
                         {"router_picks_best", sp.router_picks_best},
                         {"documents", sp.documents},
                         {"path_tokens", path_tokens},
                         {"domains", mat}};
  };
  if (o.wants("moe_p4_routed"))
    routed_rows("moe_p4_routed", path::module_grid<1>::experts({K}), std::size_t(K) * P);
  if (o.wants("dipaco_2x2"))
    routed_rows("dipaco_2x2", path::module_grid<2>::experts({2, 2}), 2 * P);

  // ---- table ----
  std::printf("\n| %-26s | %9s | %10s | %12s | %12s | %8s |\n", "row", (o.split + " bpb").c_str(),
              "params", "bytes sent", "DP would send", "wall s");
  std::printf("|%s|%s|%s|%s|%s|%s|\n", std::string(28, '-').c_str(), std::string(11, '-').c_str(),
              std::string(12, '-').c_str(), std::string(14, '-').c_str(),
              std::string(14, '-').c_str(), std::string(10, '-').c_str());
  json jr = json::array();
  for (auto& r : rows) {
    std::printf("| %-26s | %9.4f | %9.2fM | %11.1f MB | %11.1f MB | %8.0f |\n", r.name.c_str(),
                r.bpb, r.params_total / 1e6, r.bytes_sent / 1e6, r.dp_bytes / 1e6, r.wall_s);
    std::vector<double> curve;
    for (double c : r.curve) curve.push_back(round4(c / 0.6931471805599453));
    jr.push_back({{"name", r.name},
                  {"bpb", round4(r.bpb)},
                  {"scorer", rule.name()},
                  {"bytes_sent", r.bytes_sent},
                  {"dp_bytes", r.dp_bytes},
                  {"wall_s", std::round(r.wall_s * 10) / 10},
                  {"params_total", r.params_total},
                  {"train_bpb_curve", curve}});
  }
  std::printf(
      "evaluated: every row with its parameters after its final (outer) step; "
      "scorer %s on %zu %s documents after a %d-byte prefix\n",
      rule.name().c_str(), spans.size(), o.split.c_str(), o.prefix);
  std::printf("total wall time %.0f s\n", secs(t_all));
  std::printf("%s\n", json({{"bench", o.bench},
                            {"split", o.split},
                            {"rows", jr},
                            {"corpus", o.corpus},
                            {"diagnostics", diagnostics},
                            {"config",
                             {{"d", o.d},
                              {"layers", o.layers},
                              {"ctx", o.ctx},
                              {"batch", o.batch},
                              {"steps", o.steps},
                              {"inner", o.inner},
                              {"pretrain", o.pretrain},
                              {"prefix", o.prefix},
                              {"overlap", o.overlap},
                              {"lr", o.lr},
                              {"row_lr", o.row_lr},
                              {"path_rescale", o.path_rescale},
                              {"outer_lr", o.outer_lr},
                              {"outer_momentum", o.outer_momentum},
                              {"reroutes", o.reroutes},
                              {"stride", rule.S}}}})
                          .dump()
                          .c_str());
  return 0;
}
