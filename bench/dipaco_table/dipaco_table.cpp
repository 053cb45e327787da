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

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "paco/io/io.hpp"
#include "paco/nn/nn.hpp"
#include "paco/optim/optim.hpp"
#include "paco/outer/outer.hpp"
#include "paco/path/level_map.hpp"
#include "paco/path/path_plan.hpp"
#include "paco/route/route.hpp"
#include "paco/train/train.hpp"

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
  std::vector<std::string> rows{"dense",  "dense_4x",      "diloco_p4",
                                "moe_p4", "moe_p4_routed", "dipaco_2x2"};
  std::string base_file;              // cache of the base model (loaded if it matches)
  std::string path_rescale = "none";  // routed rows' outer-gradient rescale (outer/delta.hpp)
  float outer_lr = 0.7f, outer_momentum = 0.9f;  // outer Nesterov of every multi-worker row
  int reroutes = 4;    // discriminative re-routings over the rounds after the k-means third
  int early_stop = 0;  // routed rows: per-path early stopping every n rounds of the last phase
  std::uint64_t seed = 1;
  bool wants(const std::string& r) const {
    return std::find(rows.begin(), rows.end(), r) != rows.end();
  }
};

double secs(clk::time_point t0) {
  return std::chrono::duration<double>(clk::now() - t0).count();
}
double round4(double x) {
  return std::round(x * 1e4) / 1e4;
}

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

