// bench/run dipaco_table: the DiPaCo paper's Table 1 at our scale, on the Brown corpus.
//
// Every row starts from the same briefly pretrained base model (also the router's frozen
// feature extractor), uses the same per-path model and the same inner steps per worker, and is
// scored on the held-out validation documents: each document is routed by its first 32 bytes and
// the chosen path scores the rest (bits per byte). Rows:
//   dense       one worker, S steps on all training documents
//   dense_4x    one worker, 4·S steps
//   diloco_p4   DiLoCo, 4 workers on k-means shards, S steps each (H per round)
//   moe_p4      flat MoE: 4 independent paths on k-means shards, S steps each
//   dipaco_2x2  DiPaCo, 2 levels × 2 experts, k-means shards, then discriminative re-routing
//               (--reroutes times, default 8)
//   dipaco_2x2_prefix_lik  the same model, each document routed once to the path that best
//                         predicts its prefix (instead of the logistic router)
//   dipaco_2x2_reroute64  the same model, re-routed every 64 tokens at evaluation by the
//                         logistic router on the previous chunk's features
//   dipaco_2x2_rerouteW_lik  re-routed every W tokens (--reroute-lik, default 64) to the path
//                         that best predicted the previous chunk
// bytes_sent: bytes each worker pushed; dp_bytes: what a ring all-reduce data-parallel run with
// the same workers and steps would have sent per worker.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <numeric>
#include <optional>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "paco/io/io.hpp"
#include "paco/nn/nn.hpp"
#include "paco/optim/optim.hpp"
#include "paco/outer/outer.hpp"
#include "paco/path/level_map.hpp"
#include "paco/path/module_grid.hpp"
#include "paco/route/route.hpp"
#include "paco/sync/dipaco_local.hpp"

using namespace paco;
using clk = std::chrono::steady_clock;

