// bench/run compress_quality: DiLoCo P=4 on the Brown corpus with each codec (error feedback on)
// against fp32: final validation bits per byte and the bytes each worker sent.
//
// Every row starts from the same base model (pretrained on all training text), trains 4 workers
// on the same random (i.i.d.) shards of the training documents with the same seeds, inner steps
// and rounds, and combines their pseudo-gradients with a plain mean (outer Nesterov 0.7 / 0.9,
// or sgd lr 1 with --outer sgd):
//   store rows      fp32, int8, int4, lgreco:int, topk:D: workers push to an in-process
//                   local_store; bytes = request header + payload per push (what store::client
//                   sends over a transport), per worker.
//   all-reduce rows powersgd:R: the ranks run blocking DiLoCo through train::round_loop over inproc
//   (threads as ranks) with
//                   two summed rounds; bytes = what the rank sent in every collective
//                   (measured), compared with a fp32 ring all-reduce of the same Δ.
// Scoring: the whole of every validation document, bits per byte (one token per byte).
// LAST line: {"bench":"compress_quality","rows":[{"codec","val_bpb","bytes_sent","ratio_bytes",
// "rel_bpb",...}],...}.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <sstream>
#include <thread>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "paco/io/io.hpp"
#include "paco/net/inproc.hpp"
#include "paco/nn/nn.hpp"
#include "paco/optim/optim.hpp"
#include "paco/outer/outer.hpp"
#include "paco/path/level_map.hpp"
#include "paco/path/module_grid.hpp"
#include "paco/route/route.hpp"
#include "paco/train/diloco_allreduce.hpp"
#include "paco/train/dipaco_local.hpp"
#include "paco/train/inner_loop.hpp"
#include "paco/train/local_trainer.hpp"
#include "paco/train/path_worker.hpp"
#include "paco/train/round_loop.hpp"

using namespace paco;
using clk = std::chrono::steady_clock;

namespace {

struct options {
  int d = 128, ctx = 128, layers = 4, heads = 4, batch = 16;
  int rounds = 6;      // outer rounds
  int inner = 100;     // H
  int pretrain = 300;  // base model steps
  int threads = 2;
  int workers = 4;
  int lgreco_every = 2;
  double lgreco_alpha = 1.0;
  float lr = 2e-3f, min_lr = 2e-4f;
  std::uint64_t seed = 1;
  std::string codecs = "fp32,int8,int4,lgreco:int,topk:0.01,powersgd:4";
  std::string outer = "nesterov";  // nesterov (lr 0.7, momentum 0.9) | sgd (lr 1: FedAvg)
};

double secs(clk::time_point t0) {
  return std::chrono::duration<double>(clk::now() - t0).count();
}

struct row {
  std::string codec, transport;
  double val_bpb = 0, bytes_sent = 0, payload_bytes = 0, fp32_bytes = 0, wall_s = 0;
  std::vector<double> bytes_per_round;  // per worker
};

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  std::string t;
  while (std::getline(in, t, ','))
    if (!t.empty()) out.push_back(t);
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  options o;
  CLI::App app{"DiLoCo P=4 on Brown: validation bits per byte and bytes sent, per codec"};
  app.add_option("--rounds", o.rounds, "outer rounds");
  app.add_option("--inner", o.inner, "inner steps per round (H)");
  app.add_option("--pretrain", o.pretrain, "steps of the shared base model");
  app.add_option("--d", o.d);
  app.add_option("--ctx", o.ctx);
  app.add_option("--layers", o.layers);
  app.add_option("--batch", o.batch);
  app.add_option("--threads", o.threads, "cores (the workers share them)");
  app.add_option("--lgreco-every", o.lgreco_every, "L-GreCo: rounds between level choices (F)");
  app.add_option("--lgreco-alpha", o.lgreco_alpha, "L-GreCo: error budget multiplier (α)");
  app.add_option("--codecs", o.codecs,
                 "comma-separated compress specs; rel_bpb is against the fp32 row (if any)");
  app.add_option("--seed", o.seed);
  app.add_option("--outer", o.outer,
                 "outer optimizer of every row: nesterov (lr 0.7, momentum 0.9) or sgd (lr 1)")
      ->check(CLI::IsMember({"nesterov", "sgd"}));
  CLI11_PARSE(app, argc, argv);
  const auto names = split(o.codecs);
  if (names.empty()) {
    std::fprintf(stderr, "compress_quality: --codecs is empty\n");
    return 2;
  }
  std::vector<store::compression> comps;
  for (auto& n : names) {
    auto c = store::parse_compression(n, std::size_t(o.lgreco_every), o.lgreco_alpha);
    if (!c) {
      std::fprintf(stderr, "compress_quality: %s\n", c.error().what().c_str());
      return 2;
    }
    comps.push_back(*c);
  }
  const auto t_all = clk::now();

