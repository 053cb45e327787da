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
// and for each routed model the same parameters under the other routing rules (_prefix_lik,
// _reroute64, _reroute64_lik: route/routing_rules.hpp). Diagnostics (JSON "diagnostics"): tokens
// per path and whether paths specialise (route/specialisation.hpp); each row's learning curve.
// bytes_sent: bytes each worker pushed; dp_bytes: what a ring all-reduce data-parallel run with
// the same workers and steps would have sent per worker.
#include <chrono>
#include <cmath>
#include <cstdio>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "paco/io/io.hpp"
#include "paco/nn/nn.hpp"
#include "paco/optim/optim.hpp"
#include "paco/outer/outer.hpp"
#include "paco/path/path.hpp"
#include "paco/route/route.hpp"
#include "paco/train/train.hpp"

using namespace paco;
using clk = std::chrono::steady_clock;
using json = nlohmann::ordered_json;  // keys in the order written: bench, split, rows, …

namespace {

struct options {
  std::string bench = "dipaco_table", corpus = "brown", data, split = "test";  // see their flags
  int d = 64, ctx = 128, layers = 2, heads = 4, batch = 16, threads = 2;
  int steps = 2000, inner = 100, pretrain = 3000;  // S (a table in < 40 min on 2 cores), H, base
  int stride = 0, reroutes = 4, early_stop = 0;    // see their flags
  // routing prefix (32 bytes), top-n overlap of the routed rows' shards (2), training document
  // tails held out as router data (1024 bytes), seed (1); .k and .base are set in main
  train::routed_setup_config setup;
  float lr = 2e-3f, min_lr = 2e-4f;      // base model schedule
  float row_lr = 1e-3f, row_min_lr = 0;  // every row's schedule after the base (0: 0.1·peak)
  float outer_lr = 0.7f, outer_momentum = 0.9f;  // outer Nesterov of every multi-worker row
  std::vector<std::string> rows{"dense",  "dense_4x",      "diloco_p4",
                                "moe_p4", "moe_p4_routed", "dipaco_2x2"};
  std::string base_file, path_rescale = "none";  // see their flags
};

// A row of the table. Its routing at evaluation follows from its shards: whole → the one model,
// kmeans → the k-means router (a one-path grid: that path), routed → the learned logistic
// router, then the same parameters under every other rule (route/routing_rules.hpp).
enum class shards { whole, kmeans, routed };
struct row_spec {
  std::string name;
  std::vector<int> experts;  // experts per level of the grid; empty: one model trained alone
  int workers_per_path = 1;
  shards data = shards::whole;
  int step_mult = 1;     // inner steps per worker: step_mult · S
  bool dp_peer = false;  // reports what ring all-reduce data parallelism would have sent
};
constexpr int K = 4;  // k-means shards, and paths of the flat MoE and DiPaCo grids
const std::vector<row_spec> table_rows{
    {"dense", {}, 1, shards::whole, 1, false},
    {"dense_4x", {}, 1, shards::whole, 4, false},
    {"diloco_p4", {1}, K, shards::kmeans, 1, true},
    {"moe_p4", {K}, 1, shards::kmeans, 1, false},
    {"moe_p4_routed", {K}, 1, shards::routed, 1, true},
    {"dipaco_2x2", {2, 2}, 1, shards::routed, 1, true},
};

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  options o;
  auto& so = o.setup;
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
  app.add_option("--rows", o.rows, "comma-separated rows to run")->delimiter(',');
  app.add_option("--base-file", o.base_file,
                 "base model checkpoint: loaded if it matches the configuration, else written");
  app.add_option("--prefix", so.prefix, "routing prefix in bytes (scoring starts after it)");
  app.add_option("--overlap", so.overlap, "routed rows: a document trains its top-n paths");
  app.add_option("--seed", so.seed);
  app.add_option("--path-rescale", o.path_rescale,
                 "routed rows: a module's outer gradient × √P (sqrt_paths, the paper's §2.7), 1/√P "
                 "(inv_sqrt_paths) or 1 (none), P = paths through it")
      ->check(CLI::IsMember({"none", "sqrt_paths", "inv_sqrt_paths"}));
  app.add_option("--early-stop", o.early_stop,
                 "routed rows: per-path early stopping every n rounds of the last phase (0: off)")
      ->check(CLI::Range(0, 1000));
  app.add_option("--reroutes", o.reroutes,
                 "routed rows: discriminative re-routings over the rounds after the first third")
      ->check(CLI::Range(1, 100));
  app.add_option("--outer-lr", o.outer_lr, "outer Nesterov lr of the multi-worker rows");
  app.add_option("--outer-momentum", o.outer_momentum, "outer Nesterov momentum of those rows");
  CLI11_PARSE(app, argc, argv);
  auto fail = [&](const std::string& what, const error& e = {}) {  // exit status 2
    std::fprintf(stderr, "%s: %s%s\n", o.bench.c_str(), what.c_str(), e ? e.what().c_str() : "");
    return 2;
  };
  auto secs = [](auto t0) { return std::chrono::duration<double>(clk::now() - t0).count(); };
  auto round4 = [](double x) { return std::round(x * 1e4) / 1e4; };
  if (o.row_lr <= 0) o.row_lr = o.lr;
  if (o.row_min_lr <= 0) o.row_min_lr = 0.1f * o.row_lr;
  if (o.steps % o.inner != 0 || o.steps < 3 * o.inner)
    return fail("--steps must be a multiple of --inner and ≥ 3 rounds");
  if (auto p = train::reroute_phases(o.steps / o.inner, o.reroutes); !p)
    return fail("--reroutes: ", p.error());
  const auto rule_or = route::sliding_window::make(o.ctx, o.stride);
  if (!rule_or) return fail("--stride: ", rule_or.error());
  const route::sliding_window rule = *rule_or;
  const outer::nesterov outer_opt{.lr = o.outer_lr, .momentum = o.outer_momentum};
  if (auto v = outer_opt.validate(); !v) return fail("", v.error());
  const auto t_all = clk::now();