namespace {

struct options {
  int d = 64, ctx = 128, layers = 2, heads = 4, batch = 16;
  int steps = 6000;     // S: inner steps per worker
  int inner = 100;      // H: inner steps per round
  int pretrain = 3000;  // base model steps (shared by every row)
  int threads = 2;
  int prefix = 32;          // routing prefix (bytes)
  int overlap = 2;          // DiPaCo trains each path on the documents that rank it in their top n
  int router_bytes = 1024;  // tail of each training document held out as router data
  float lr = 2e-3f, min_lr = 2e-4f;      // base model schedule
  float row_lr = 1e-3f, row_min_lr = 0;  // every row's schedule after the base (0: lr, 0.1·peak)
  std::string rows = "dense,dense_4x,diloco_p4,moe_p4,dipaco_2x2";  // which rows to run
  std::string base_file;                // cache of the base model (loaded if it matches)
  std::vector<int> reroute_lik = {64};  // W of the dipaco_2x2_rerouteW_lik rows
  std::string path_rescale = "none";    // DiPaCo's outer-gradient rescale (outer/delta.hpp)
  float outer_lr = 0.7f, outer_momentum = 0.9f;  // outer Nesterov of every multi-worker row
  int reroutes = 8;  // DiPaCo: discriminative re-routings over the rounds after the k-means third
  bool early_stop = false;  // DiPaCo: each path keeps its best round on held-out training text
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
  std::vector<std::int32_t> train;   // the part used for training shards
  std::vector<std::int32_t> router;  // held-out tail (router data)
  std::vector<std::int32_t> all;
};

io::token_stream stream_of(const std::vector<const std::vector<std::int32_t>*>& parts) {
  io::token_stream s;
  for (auto* p : parts) {
    s.doc_start.push_back(s.ids.size());
    s.ids.insert(s.ids.end(), p->begin(), p->end());
  }
  return s;
}

// Dense training: n AdamW steps from θ (in place) on the stream.
void train_dense(const nn::gpt& m, arena<host>& a, const io::token_stream& s, int n,
                 const options& o, float lr, float min_lr, std::uint64_t seed, const char* label) {
  nn::replica<nn::gpt> rep(m, o.batch, o.ctx, o.threads);
  optim::adamw opt{.lr = lr};
  optim::warmup_cosine sch{.lr = lr, .min_lr = min_lr, .warmup = 50, .total = n};
  io::batch_sampler smp(s, o.batch, o.ctx, seed);
  std::vector<std::int32_t> x(std::size_t(o.batch) * o.ctx), y(x.size());
  a.zero(plane::moment1);
  a.zero(plane::moment2);
  io::progress bar(label, n);
  double ema = NAN;
  for (int t = 1; t <= n; ++t) {
    smp.next(x.data(), y.data());
    double l = rep.forward_backward(a, x.data(), y.data());
    auto g = a.get(plane::grad);
    optim::clip_grad_norm(g.data(), g.size(), 1.0);
    opt.step(a, t, sch.lr_at(t));
    ema = std::isnan(ema) ? l : 0.98 * ema + 0.02 * l;
    char txt[64];
    std::snprintf(txt, sizeof txt, "loss %.3f", ema);
    bar.update(t, txt);
  }
}

// Validation bits/byte: doc i (routed to path route[i]) scored on bytes [prefix, end) by θ_p.
double routed_bpb(const nn::gpt& m, const std::vector<std::vector<float>>& thetas,
                  const std::vector<doc>& docs, const std::vector<int>& route, const options& o) {
  auto ws = m.make_workspace({o.batch, o.ctx});
  route::nll total;
  for (std::size_t p = 0; p < thetas.size(); ++p) {
    std::vector<route::scored_span> spans;
    for (std::size_t i = 0; i < docs.size(); ++i)
      if (route[i] == int(p) && docs[i].all.size() > std::size_t(o.prefix) + 1)
        spans.push_back({docs[i].all, std::size_t(o.prefix), docs[i].all.size()});
    total += route::batched_nll(m, thetas[p].data(), spans, ws);
  }
  return total.bits_per_token();
}

struct row {
  std::string name;
  double val_bpb = 0, bytes_sent = 0, dp_bytes = 0, wall_s = 0;
  std::size_t params_total = 0;
};

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  options o;
  CLI::App app{"DiPaCo Table 1 at our scale on Brown"};
  app.add_option("--steps", o.steps, "inner steps per worker (S)");
  app.add_option("--inner", o.inner, "inner steps per round (H)");
  app.add_option("--pretrain", o.pretrain, "steps of the shared base model");
  app.add_option("--d", o.d);
  app.add_option("--ctx", o.ctx);
  app.add_option("--layers", o.layers);
  app.add_option("--batch", o.batch);
  app.add_option("--threads", o.threads);
  app.add_option("--lr", o.lr, "peak AdamW lr of the base model");
  app.add_option("--row-lr", o.row_lr, "peak AdamW lr of every row after the base");
  app.add_option("--row-min-lr", o.row_min_lr, "final lr of every row (default 0.1 x its peak)");
  app.add_option("--rows", o.rows, "comma-separated rows to run");
  app.add_option("--base-file", o.base_file,
                 "checkpoint of the base model: loaded when it exists and matches the "
                 "configuration, else written after pretraining");
  app.add_option("--prefix", o.prefix, "routing prefix in bytes (scoring starts after it)");
  app.add_option("--overlap", o.overlap,
                 "DiPaCo: each training document goes to the shards of its top-n paths");
  app.add_option("--seed", o.seed);
  app.add_option("--path-rescale", o.path_rescale,
                 "DiPaCo rows: outer gradient of a module × √P (sqrt_paths, the paper's §2.7), "
                 "1/√P (inv_sqrt_paths) or 1 (none), P = paths through the module")
      ->check(CLI::IsMember({"none", "sqrt_paths", "inv_sqrt_paths"}));
  app.add_option("--reroutes", o.reroutes,
                 "DiPaCo: discriminative re-routings, evenly spaced over the rounds after the "
                 "first third (k-means shards)")
      ->check(CLI::Range(1, 100));
  app.add_flag("--early-stop", o.early_stop,
               "DiPaCo: each path ends with the parameters of the re-routing point where its "
               "loss on the held-out tails of its training documents was lowest (the paper's "
               "per-path early stopping)");
  app.add_option("--outer-lr", o.outer_lr, "outer Nesterov lr of the multi-worker rows");
  app.add_option("--outer-momentum", o.outer_momentum,
                 "outer Nesterov momentum of the multi-worker rows");
  app.add_option("--reroute-lik", o.reroute_lik,
                 "chunk sizes W of the rows dipaco_2x2_rerouteW_lik (re-routed by likelihood "
                 "every W bytes); each in [1, ctx]")
      ->delimiter(',');
  CLI11_PARSE(app, argc, argv);
  if (o.row_lr <= 0) o.row_lr = o.lr;
  if (o.row_min_lr <= 0) o.row_min_lr = 0.1f * o.row_lr;
  if (o.steps % o.inner != 0 || o.steps < 3 * o.inner) {
    std::fprintf(stderr, "dipaco_table: --steps must be a multiple of --inner and ≥ 3 rounds\n");
    return 2;
  }
  if (const int r = o.steps / o.inner; o.reroutes > r - r / 3) {
    std::fprintf(stderr,
                 "dipaco_table: --reroutes %d: at most %d (the rounds after the first third)\n",
                 o.reroutes, r - r / 3);
    return 2;
  }
  for (int W : o.reroute_lik)
    if (W < 1 || W > o.ctx) {
      std::fprintf(stderr, "dipaco_table: --reroute-lik %d: each W must be in [1, --ctx = %d]\n", W,
                   o.ctx);
      return 2;
    }
  const auto t_all = clk::now();