  // ---- data: Brown; random shards of the training documents; whole validation documents ----
  auto corpus = io::load_brown(io::default_brown_dir());
  if (!corpus) {
    std::fprintf(stderr, "compress_quality: %s\n", corpus.error().what().c_str());
    return 2;
  }
  io::byte_tokenizer tok;
  std::vector<std::vector<std::int32_t>> train, val;
  for (auto& d : corpus->subset(io::split::train).docs) train.push_back(tok.encode(d.text));
  for (auto& d : corpus->subset(io::split::validation).docs) val.push_back(tok.encode(d.text));
  const int K = o.workers;
  const auto [shards, all] = io::deal_random_shards(train, K, o.seed * 977 + 3);
  std::size_t val_bytes = 0;
  for (auto& v : val) val_bytes += v.size();
  std::printf("Brown: %zu training documents in %d random shards (MB:", train.size(), K);
  for (auto& s : shards) std::printf(" %.2f", s.ids.size() / 1e6);
  std::printf("), %zu validation documents (%.2f MB, scored whole)\n", val.size(), val_bytes / 1e6);

  nn::gpt model({.vocab = 256, .ctx = o.ctx, .d = o.d, .layers = o.layers, .heads = o.heads});
  const std::size_t P = model.param_count();
  std::printf(
      "model: GPT d=%d layers=%d heads=%d ctx=%d, %.2fM parameters; DiLoCo P=%d, %d rounds "
      "x H=%d, batch %d; L-GreCo every %d rounds; GEMM %s\n",
      o.d, o.layers, o.heads, o.ctx, P / 1e6, K, o.rounds, o.inner, o.batch, o.lgreco_every,
      nn::gemm_backend());

  // ---- the shared base model ----
  arena<host> base(model.layout());
  model.init(base, o.seed);
  {
    train::inner_loop<nn::gpt, optim::adamw> loop(
        model,
        {.batch = o.batch,
         .ctx = o.ctx,
         .grad_clip = 1.0f,
         .schedule = {.lr = o.lr, .min_lr = o.lr, .warmup = 50, .total = o.pretrain},
         .threads = o.threads},
        all, o.seed + 1);
    io::progress bar("base model", o.pretrain);
    loop.run(base, optim::adamw{.lr = o.lr}, o.pretrain, [&](long t, double l) {
      char txt[48];
      std::snprintf(txt, sizeof txt, "loss %.3f", l);
      bar.update(t, txt);
    });
  }
  const std::vector<float> theta0(base.get(plane::param).begin(), base.get(plane::param).end());

  auto ws = model.make_workspace({o.batch, o.ctx});
  const auto rule = route::sliding_window::make(o.ctx).value_or_throw();  // the one scorer
  std::printf("scorer %s\n", rule.name().c_str());
  auto val_bpb = [&](const std::vector<float>& theta) {
    std::vector<route::scored_span> spans;
    for (auto& v : val)
      if (v.size() > 1) spans.push_back({v, 1, v.size()});
    const std::vector<const float*> one{theta.data()};
    return route::routed_nll(model, one, spans, std::vector<int>(spans.size(), 0), rule, ws)
        .bits_per_token();
  };
  std::printf("base model: val %.4f bpb\n", val_bpb(theta0));