  // ---- the shared setup: documents, base model θ0, prefix features, k-means router, shards ----
  nn::gpt model({.vocab = 256, .ctx = o.ctx, .d = o.d, .layers = o.layers, .heads = o.heads});
  const std::size_t P = model.param_count();
  // AdamW from lr to min_lr over `total` steps (warm-up 50), clipped at 1 (the default)
  auto inner_cfg = [&](float lr, float min_lr, int total, int steps, int threads) {
    train::inner_config c{.batch = o.batch, .ctx = o.ctx, .steps = steps, .threads = threads};
    c.schedule = {.lr = lr, .min_lr = min_lr, .warmup = 50, .total = total};
    return c;
  };
  auto dense = [&](arena<host>& a, const io::token_stream& s, int n, float lr, float min_lr,
                   std::uint64_t seed, const std::string& label) {
    io::progress bar(label, n);
    return train::dense_run(model, a, s, inner_cfg(lr, min_lr, n, o.inner, o.threads),
                            optim::adamw{.lr = lr}, n, seed, 1000,
                            [&](long t, double l) { bar.update_smoothed(t, "loss", l); });
  };
  so.k = K;
  so.base = {.file = o.base_file,
             .key = train::base_key(o.corpus + ":" + o.data, o.d, o.layers, o.ctx, o.batch,
                                    o.pretrain, o.lr, so.seed),
             .step = o.pretrain};
  auto corpus = io::load_corpus(o.corpus, o.data);
  if (!corpus) return fail("", corpus.error());
  auto setup = train::make_routed_setup(
      model, *corpus, o.split == "test" ? io::split::test : io::split::validation, so,
      [&](arena<host>& a, const io::token_stream& s) {
        dense(a, s, o.pretrain, o.lr, o.min_lr, so.seed + 1, "base");
      });
  if (!setup) return fail("", setup.error());
  const auto& su = *setup;
  su.print_documents(stdout, o.corpus, o.split);
  std::printf(
      "per-path model: GPT d=%d layers=%d ctx=%d, %.2fM parameters; S=%d inner steps per "
      "worker, H=%d, batch %d; GEMM %s; scorer %s\n",
      o.d, o.layers, o.ctx, P / 1e6, o.steps, o.inner, o.batch, nn::gemm_backend(),
      rule.name().c_str());
  train::print_base_origin(stdout, su.base, o.base_file);
  if (!su.base.saved) fail("", su.base.saved.error());
  su.print_kmeans_shards(stdout);