struct row {
  std::string name;
  double bpb = 0, bytes_sent = 0, dp_bytes = 0, wall_s = 0;
  std::size_t params_total = 0;
  std::vector<double> curve;  // mean training loss (nats/byte): every 1000 steps / 10 rounds
};

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
  app.add_option("--rows", o.rows, "comma-separated rows to run")->delimiter(',');
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
  app.add_option("--early-stop", o.early_stop,
                 "routed rows: per-path early stopping on each path's held-out tails every n "
                 "rounds of the last phase (0: off)")
      ->check(CLI::Range(0, 1000));
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
  const auto train = train::hold_out_tails(corpus->subset(io::split::train), o.router_bytes);
  const auto eval = train::hold_out_tails(
      corpus->subset(o.split == "test" ? io::split::test : io::split::validation), 0);
  auto rdocs = train.routed();
  const auto full = train::shards_of(rdocs, std::vector<std::vector<int>>(train.size(), {0}), 1)[0];
  std::printf(
      "%s: %zu training documents (%.2f MB for training, %.2f MB held out for the "
      "router), %zu %s documents\n",
      o.corpus.c_str(), train.size(), full.ids.size() / 1e6, train.tail_tokens() / 1e6, eval.size(),
      o.split.c_str());

  nn::gpt model({.vocab = 256, .ctx = o.ctx, .d = o.d, .layers = o.layers, .heads = o.heads});
  const std::size_t P = model.param_count();
  std::printf(
      "per-path model: GPT d=%d layers=%d ctx=%d, %.2fM parameters; S=%d inner steps per "
      "worker, H=%d, batch %d; GEMM %s; scorer %s\n",
      o.d, o.layers, o.ctx, P / 1e6, o.steps, o.inner, o.batch, nn::gemm_backend(),
      rule.name().c_str());

  // ---- the shared base model (pretraining, also the router's frozen feature extractor) ----
  auto dense = [&](arena<host>& a, int n, float lr, float min_lr, std::uint64_t seed,
                   const std::string& label) {
    io::progress bar(label, n);
    double ema = NAN;
    return train::dense_run(model, a, full,
                            {.batch = o.batch,
                             .ctx = o.ctx,
                             .grad_clip = 1.0f,
                             .schedule = {.lr = lr, .min_lr = min_lr, .warmup = 50, .total = n},
                             .threads = o.threads},
                            optim::adamw{.lr = lr}, n, seed, 1000, [&](long t, double l) {
                              ema = std::isnan(ema) ? l : 0.98 * ema + 0.02 * l;
                              bar.update(t, "loss", ema);
                            });
  };
  arena<host> base(model.layout());
  const std::string base_key = o.corpus + ":" + o.data + "/" + std::to_string(o.d) + "/" +
                               std::to_string(o.layers) + "/" + std::to_string(o.ctx) + "/" +
                               std::to_string(o.batch) + "/" + std::to_string(o.pretrain) + "/" +
                               std::to_string(o.lr) + "/" + std::to_string(o.seed);
  const auto b = train::load_or_pretrain(
      model, base, {.file = o.base_file, .key = base_key, .step = o.pretrain}, o.seed,
      [&](arena<host>& a) { dense(a, o.pretrain, o.lr, o.min_lr, o.seed + 1, "base"); });
  if (b.origin == train::base_origin::loaded)
    std::printf("base model loaded from %s\n", o.base_file.c_str());
  if (b.origin == train::base_origin::replaced)
    std::printf("%s does not hold this configuration's base model; pretraining\n",
                o.base_file.c_str());
  if (!b.saved) std::fprintf(stderr, "%s: %s\n", o.bench.c_str(), b.saved.error().what().c_str());
  const std::vector<float> theta0(base.get(plane::param).begin(), base.get(plane::param).end());

  // ---- the evaluation documents (scored after the prefix), router features, k-means shards ----
  const auto ev = route::after_prefix(eval.wholes(), std::size_t(o.prefix));
  auto ws_eval = model.make_workspace({o.batch, o.ctx});
  std::vector<std::span<const std::int32_t>> ef;
  std::vector<std::string> span_domain;
  for (auto i : ev.doc) ef.push_back(eval.whole(i)), span_domain.push_back(eval.domain[i]);
  const auto ftrain = route::prefix_features(model, theta0.data(), train.wholes(), o.prefix);
  const auto feval = route::prefix_features(model, theta0.data(), ef, o.prefix);
  const int D = o.d;
  auto km = route::kmeans_router::fit(ftrain, int(train.size()), D, {.k = K, .seed = o.seed});
  if (!km) {
    std::fprintf(stderr, "%s: %s\n", o.bench.c_str(), km.error().what().c_str());
    return 2;
  }
  rdocs.features = ftrain;
  rdocs.dim = D;
  const auto km_sets = train::top_sets(*km, rdocs, 1),
             km_top = train::top_sets(*km, rdocs, o.overlap);
  std::vector<int> km_eval(ev.spans.size());
  for (std::size_t j = 0; j < ev.spans.size(); ++j) km_eval[j] = km->route(&feval[j * D]);
  const auto km_shards = train::shards_of(rdocs, km_sets, K);
  std::printf("k-means shards (documents / MB):");
  for (int k = 0; k < K; ++k)
    std::printf(" %d: %zu / %.2f", k,
                std::size_t(std::count_if(km_sets.begin(), km_sets.end(),
                                          [&](auto& s) { return s[0] == k; })),
                km_shards[std::size_t(k)].ids.size() / 1e6);
  std::printf("\n");

  // ---- the rows ----
  const int rounds = o.steps / o.inner;
  const outer::nesterov outer_opt{.lr = o.outer_lr, .momentum = o.outer_momentum};
  if (auto v = outer_opt.validate(); !v) {
    std::fprintf(stderr, "%s: %s\n", o.bench.c_str(), v.error().what().c_str());
    return 2;
  }
  train::local_trainer_config<outer::nesterov> tcfg{.inner = {.batch = o.batch,
                                                              .ctx = o.ctx,
                                                              .steps = o.inner,
                                                              .grad_clip = 1.0f,
                                                              .schedule = {.lr = o.row_lr,
                                                                           .min_lr = o.row_min_lr,
                                                                           .warmup = 50,
                                                                           .total = o.steps},
                                                              .threads = 1},
                                                    .outer = outer_opt,
                                                    .rounds = rounds,
                                                    .seed = o.seed + 100};
  const optim::adamw inner{.lr = o.row_lr};
  std::vector<row> rows;
  json diagnostics = json::object();
  auto add_row = [&](row r) {
    std::printf("%-26s %s %.4f bpb  (%.0f s)\n", r.name.c_str(), o.split.c_str(), r.bpb, r.wall_s);
    rows.push_back(std::move(r));
  };
  for (const auto& spec : table_rows) {
    if (!o.wants(spec.name)) continue;
    const auto t0 = clk::now();
    if (spec.experts.empty()) {
      arena<host> a(model.layout());
      std::copy(theta0.begin(), theta0.end(), a.get(plane::param).begin());
      auto curve = dense(a, spec.step_mult * o.steps, o.row_lr, o.row_min_lr,
                         o.seed + 10 + std::uint64_t(spec.step_mult), spec.name);
      const std::vector<const float*> th{a.get(plane::param).data()};
      const auto n = route::routed_nll(model, th, ev.spans, std::vector<int>(ev.spans.size(), 0),
                                       rule, ws_eval);
      add_row({spec.name, n.bits_per_token(), 0, 0, secs(t0), P, std::move(curve)});
      continue;
    }
    const int L = int(spec.experts.size());
    auto plan = path::path_plan::make_runtime(
        spec.experts, *path::split_gpt_levels(model.layout(), o.layers, L), spec.workers_per_path);
    if (!plan) throw error_exception(plan.error());
    std::size_t params = P;  // every module once; a level's span counted once per expert
    for (int l = 0; l < L; ++l)
      params += std::size_t(spec.experts[std::size_t(l)] - 1) * plan->level(l).size;
    // ring all-reduce of fp32 gradients every step, per worker
    const int w = plan->workers();
    const double dp = spec.dp_peer ? double(o.steps) * 2.0 * (w - 1) / w * double(P) * 4.0 : 0;
    io::progress bar(spec.name, rounds);
    auto on_round = [&](const sync::round_report& rr) {
      bar.update(rr.round + 1, "inner loss", rr.mean_loss());
    };
    if (spec.data == shards::kmeans) {
      auto t = train::train_paths(model, *plan, theta0, km_shards, inner, tcfg, {}, on_round);
      if (!t) throw error_exception(t.error());
      const auto n = route::routed_nll(
          model, route::theta_pointers(t->theta), ev.spans,
          plan->paths() == 1 ? std::vector<int>(ev.spans.size(), 0) : km_eval, rule, ws_eval);
      add_row({spec.name, n.bits_per_token(), t->bytes_per_worker, dp, secs(t0), params, t->curve});
      continue;
    }
    // Routed: top-n k-means shards, then discriminative re-routings (train/routed_training.hpp).
    auto rcfg = train::routed_training_config<outer::nesterov>{.trainer = tcfg,
                                                               .reroutes = o.reroutes,
                                                               .reroute = {.overlap = o.overlap},
                                                               .rule = rule,
                                                               .early_stop_every = o.early_stop};
    rcfg.trainer.delta = {.weight_by_shard = true,
                          .rescale = *outer::parse_path_rescale(o.path_rescale)};
    auto t = train::train_routed(
        model, *plan, theta0, rdocs, km_top, inner, rcfg, ws_eval,
        [&](int q, int round, const train::rerouting& rr, const std::vector<io::token_stream>& s) {
          std::printf(
              "%s: re-routing %d at round %d: %d of %zu training documents changed path; "
              "shards (MB):",
              spec.name.c_str(), q, round, rr.moved, train.size());
          for (auto& x : s) std::printf(" %.2f", x.ids.size() / 1e6);
          std::printf("\n");
        },
        on_round);
    if (!t) throw error_exception(t.error());
    if (!t->best_round.empty()) {
      std::printf("%s: early stopping kept each path's parameters of round (held-out bpb):",
                  spec.name.c_str());
      for (std::size_t p = 0; p < t->best_round.size(); ++p)
        std::printf(" %ld (%.4f)", t->best_round[p] + 1, t->best_bits[p]);
      std::printf("\n");
    }
    const double train_s = secs(t0);
    const auto th = route::theta_pointers(t->trained.theta);
    const auto sc = route::score_routing_rules(model, th, ev.spans, feval, t->router, theta0.data(),
                                               rule, ws_eval);
    for (std::size_t i = 0; i < sc.scores.size(); ++i)
      add_row({spec.name + sc.scores[i].suffix, sc.scores[i].n.bits_per_token(),
               t->trained.bytes_per_worker, dp, train_s + (i ? sc.scores[i].seconds : 0), params,
               i ? std::vector<double>{} : t->trained.curve});
    // Diagnostics: does each path specialise? Every path scores every document.
    const auto sp = route::specialisation_of(
        route::per_path_nll(model, th, ev.spans, rule, ws_eval), sc.routed, span_domain);
    route::print_specialisation(stdout, sp, spec.name, o.split);
    json mat = json::object();
    for (std::size_t d = 0; d < sp.domains.size(); ++d) {
      std::vector<double> b;
      for (auto& n : sp.nats[d]) b.push_back(round4(n.bits_per_token()));
      mat[sp.domains[d]] = {{"bpb", b}, {"routed", sp.routed[d]}, {"best", sp.best[d]}};
    }
    diagnostics[spec.name] = {{"oracle_bpb", round4(sp.oracle.bits_per_token())},
                              {"router_picks_best", sp.router_picks_best},
                              {"documents", sp.documents},
                              {"path_tokens", t->shard_tokens},
                              {"domains", mat}};
  }

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
      rule.name().c_str(), ev.spans.size(), o.split.c_str(), o.prefix);
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
                              {"early_stop", o.early_stop},
                              {"stride", rule.S}}}})
                          .dump()
                          .c_str());
  return 0;
}