  // ---- data: Brown, documents split train / validation; router data = training doc tails ----
  auto corpus = io::load_brown(io::default_brown_dir());
  if (!corpus) {
    std::fprintf(stderr, "dipaco_table: %s\n", corpus.error().what().c_str());
    return 2;
  }
  io::byte_tokenizer tok;
  std::vector<doc> train, val;
  for (auto& d : corpus->subset(io::split::train).docs) {
    doc x;
    x.all = tok.encode(d.text);
    const std::size_t cut = x.all.size() > std::size_t(2 * o.router_bytes)
                                ? x.all.size() - std::size_t(o.router_bytes)
                                : x.all.size();
    x.train.assign(x.all.begin(), x.all.begin() + std::ptrdiff_t(cut));
    x.router.assign(x.all.begin() + std::ptrdiff_t(cut), x.all.end());
    train.push_back(std::move(x));
  }
  for (auto& d : corpus->subset(io::split::validation).docs)
    val.push_back({{}, {}, tok.encode(d.text)});
  std::vector<const std::vector<std::int32_t>*> all_train;
  for (auto& d : train) all_train.push_back(&d.train);
  auto full = stream_of(all_train);
  std::printf(
      "Brown: %zu training documents (%.2f MB for training, %.2f MB held out for the "
      "router), %zu validation documents\n",
      train.size(), full.ids.size() / 1e6,
      std::accumulate(train.begin(), train.end(), 0.0,
                      [](double a, const doc& d) { return a + d.router.size(); }) /
          1e6,
      val.size());

  nn::gpt model({.vocab = 256, .ctx = o.ctx, .d = o.d, .layers = o.layers, .heads = o.heads});
  const std::size_t P = model.param_count();
  std::printf(
      "per-path model: GPT d=%d layers=%d ctx=%d, %.2fM parameters; S=%d inner steps per "
      "worker, H=%d, batch %d; GEMM %s\n",
      o.d, o.layers, o.ctx, P / 1e6, o.steps, o.inner, o.batch, nn::gemm_backend());