  // ---- the rows ----
  const auto& ev = su.scored;
  auto ws_eval = model.make_workspace({o.batch, o.ctx});
  const std::vector<int> to_path0(ev.spans.size(), 0);
  const int rounds = o.steps / o.inner;
  const train::local_trainer_config<outer::nesterov> tcfg{
      .inner = inner_cfg(o.row_lr, o.row_min_lr, o.steps, o.inner, 1),
      .outer = outer_opt,
      .rounds = rounds,
      .seed = so.seed + 100};
  train::routed_training_config<outer::nesterov> rcfg{.trainer = tcfg,
                                                      .reroutes = o.reroutes,
                                                      .reroute = {.overlap = so.overlap},
                                                      .rule = rule,
                                                      .early_stop_every = o.early_stop};
  rcfg.trainer.delta = {.weight_by_shard = true,
                        .rescale = *outer::parse_path_rescale(o.path_rescale)};
  const optim::adamw inner{.lr = o.row_lr};
  io::table table({"row", o.split + " bpb", "params", "bytes sent", "DP would send", "wall s"});
  json rows = json::array(), diagnostics = json::object();
  // A row: printed now, and kept for the table and the JSON line. sent and dp: bytes per worker;
  // curve: mean training loss (nats/byte) every 1000 steps / 10 rounds.
  auto add_row = [&](const std::string& name, double bpb, double sent, double dp, double wall,
                     std::size_t params, const std::vector<double>& curve) {
    std::printf("%-26s %s %.4f bpb  (%.0f s)\n", name.c_str(), o.split.c_str(), bpb, wall);
    table.add({name, io::cell(bpb, 4), io::cell(params / 1e6, 2, "M"),
               io::cell(sent / 1e6, 1, " MB"), io::cell(dp / 1e6, 1, " MB"), io::cell(wall, 0)});
    std::vector<double> bits;  // the curve in bits/byte
    for (double nats : curve) bits.push_back(round4(nats / 0.6931471805599453));
    // clang-format off
    rows.push_back({{"name", name}, {"bpb", round4(bpb)}, {"scorer", rule.name()},
                    {"bytes_sent", sent}, {"dp_bytes", dp}, {"wall_s", std::round(wall * 10) / 10},
                    {"params_total", params},
                    {"train_bpb_curve", bits}});
    // clang-format on
  };
  for (const auto& spec : table_rows) {
    if (std::ranges::find(o.rows, spec.name) == o.rows.end()) continue;
    const auto t0 = clk::now();
    if (spec.experts.empty()) {
      arena<host> a(model.layout());
      std::copy(su.theta0.begin(), su.theta0.end(), a.get(plane::param).begin());
      auto curve = dense(a, su.train_stream, spec.step_mult * o.steps, o.row_lr, o.row_min_lr,
                         so.seed + 10 + std::uint64_t(spec.step_mult), spec.name);
      const auto n = route::routed_nll(model, std::vector<const float*>{a.get(plane::param).data()},
                                       ev.spans, to_path0, rule, ws_eval);
      add_row(spec.name, n.bits_per_token(), 0, 0, secs(t0), P, curve);
      continue;
    }
    auto levels = *path::split_gpt_levels(model.layout(), o.layers, int(spec.experts.size()));
    const auto plan =
        path::path_plan::make_runtime(spec.experts, std::move(levels), spec.workers_per_path)
            .value_or_throw();
    const std::size_t params = plan.grid_params(P);
    // ring all-reduce of fp32 gradients every step, per worker
    const int w = plan.workers();
    const double dp = spec.dp_peer ? double(o.steps) * 2.0 * (w - 1) / w * double(P) * 4.0 : 0;
    io::progress bar(spec.name, rounds);
    auto on_round = [&](const train::round_report& rr) {
      bar.update(rr.round + 1, "inner loss", rr.mean_loss());
    };
    if (spec.data == shards::kmeans) {
      const auto t =
          train::train_paths(model, plan, su.theta0, su.kmeans_shards, inner, tcfg, {}, on_round)
              .value_or_throw();
      const auto n =
          route::routed_nll(model, route::theta_pointers(t.theta), ev.spans,
                            plan.paths() == 1 ? to_path0 : su.kmeans_routes, rule, ws_eval);
      add_row(spec.name, n.bits_per_token(), t.bytes_per_worker, dp, secs(t0), params, t.curve);
      continue;
    }
    // Routed: top-n k-means shards, then discriminative re-routings (train/routed_training.hpp).
    auto on_reroute = [&](int q, int r, auto& rr, auto& s) {
      train::print_rerouting(stdout, spec.name, q, r, rr, su.train.size(), s);
    };
    const auto t = train::train_routed(model, plan, su.theta0, su.docs, su.kmeans_top, inner, rcfg,
                                       ws_eval, on_reroute, on_round)
                       .value_or_throw();
    train::print_early_stopping(stdout, spec.name, t);
    const double train_s = secs(t0);
    const auto th = route::theta_pointers(t.trained.theta);
    const auto sc = route::score_routing_rules(model, th, ev.spans, su.eval_features, t.router,
                                               su.theta0.data(), rule, ws_eval);
    for (std::size_t i = 0; i < sc.scores.size(); ++i)
      add_row(spec.name + sc.scores[i].suffix, sc.scores[i].n.bits_per_token(),
              t.trained.bytes_per_worker, dp, train_s + (i ? sc.scores[i].seconds : 0), params,
              i ? std::vector<double>{} : t.trained.curve);
    // Diagnostics: does each path specialise? Every path scores every document.
    const auto sp = route::specialisation_of(
        route::per_path_nll(model, th, ev.spans, rule, ws_eval), sc.routed, su.scored_domain);
    route::print_specialisation(stdout, sp, spec.name, o.split);
    diagnostics[spec.name] = route::specialisation_json(sp);
    diagnostics[spec.name]["path_tokens"] = t.shard_tokens;
  }

  // ---- table ----
  std::printf("\n");
  table.print(stdout);
  std::printf(
      "evaluated: every row with its parameters after its final (outer) step; "
      "scorer %s on %zu %s documents after a %d-byte prefix\n",
      rule.name().c_str(), ev.spans.size(), o.split.c_str(), so.prefix);
  std::printf("total wall time %.0f s\n", secs(t_all));
  // clang-format off
  const json config{{"d", o.d}, {"layers", o.layers}, {"ctx", o.ctx}, {"batch", o.batch},
                    {"steps", o.steps}, {"inner", o.inner}, {"pretrain", o.pretrain},
                    {"prefix", so.prefix}, {"overlap", so.overlap}, {"lr", o.lr},
                    {"row_lr", o.row_lr}, {"path_rescale", o.path_rescale},
                    {"outer_lr", o.outer_lr}, {"outer_momentum", o.outer_momentum},
                    {"reroutes", o.reroutes}, {"early_stop", o.early_stop}, {"stride", rule.S}};
  std::printf("%s\n", json({{"bench", o.bench}, {"split", o.split}, {"rows", rows},
                            {"corpus", o.corpus}, {"diagnostics", diagnostics},
                            {"config", config}}).dump().c_str());
  // clang-format on
  return 0;
}