  const auto levels = *path::split_gpt_levels(model.layout(), o.layers, 1);  // DiLoCo: 1 module
  const auto plan = *path::path_plan::make(path::module_grid<1>::experts({1}), levels, K);
  train::inner_config icfg{
      .batch = o.batch,
      .ctx = o.ctx,
      .steps = o.inner,
      .grad_clip = 1.0f,
      .schedule = {.lr = o.lr, .min_lr = o.min_lr, .warmup = 50, .total = long(o.rounds) * o.inner},
      .threads = std::max(1, o.threads / K)};
  const optim::adamw inner{.lr = o.lr};
  std::vector<train::worker_spec> spec(K);
  for (int w = 0; w < K; ++w) spec[std::size_t(w)] = {&shards[std::size_t(w)], o.seed + 100 + w};
  const double fp32_push = double(store::wire::push_bytes(4 * levels[0].size));

  // ---- L-GreCo's view of a pseudo-gradient: one worker's Δ after H steps from the base ----
  // Per tensor, the quantisation error ‖g − Q_b(g)‖ at b = 2..8 bits and the multiple-choice
  // knapsack's answer at budgets α·Σ e(int4), over bits {2, 4, 8} and over 2..8: how many fewer
  // bytes than uniform int4 each buys.
  nlohmann::json sweep = nlohmann::json::array();
  {
    train::path_worker<nn::gpt, optim::adamw> wk(0, model, levels, {0}, inner, icfg, shards[0],
                                                 spec[0].seed);
    auto p = wk.state().get(plane::param);
    std::copy(theta0.begin(), theta0.end(), p.begin());
    wk.train();
    std::vector<float> delta(p.size());
    for (std::size_t i = 0; i < p.size(); ++i) delta[i] = theta0[i] - p[i];
    const auto segs = *store::module_segments(model, levels[0]);
    compress::quantize q;
    const std::vector<int> all_bits = compress::lgreco_bits();  // 2..8
    std::vector<std::vector<double>> bytes, errs;               // [tensor][bits − 2]
    double e4 = 0, b4 = 0;
    std::vector<double> r24, r48;
    for (auto& sg : segs) {
      const slice<const float> g(delta.data() + sg.offset, sg.size());
      errs.emplace_back();
      bytes.emplace_back();
      for (int bits : all_bits) {
        errs.back().push_back(q.error(bits, g));
        bytes.back().push_back(double(q.wire_bytes(sg.size(), bits)));
      }
      const auto& e = errs.back();
      e4 += e[2];
      b4 += bytes.back()[2];
      r24.push_back(e[0] / e[2]);
      r48.push_back(e[2] / e[6]);
    }
    std::sort(r24.begin(), r24.end());
    std::sort(r48.begin(), r48.end());
    std::printf(
        "L-GreCo error profile of one worker's Δ (%zu tensors): e(int2)/e(int4) %.1f..%.1f "
        "(median %.1f), e(int4)/e(int8) %.1f..%.1f (median %.1f)\n",
        segs.size(), r24.front(), r24.back(), r24[r24.size() / 2], r48.front(), r48.back(),
        r48[r48.size() / 2]);
    // The same tables restricted to the candidate bits `use` (indices into all_bits).
    auto restrict_to = [&](const std::vector<std::size_t>& use) {
      std::vector<std::vector<double>> bb(segs.size()), ee(segs.size());
      for (std::size_t t = 0; t < segs.size(); ++t)
        for (auto u : use) {
          bb[t].push_back(bytes[t][u]);
          ee[t].push_back(errs[t][u]);
        }
      return std::pair{bb, ee};
    };
    const std::vector<std::size_t> set248{0, 2, 6}, set2to8{0, 1, 2, 3, 4, 5, 6};
    for (double alpha : {1.0, 1.25, 1.5, 2.0, 3.0}) {
      nlohmann::json entry = {{"alpha", alpha}};
      std::printf("  budget %.2f x e(int4):", alpha);
      for (const auto* use : {&set248, &set2to8}) {
        auto [bb, ee] = restrict_to(*use);
        const std::size_t def = use->size() == 3 ? 1 : 2;  // int4's index in the set
        const std::vector<std::size_t> fallback(segs.size(), def);
        auto sol = compress::lgreco_solve(bb, ee, alpha * e4, 10000, fallback);
        if (!sol) continue;
        std::vector<int> hist(all_bits.size(), 0);
        for (auto c : sol->choice) ++hist[(*use)[c]];
        const bool full = use->size() == all_bits.size();
        std::printf(" %s %.3fx fewer bytes than uniform int4 (tensors per bits 2..8:",
                    full ? "| bits 2..8:" : "bits {2,4,8}:", b4 / sol->bytes);
        for (int h : hist) std::printf(" %d", h);
        std::printf(")");
        entry[full ? "ratio_vs_int4_bits_2to8" : "ratio_vs_int4_bits_248"] =
            std::round(b4 / sol->bytes * 1000) / 1000;
        entry[full ? "tensors_per_bits_2to8" : "tensors_per_bits_248"] = hist;
      }
      std::printf("\n");
      sweep.push_back(entry);
    }
  }