  // ---- the shared base model (pretraining, also the router's frozen feature extractor) ----
  arena<host> base(model.layout());
  model.init(base, o.seed);
  const std::string base_key = std::to_string(o.d) + "/" + std::to_string(o.layers) + "/" +
                               std::to_string(o.ctx) + "/" + std::to_string(o.batch) + "/" +
                               std::to_string(o.pretrain) + "/" + std::to_string(o.lr) + "/" +
                               std::to_string(o.seed);
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
        std::fprintf(stderr, "dipaco_table: %s\n", s.error().what().c_str());
    }
  }
  const std::vector<float> theta0(base.get(plane::param).begin(), base.get(plane::param).end());

  // ---- router features and k-means shards ----
  std::vector<std::span<const std::int32_t>> tf, vf;
  for (auto& d : train) tf.push_back(d.all);
  for (auto& d : val) vf.push_back(d.all);
  auto ftrain = route::prefix_features(model, theta0.data(), tf, o.prefix);
  auto fval = route::prefix_features(model, theta0.data(), vf, o.prefix);
  const int D = o.d, K = 4;
  auto km = route::kmeans_router::fit(ftrain, int(train.size()), D, {.k = K, .seed = o.seed});
  if (!km) {
    std::fprintf(stderr, "dipaco_table: %s\n", km.error().what().c_str());
    return 2;
  }
  std::vector<int> train_route(train.size()), val_route(val.size());
  for (std::size_t i = 0; i < train.size(); ++i) train_route[i] = km->route(&ftrain[i * D]);
  for (std::size_t i = 0; i < val.size(); ++i) val_route[i] = km->route(&fval[i * D]);
  // Shards from each document's paths (one per document, or its top-n for overlapping shards).
  auto shards_of_sets = [&](const std::vector<std::vector<int>>& r) {
    std::vector<io::token_stream> s(K);
    for (int k = 0; k < K; ++k) {
      std::vector<const std::vector<std::int32_t>*> parts;
      for (std::size_t i = 0; i < train.size(); ++i)
        if (std::find(r[i].begin(), r[i].end(), k) != r[i].end()) parts.push_back(&train[i].train);
      s[k] = stream_of(parts);
    }
    return s;
  };
  auto shards_of = [&](const std::vector<int>& r) {
    std::vector<std::vector<int>> sets(r.size());
    for (std::size_t i = 0; i < r.size(); ++i) sets[i] = {r[i]};
    return shards_of_sets(sets);
  };
  auto shards = shards_of(train_route);
  std::printf("k-means shards (documents / MB):");
  for (int k = 0; k < K; ++k)
    std::printf(" %d: %zu / %.2f", k, std::count(train_route.begin(), train_route.end(), k),
                shards[k].ids.size() / 1e6);
  std::printf("\n");

  std::vector<row> rows;
  const std::vector<int> one_route_val(val.size(), 0);
  auto dp_bytes = [&](int workers) {  // ring all-reduce of fp32 gradients every step, per worker
    return double(o.steps) * 2.0 * (workers - 1) / workers * double(P) * 4.0;
  };

  // ---- dense and dense_4x ----
  for (int mult : {1, 4}) {
    if (!o.wants(mult == 1 ? "dense" : "dense_4x")) continue;
    const auto t0 = clk::now();
    arena<host> a(model.layout());
    std::copy(theta0.begin(), theta0.end(), a.get(plane::param).begin());
    train_dense(model, a, full, mult * o.steps, o, o.row_lr, o.row_min_lr, o.seed + 10 + mult,
                mult == 1 ? "dense" : "dense_4x");
    std::vector<std::vector<float>> th{{a.get(plane::param).begin(), a.get(plane::param).end()}};
    row r{mult == 1 ? "dense" : "dense_4x",
          routed_bpb(model, th, val, one_route_val, o),
          0,
          0,
          secs(t0),
          P};
    rows.push_back(r);
    std::printf("%-22s val %.4f bpb  (%.0f s)\n", r.name.c_str(), r.val_bpb, r.wall_s);
  }

  const int rounds = o.steps / o.inner;
  sync::inner_config icfg{
      .batch = o.batch,
      .ctx = o.ctx,
      .steps = o.inner,
      .grad_clip = 1.0f,
      .schedule = {.lr = o.row_lr, .min_lr = o.row_min_lr, .warmup = 50, .total = o.steps},
      .threads = 1};
  optim::adamw inner{.lr = o.row_lr};
  const outer::nesterov outer_opt{.lr = o.outer_lr, .momentum = o.outer_momentum};
  if (auto v = outer_opt.validate(); !v) {
    std::fprintf(stderr, "dipaco_table: %s\n", v.error().what().c_str());
    return 2;
  }

  // Runs a grid: module_level per module id, one worker per path, returns the final θ per path.
  auto run_grid = [&](const char* name, auto grid, const std::vector<path::level_span>& levels,
                      std::vector<int> module_level, const std::vector<int>& worker_path,
                      std::vector<io::token_stream>& worker_shards, int from_round, int to_round,
                      sync::local_store<outer::nesterov>* store_in, double& bytes) {
    std::vector<sync::worker_spec> ws;
    for (std::size_t w = 0; w < worker_path.size(); ++w)
      ws.push_back({sync::path_modules(grid, worker_path[w]), &worker_shards[w], o.seed + 100 + w});
    auto cfg = icfg;
    cfg.start_step = long(from_round) * o.inner;
    io::progress bar(name, to_round);
    auto st = sync::run_local(*store_in, model, levels, module_level, ws, inner, cfg,
                              to_round - from_round, [&](const sync::round_report& rr) {
                                double l = 0;
                                for (double x : rr.worker_loss) l += x / rr.worker_loss.size();
                                char txt[64];
                                std::snprintf(txt, sizeof txt, "inner loss %.3f", l);
                                bar.update(rr.round + 1, txt);
                              });
    if (!st) throw error_exception(st.error());
    std::size_t per_round = 0;
    for (int m : ws[0].modules) per_round += levels[module_level[m]].size;
    bytes += double(to_round - from_round) * double(per_round) * 4.0;
  };
  auto path_thetas = [&](auto grid, sync::local_store<outer::nesterov>& store,
                         const std::vector<path::level_span>& levels,
                         const std::vector<int>& module_level) {
    std::vector<std::vector<float>> th(grid.paths(), theta0);
    for (int p = 0; p < grid.paths(); ++p)
      sync::assemble_path(store, levels, module_level, sync::path_modules(grid, p), th[p].data());
    return th;
  };

  // ---- DiLoCo P=4: one module, 4 workers on the k-means shards ----
  if (o.wants("diloco_p4")) {
    const auto t0 = clk::now();
    auto levels = *path::split_gpt_levels(model.layout(), o.layers, 1);
    auto grid = path::module_grid<1>::experts({1});
    std::vector<sync::worker_spec> spec(K);
    for (int w = 0; w < K; ++w) spec[w] = {{0}, &shards[w], 0};
    sync::local_store<outer::nesterov> store(sync::grid_modules(grid, levels, spec), outer_opt);
    sync::init_modules(store, levels, {0}, theta0.data());
    double bytes = 0;
    run_grid("diloco_p4", grid, levels, {0}, {0, 0, 0, 0}, shards, 0, rounds, &store, bytes);
    auto th = path_thetas(grid, store, levels, {0});
    row r{
        "diloco_p4", routed_bpb(model, th, val, one_route_val, o), bytes, dp_bytes(K), secs(t0), P};
    rows.push_back(r);
    std::printf("%-22s val %.4f bpb  (%.0f s)\n", r.name.c_str(), r.val_bpb, r.wall_s);
  }

  // ---- flat MoE P=4: one level of 4 experts, each path its own module ----
  if (o.wants("moe_p4")) {
    const auto t0 = clk::now();
    auto levels = *path::split_gpt_levels(model.layout(), o.layers, 1);
    auto grid = path::module_grid<1>::experts({K});
    std::vector<sync::worker_spec> spec(K);
    for (int w = 0; w < K; ++w) spec[w] = {sync::path_modules(grid, w), &shards[w], 0};
    sync::local_store<outer::nesterov> store(sync::grid_modules(grid, levels, spec), outer_opt);
    sync::init_modules(store, levels, {0, 0, 0, 0}, theta0.data());
    double bytes = 0;
    run_grid("moe_p4", grid, levels, {0, 0, 0, 0}, {0, 1, 2, 3}, shards, 0, rounds, &store, bytes);
    auto th = path_thetas(grid, store, levels, {0, 0, 0, 0});
    row r{"moe_p4", routed_bpb(model, th, val, val_route, o), bytes, 0, secs(t0), K * P};
    rows.push_back(r);
    std::printf("%-22s val %.4f bpb  (%.0f s)\n", r.name.c_str(), r.val_bpb, r.wall_s);
  }

  // ---- DiPaCo 2×2: k-means shards, then discriminative re-routing phases ----
  if (o.wants("dipaco_2x2")) {
    const auto t0 = clk::now();
    auto levels = *path::split_gpt_levels(model.layout(), o.layers, 2);
    auto grid = path::module_grid<2>::experts({2, 2});
    const std::vector<int> module_level = {0, 0, 1, 1};
    std::vector<sync::worker_spec> spec(K);
    for (int w = 0; w < K; ++w) spec[w] = {sync::path_modules(grid, w), &shards[w], 0};
    sync::local_store<outer::nesterov> store(
        sync::grid_modules(grid, levels, spec), outer_opt,
        {.weight_by_shard = true, .rescale = *outer::parse_path_rescale(o.path_rescale)});
    sync::init_modules(store, levels, module_level, theta0.data());
    double bytes = 0;
    const int phase1 = rounds / 3;
    std::vector<std::vector<int>> top1(train.size());
    for (std::size_t i = 0; i < train.size(); ++i) top1[i] = km->rank(&ftrain[i * D], o.overlap);
    auto shards1 = shards_of_sets(top1);
    if (o.overlap > 1) {
      std::printf("dipaco_2x2: top-%d overlapping k-means shards (MB):", o.overlap);
      for (int k = 0; k < K; ++k) std::printf(" %.2f", shards1[k].ids.size() / 1e6);
      std::printf("\n");
    }
    run_grid("dipaco_2x2 (k-means)", grid, levels, module_level, {0, 1, 2, 3}, shards1, 0, phase1,
             &store, bytes);
    // Discriminative routing, --reroutes times over the remaining rounds: label each training
    // document by the path with the best log-likelihood on its held-out tail, fit the logistic
    // router, re-shard, train.
    std::optional<route::logistic_router> lr;
    std::vector<int> val2(val.size()), routed_before = train_route;
    auto ws1 = model.make_workspace({1, o.ctx});
    // Per-path early stopping (--early-stop): a path's held-out loss is its nats per token on
    // the router tails of the documents it was trained on last (held out from training); the
    // parameters of its best point are kept. Scored where the re-routing scores every tail anyway.
    std::vector<std::vector<float>> best_theta(K);
    std::vector<double> best_loss(K, INFINITY);
    std::vector<int> best_at(K, -1);
    auto keep_best = [&](const std::vector<std::vector<float>>& th,
                         const std::vector<std::vector<double>>& tail_nats,
                         const std::vector<std::size_t>& tail_tokens, int round) {
      for (int p = 0; p < K; ++p) {
        double nats = 0, toks = 0;
        for (std::size_t i = 0; i < train.size(); ++i)
          if (routed_before[i] == p) nats += tail_nats[i][p], toks += double(tail_tokens[i]);
        if (toks > 0 && nats / toks < best_loss[p])
          best_loss[p] = nats / toks, best_theta[p] = th[p], best_at[p] = round;
      }
    };
    auto score_tails = [&](const std::vector<std::vector<float>>& th,
                           std::vector<std::vector<double>>& tail_nats,
                           std::vector<std::size_t>& tail_tokens) {
      tail_nats.assign(train.size(), std::vector<double>(K, INFINITY));
      tail_tokens.assign(train.size(), 0);  // the same for every path
      for (std::size_t i = 0; i < train.size(); ++i) {
        const auto& r = train[i].router;
        if (r.size() < 2) continue;
        for (int p = 0; p < K; ++p) {
          auto n = route::sequence_nll(model, th[p].data(), r, 1, r.size(), ws1);
          tail_nats[i][p] = n.nats;
          tail_tokens[i] = n.tokens;
        }
      }
    };
    for (int q = 0, from = phase1; q < o.reroutes; ++q) {
      const int to = phase1 + (rounds - phase1) * (q + 1) / o.reroutes;
      auto th = path_thetas(grid, store, levels, module_level);
      std::vector<std::vector<double>> tail_nats;
      std::vector<std::size_t> tail_tokens;
      score_tails(th, tail_nats, tail_tokens);
      if (o.early_stop) keep_best(th, tail_nats, tail_tokens, from);
      std::vector<int> labels(train.size());
      for (std::size_t i = 0; i < train.size(); ++i) {
        double best = INFINITY;
        for (int p = 0; p < K; ++p)
          if (tail_nats[i][p] < best) best = tail_nats[i][p], labels[i] = p;
      }
      auto fit = route::logistic_router::fit(ftrain, int(train.size()), D, labels, {.k = K});
      if (!fit) {
        std::fprintf(stderr, "dipaco_table: %s\n", fit.error().what().c_str());
        return 2;
      }
      lr = std::move(fit.value());
      std::vector<int> train2(train.size());
      for (std::size_t i = 0; i < train.size(); ++i) train2[i] = lr->route(&ftrain[i * D]);
      std::vector<std::vector<int>> top2(train.size());
      for (std::size_t i = 0; i < train.size(); ++i) top2[i] = lr->rank(&ftrain[i * D], o.overlap);
      auto shards2 = shards_of_sets(top2);
      int moved = 0;
      for (std::size_t i = 0; i < train.size(); ++i) moved += train2[i] != routed_before[i];
      routed_before = train2;
      std::printf(
          "discriminative re-routing %d at round %d: %d of %zu training documents changed "
          "path; shards:",
          q + 1, from, moved, train.size());
      for (int k = 0; k < K; ++k)
        std::printf(" %zu", std::size_t(std::count(train2.begin(), train2.end(), k)));
      std::printf("\n");
      run_grid("dipaco_2x2 (discriminative)", grid, levels, module_level, {0, 1, 2, 3}, shards2,
               from, to, &store, bytes);
      from = to;
    }
    for (std::size_t i = 0; i < val.size(); ++i) val2[i] = lr->route(&fval[i * D]);
    auto thf = path_thetas(grid, store, levels, module_level);
    if (o.early_stop) {
      std::vector<std::vector<double>> tail_nats;
      std::vector<std::size_t> tail_tokens;
      score_tails(thf, tail_nats, tail_tokens);
      keep_best(thf, tail_nats, tail_tokens, rounds);
      std::printf("early stopping: each path's best point (round; held-out nats/token):");
      for (int p = 0; p < K; ++p) std::printf(" %d (%d; %.4f)", p, best_at[p], best_loss[p]);
      std::printf("\n");
      thf = best_theta;
    }
    row r{"dipaco_2x2", routed_bpb(model, thf, val, val2, o), bytes, dp_bytes(K), secs(t0), 2 * P};
    rows.push_back(r);
    std::printf("%-22s val %.4f bpb  (%.0f s)\n", r.name.c_str(), r.val_bpb, r.wall_s);

    // Routed once by the prefix, by likelihood instead of the logistic router: the path that
    // best predicts the document's first `prefix` bytes scores the rest (K forward passes over
    // the prefix, the evidence frequent re-routing uses for chunk 0).
    auto wsr = model.make_workspace({1, o.ctx});
    // The path whose final θ best predicts seq[b … e) (first of the fewest nats), and its nats.
    auto best_path = [&](std::span<const std::int32_t> seq, std::size_t b, std::size_t e) {
      std::pair<int, route::nll> best{0, {}};
      best.second.nats = INFINITY;
      for (int p = 0; p < K; ++p)
        if (auto n = route::sequence_nll(model, thf[p].data(), seq, b, e, wsr);
            n.nats < best.second.nats)
          best = {p, n};
      return best;
    };
    // A row of the same trained model under another evaluation, begun at t.
    auto add_eval_row = [&](std::string name, double bpb, clk::time_point t) {
      rows.push_back({std::move(name), bpb, bytes, dp_bytes(K), r.wall_s + secs(t), 2 * P});
      std::printf("%-22s val %.4f bpb\n", rows.back().name.c_str(), bpb);
    };
    {
      const auto t1 = clk::now();
      std::vector<int> val_lik(val.size(), 0);
      for (std::size_t i = 0; i < val.size(); ++i)
        if (const auto& s = val[i].all; s.size() > std::size_t(o.prefix) + 1)
          val_lik[i] = best_path(s, 1, std::size_t(o.prefix)).first;
      add_eval_row("dipaco_2x2_prefix_lik", routed_bpb(model, thf, val, val_lik, o), t1);
    }

    // Re-routing every 64 tokens at evaluation, with the same logistic router on chunk features.
    const auto t1 = clk::now();
    auto wsf = model.make_workspace({1, std::min(64, o.ctx)});
    route::nll tot;
    for (std::size_t i = 0; i < val.size(); ++i) {
      const auto& s = val[i].all;
      if (s.size() <= std::size_t(o.prefix) + 1) continue;
      tot += route::rerouted_nll(
          s, o.prefix, s.size(), 64,
          [&](std::span<const std::int32_t> chunk) {
            auto f =
                route::prefix_features(model, theta0.data(), {chunk}, std::min(64, o.ctx), 1, &wsf);
            return lr->route(f.data());
          },
          [&](int p, std::size_t b, std::size_t e) {
            return route::chunk_nll(model, thf[p].data(), s, b, e, wsr);
          });
    }
    add_eval_row("dipaco_2x2_reroute64", tot.bits_per_token(), t1);

    // Re-routing every W tokens by likelihood (route::likelihood_rerouted_nll): every path
    // scores chunk i and the best of them predicts chunk i+1; the prefix picks the path of
    // chunk 0 the same way. K forward passes per chunk.
    for (int W : o.reroute_lik) {
      const auto t2 = clk::now();
      route::nll tot2;
      std::vector<const float*> thp;
      for (auto& t : thf) thp.push_back(t.data());
      for (std::size_t i = 0; i < val.size(); ++i) {
        const auto& s = val[i].all;
        if (s.size() <= std::size_t(o.prefix) + 1) continue;
        tot2 +=
            route::likelihood_rerouted_nll(model, thp, s, o.prefix, s.size(), std::size_t(W), wsr);
      }
      add_eval_row("dipaco_2x2_reroute" + std::to_string(W) + "_lik", tot2.bits_per_token(), t2);
    }

    // Diagnostics, not results: how well the prefix router picks each validation document's
    // best path (scored on the document itself), and the bits/byte such an oracle would get.
    std::vector<int> best(val.size(), 0);
    route::nll oracle;
    for (std::size_t i = 0; i < val.size(); ++i) {
      const auto& s = val[i].all;
      if (s.size() <= std::size_t(o.prefix) + 1) continue;
      const auto [p, n] = best_path(s, std::size_t(o.prefix), s.size());
      best[i] = p;
      oracle += n;
    }
    int agree = 0;
    for (std::size_t i = 0; i < val.size(); ++i) agree += best[i] == val2[i];
    std::printf(
        "diagnostic: the router picks a validation document's best path for %d of %zu; "
        "an oracle that knew it would score %.4f bpb\n",
        agree, val.size(), oracle.bits_per_token());
  }

  // ---- table ----
  std::printf("\n| %-22s | %9s | %10s | %12s | %12s | %8s |\n", "row", "val bpb", "params",
              "bytes sent", "DP would send", "wall s");
  std::printf("|%s|%s|%s|%s|%s|%s|\n", std::string(24, '-').c_str(), std::string(11, '-').c_str(),
              std::string(12, '-').c_str(), std::string(14, '-').c_str(),
              std::string(14, '-').c_str(), std::string(10, '-').c_str());
  nlohmann::json jr = nlohmann::json::array();
  for (auto& r : rows) {
    std::printf("| %-22s | %9.4f | %9.2fM | %11.1f MB | %11.1f MB | %8.0f |\n", r.name.c_str(),
                r.val_bpb, r.params_total / 1e6, r.bytes_sent / 1e6, r.dp_bytes / 1e6, r.wall_s);
    jr.push_back({{"name", r.name},
                  {"val_bpb", std::round(r.val_bpb * 1e4) / 1e4},
                  {"bytes_sent", r.bytes_sent},
                  {"dp_bytes", r.dp_bytes},
                  {"wall_s", std::round(r.wall_s * 10) / 10},
                  {"params_total", r.params_total}});
  }
  std::printf("total wall time %.0f s\n", secs(t_all));
  std::printf("%s\n", nlohmann::json({{"bench", "dipaco_table"},
                                      {"rows", jr},
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
                                        {"early_stop", o.early_stop}}}})
                          .dump()
                          .c_str());
  return 0;
}