  std::vector<row> rows;
  // One row per codec, with the outer optimizer chosen by --outer.
  auto run_row = [&](const store::compression& c, const auto& outer_opt) -> int {
    using outer_t = std::decay_t<decltype(outer_opt)>;
    const auto t0 = clk::now();
    row r{c.name(), "store"};
    std::vector<float> theta = theta0;
    io::progress bar(r.codec.c_str(), o.rounds);
    if (!c.spec.lgreco && c.spec.kind == compress::codec_kind::powersgd) {
      // ---- all-reduce DiLoCo: threads as ranks over inproc ----
      r.transport = "allreduce";
      auto world = net::inproc::world(K);
      std::vector<status> errs(static_cast<std::size_t>(K));
      std::vector<train::diloco_traffic> traffic(static_cast<std::size_t>(K));
      std::vector<std::vector<double>> per_round(static_cast<std::size_t>(K));
      std::vector<double> loss(static_cast<std::size_t>(K));
      std::vector<std::thread> th;
      for (int w = 0; w < K; ++w)
        th.emplace_back([&, w] {
          train::path_worker<nn::gpt, optim::adamw> wk(w, model, levels, {0}, inner, icfg,
                                                       shards[std::size_t(w)],
                                                       spec[std::size_t(w)].seed);
          auto p = wk.state().get(plane::param);
          std::copy(theta0.begin(), theta0.end(), p.begin());
          auto codec = train::diloco_codec(c, model);
          if (!codec) return void(errs[std::size_t(w)] = codec.error());
          std::vector<compress::module_codec> codecs;
          codecs.push_back(std::move(*codec));
          train::round_loop<net::inproc, train::path_worker<nn::gpt, optim::adamw>, outer_t,
                            train::blocking>
              rep(world[std::size_t(w)], wk, outer_opt, {}, {}, std::move(codecs));
          errs[std::size_t(w)] =
              rep.run(o.rounds, std::chrono::hours(1), [&](const train::round_end& e) {
                per_round[std::size_t(w)].push_back(double(e.bytes_sent));
                loss[std::size_t(w)] = e.loss;
                if (w == 0) {
                  char txt[48];
                  std::snprintf(txt, sizeof txt, "inner loss %.3f", e.loss);
                  bar.update(e.round + 1, txt);
                }
              });
          traffic[std::size_t(w)] = rep.traffic();
          if (w == 0) theta.assign(p.begin(), p.end());
        });
      for (auto& t : th) t.join();
      for (auto& e : errs)
        if (!e) {
          std::fprintf(stderr, "compress_quality: %s: %s\n", r.codec.c_str(),
                       e.error().what().c_str());
          return 3;
        }
      for (int w = 0; w < K; ++w) {
        r.bytes_sent += double(traffic[std::size_t(w)].bytes_sent) / K;
        r.payload_bytes += double(traffic[std::size_t(w)].payload_bytes) / K;
      }
      r.bytes_per_round = per_round[0];
      // fp32 over the same transport: one ring all-reduce of Δ and the hash check per round.
      const std::size_t n = model.layout().total();
      r.fp32_bytes =
          double(o.rounds) * double(collectives::allreduce_ring.cost(4 * n, K).bytes +
                                    collectives::allreduce_ring.cost(8 * std::size_t(K), K).bytes);
    } else {
      // ---- workers push to an in-process store (train/local_trainer.hpp) ----
      using trainer_t = train::local_trainer<nn::gpt, optim::adamw, outer_t>;
      auto t = trainer_t::make(model, plan, theta0, shards, inner,
                               {.inner = icfg,
                                .outer = outer_opt,
                                .delta = {.weight_by_shard = false},
                                .rounds = o.rounds,
                                .seed = o.seed + 100,
                                .compression = c});
      auto sent = [&] {  // bytes per worker so far
        double b = 0;
        for (int w = 0; w < K; ++w) b += double((*t)->store().bytes_sent(w)) / K;
        return b;
      };
      double prev = 0;
      const status st = !t ? status(t.error()) : (*t)->run({}, [&](const train::round_report& rr) {
        r.bytes_per_round.push_back(sent() - prev);
        prev = sent();
        bar.update(rr.round + 1, "inner loss", rr.mean_loss());
      });
      if (!st) {
        std::fprintf(stderr, "compress_quality: %s: %s\n", r.codec.c_str(),
                     st.error().what().c_str());
        return 3;
      }
      r.bytes_sent = sent();
      r.payload_bytes = r.bytes_sent - double(o.rounds) * sizeof(store::wire::request);
      r.fp32_bytes = double(o.rounds) * fp32_push;
      theta = (*t)->path_thetas()[0];
    }
    bar.finish();
    r.val_bpb = val_bpb(theta);
    r.wall_s = secs(t0);
    std::printf(
        "%-12s val %.4f bpb, %.2f MB sent per worker (%.2fx fewer than fp32 over %s); "
        "per round:",
        r.codec.c_str(), r.val_bpb, r.bytes_sent / 1e6, r.fp32_bytes / r.bytes_sent,
        r.transport.c_str());
    for (double b : r.bytes_per_round) std::printf(" %.0f", b);
    std::printf(" bytes; %.0f s\n", r.wall_s);
    rows.push_back(r);
    return 0;
  };
  for (auto& c : comps) {
    const int rc = o.outer == "sgd" ? run_row(c, outer::sgd{}) : run_row(c, outer::nesterov{});
    if (rc != 0) return rc;
  }

  // ---- table and targets ----
  auto find = [&](const std::string& n) -> const row* {
    for (auto& r : rows)
      if (r.codec == n) return &r;
    return nullptr;
  };
  const double ref = find("fp32") ? find("fp32")->val_bpb : NAN;  // NaN: no fp32 row
  io::table table(
      {"codec (+EF)", "transport", "val bpb", "vs fp32", "bytes/worker", "fewer bytes", "wall s"});
  nlohmann::json jr = nlohmann::json::array();
  for (auto& r : rows) {
    const double rel = (r.val_bpb - ref) / ref, ratio = r.fp32_bytes / r.bytes_sent;
    table.add({r.codec, r.transport, io::cell(r.val_bpb, 4), io::cell(100 * rel, 2, "%", true),
               io::cell(r.bytes_sent / 1e6, 3, " MB"), io::cell(ratio, 2, "x"),
               io::cell(r.wall_s, 0)});
    jr.push_back({{"codec", r.codec},
                  {"transport", r.transport},
                  {"val_bpb", std::round(r.val_bpb * 1e5) / 1e5},
                  {"bytes_sent", std::llround(r.bytes_sent)},
                  {"payload_bytes", std::llround(r.payload_bytes)},
                  {"fp32_bytes", std::llround(r.fp32_bytes)},
                  {"ratio_bytes", std::round(ratio * 1000) / 1000},
                  {"rel_bpb", std::isnan(rel) ? nlohmann::json()
                                              : nlohmann::json(std::round(rel * 1e6) / 1e6)},
                  {"bytes_per_round", r.bytes_per_round},
                  {"wall_s", std::round(r.wall_s * 10) / 10}});
  }
  std::printf("\n");
  table.print(stdout);
  nlohmann::json targets = nlohmann::json::object();
  auto target = [&](const char* name, bool have, bool met, const std::string& text) {
    if (!have) return;
    targets[name] = {{"met", met}, {"measured", text}};
    std::printf("target %-24s %s  (%s)\n", name, met ? "met" : "MISSED", text.c_str());
  };
  auto fmt = [](const char* f, auto... a) {
    char s[96];
    std::snprintf(s, sizeof s, f, a...);
    return std::string(s);
  };
  std::printf("\n");
  if (auto* r = find("int8"); r && !std::isnan(ref)) {
    const double rel = (r->val_bpb - ref) / ref, ratio = r->fp32_bytes / r->bytes_sent;
    target("int8_bpb_within_1pct", true, rel <= 0.01,
           fmt("%+.2f%% bpb, %.2fx fewer bytes", 100 * rel, ratio));
    target("int8_bytes_4x", true, ratio >= 4.0, fmt("%.2fx fewer bytes", ratio));
  }
  if (auto* r = find("int4"); r && !std::isnan(ref)) {
    const double rel = (r->val_bpb - ref) / ref, ratio = r->fp32_bytes / r->bytes_sent;
    target("int4_bpb_within_3pct", true, rel <= 0.03,
           fmt("%+.2f%% bpb, %.2fx fewer bytes", 100 * rel, ratio));
    target("int4_bytes_8x", true, ratio >= 8.0, fmt("%.2fx fewer bytes", ratio));
  }
  if (auto* r = find("lgreco:int"), *u = find("int4"); r && u) {
    const double ratio = u->bytes_sent / r->bytes_sent,
                 rel = (r->val_bpb - u->val_bpb) / u->val_bpb;
    target("lgreco_1.3x_fewer_than_int4", true, ratio >= 1.3,
           fmt("%.3fx fewer bytes than int4", ratio));
    target("lgreco_bpb_within_0.5pct", true, rel <= 0.005, fmt("%+.2f%% bpb vs int4", 100 * rel));
  }
  std::printf("total wall time %.0f s\n", secs(t_all));
  std::printf("%s\n", nlohmann::json({{"bench", "compress_quality"},
                                      {"rows", jr},
                                      {"scorer", rule.name()},
                                      {"targets", targets},
                                      {"lgreco_budget_sweep", sweep},
                                      {"config",
                                       {{"d", o.d},
                                        {"layers", o.layers},
                                        {"heads", o.heads},
                                        {"ctx", o.ctx},
                                        {"batch", o.batch},
                                        {"workers", K},
                                        {"rounds", o.rounds},
                                        {"inner", o.inner},
                                        {"pretrain", o.pretrain},
                                        {"lgreco_every", o.lgreco_every},
                                        {"lgreco_alpha", o.lgreco_alpha},
                                        {"outer", o.outer},
                                        {"shards", "random"},
                                        {"params", P},
                                        {"wall_s", std::round(secs(t_all))}}}})
                          .dump()
                          .c_str());
  return 0;
}
