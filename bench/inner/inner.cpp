// bench/run inner: DiLoCo P=4 on Brown at equal tokens, one row per inner optimizer, Δ codec and
// optimizer-state period: AdamW against Muon (MuLoCo), fp32 against 2-/4-bit deltas with error
// feedback, and the optimizer's states averaged every {H, 4H, never} steps (DES-LOC's idea).
//
// Every row goes through the same code: the same base model (pretrained with AdamW on all the
// training text), the same random shards, seeds, schedule, rounds and H, the ranks as threads
// over inproc running train::round_loop (blocking, outer Nesterov 0.7 / 0.9), scored by the one
// scorer (route::sliding_window) on Brown's test documents (validation printed beside it; no
// setting here was chosen on the test figures). Bytes per rank: `bytes` is what the rank put on
// the wire (the fp32 ring all-reduce, or the all-gather of every rank's encoded Δ, plus the
// state averages and the hash checks); `payload_bytes` is its encoded Δ alone (what it would
// push to a module store).
// LAST line: {"bench":"inner","rows":[{"name","optimizer","bits","codec","desloc_period","bpb",
// "val_bpb","bytes","payload_bytes","state_bytes","wall_s"},..],"targets":{..},"config":{..}}.
#include <chrono>
#include <cmath>
#include <cstdio>
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
#include "paco/route/route.hpp"
#include "paco/store/compression.hpp"
#include "paco/train/diloco_allreduce.hpp"
#include "paco/train/inner_loop.hpp"
#include "paco/train/path_worker.hpp"
#include "paco/train/round_loop.hpp"

using namespace paco;
using clk = std::chrono::steady_clock;
using worker_t = train::path_worker<nn::gpt, optim::inner_choice>;

namespace {

struct options {
  int d = 128, ctx = 128, layers = 4, heads = 4, batch = 16;
  int rounds = 8;      // outer rounds
  int inner = 50;      // H
  int pretrain = 300;  // base model steps
  int threads = 2;
  int workers = 4;
  float base_lr = 2e-3f;              // the shared base model, the same for every setting swept
  float lr = 2e-3f, muon_lr = 0.02f;  // cosine to a tenth of the peak
  float muon_adamw_lr = 0;            // Muon's AdamW part (embeddings, norms, head); 0: --lr
  std::uint64_t seed = 1;
  // name:optimizer:codec:period (period in rounds between state averages, 0 = never)
  std::string rows =
      "adamw:adamw:fp32:0,adamw_int2:adamw:int2:0,muon:muon:fp32:0,muon_int4:muon:int4:0,"
      "muon_int2:muon:int2:0,muon_int2_minmax:muon:int2:minmax:0,adamw_desloc_H:adamw:fp32:1,adamw_"
      "desloc_4H:adamw:fp32:4,"
      "muon_desloc_4H:muon:fp32:4";
};

struct row_spec {
  std::string name, optimizer, codec;
  long period = 0;
};

struct row {
  row_spec spec;
  int bits = 32;
  double bpb = 0, val_bpb = 0, bytes = 0, payload = 0, state_bytes = 0, wall_s = 0;
};

double secs(clk::time_point t0) {
  return std::chrono::duration<double>(clk::now() - t0).count();
}

std::vector<std::string> split(const std::string& s, char by) {
  std::vector<std::string> out;
  std::stringstream in(s);
  std::string t;
  while (std::getline(in, t, by)) out.push_back(t);
  return out;
}

result<std::vector<row_spec>> parse_rows(const std::string& text) {
  std::vector<row_spec> out;
  for (auto& r : split(text, ',')) {
    if (r.empty()) continue;
    auto f = split(r, ':');  // the codec may hold colons itself (int2:minmax)
    if (f.size() < 4)
      return error(errc::invalid_argument,
                   "--rows: '" + r + "' is not name:optimizer:codec:period");
    char* end = nullptr;
    const long k = std::strtol(f.back().c_str(), &end, 10);
    if (*end != '\0' || k < 0)
      return error(errc::invalid_argument, "--rows: '" + r + "': period must be rounds ≥ 0");
    std::string codec = f[2];
    for (std::size_t i = 3; i + 1 < f.size(); ++i) codec += ":" + f[i];
    out.push_back({f[0], f[1], codec, k});
  }
  if (out.empty()) return error(errc::invalid_argument, "--rows is empty");
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  options o;
  CLI::App app{"DiLoCo P=4 on Brown: AdamW vs Muon inner, low-bit deltas, optimizer-state periods"};
  app.add_option("--rounds", o.rounds, "outer rounds");
  app.add_option("--inner", o.inner, "inner steps per round (H)");
  app.add_option("--pretrain", o.pretrain, "steps of the shared base model");
  app.add_option("--d", o.d);
  app.add_option("--layers", o.layers);
  app.add_option("--batch", o.batch);
  app.add_option("--threads", o.threads, "cores (the ranks share them)");
  app.add_option("--base-lr", o.base_lr, "AdamW rate of the shared base model");
  app.add_option("--lr", o.lr, "AdamW's peak rate");
  app.add_option("--muon-adamw-lr", o.muon_adamw_lr, "peak rate of Muon's AdamW part (0: --lr)");
  app.add_option("--muon-lr", o.muon_lr, "Muon's peak rate on the hidden matrices");
  app.add_option("--rows", o.rows, "name:optimizer:codec:period,... (period: rounds, 0 never)");
  app.add_option("--seed", o.seed);
  CLI11_PARSE(app, argc, argv);
  auto specs = parse_rows(o.rows);
  if (!specs) return std::fprintf(stderr, "inner: %s\n", specs.error().what().c_str()), 2;
  const auto t_all = clk::now();

  // ---- data: Brown; random shards of the training documents; whole test documents ----
  auto corpus = io::load_brown(io::default_brown_dir());
  if (!corpus) return std::fprintf(stderr, "inner: %s\n", corpus.error().what().c_str()), 2;
  io::byte_tokenizer tok;
  std::vector<std::vector<std::int32_t>> train;
  for (auto& d : corpus->subset(io::split::train).docs) train.push_back(tok.encode(d.text));
  const int K = o.workers;
  const auto [shards, all] = io::deal_random_shards(train, K, o.seed * 977 + 3);
  const auto test = route::scored_docs::of(corpus->subset(io::split::test));
  const auto val = route::scored_docs::of(corpus->subset(io::split::validation));
  nn::gpt model({.vocab = 256, .ctx = o.ctx, .d = o.d, .layers = o.layers, .heads = o.heads});
  std::printf(
      "Brown: %zu training documents in %d random shards, %zu validation and %zu test "
      "documents scored whole; GPT d=%d layers=%d ctx=%d (%.2fM parameters); DiLoCo P=%d, %d "
      "rounds x H=%d, batch %d (%.2fM tokens per rank); GEMM %s\n",
      train.size(), K, val.size(), test.size(), o.d, o.layers, o.ctx,
      double(model.param_count()) / 1e6, K, o.rounds, o.inner, o.batch,
      double(o.rounds) * o.inner * o.batch * o.ctx / 1e6, nn::gemm_backend());

  // ---- the shared base model ----
  arena<host> base(model.layout());
  model.init(base, o.seed);
  {
    train::inner_loop<nn::gpt, optim::adamw> loop(
        model,
        {.batch = o.batch,
         .ctx = o.ctx,
         .grad_clip = 1.0f,
         .schedule = {.lr = o.base_lr, .min_lr = o.base_lr, .warmup = 50, .total = o.pretrain},
         .threads = o.threads},
        all, o.seed + 1);
    io::progress bar("base model", o.pretrain);
    loop.run(base, optim::adamw{.lr = o.base_lr}, o.pretrain,
             [&](long t, double l) { bar.update(t, "loss", l); });
  }
  const std::vector<float> theta0(base.get(plane::param).begin(), base.get(plane::param).end());
  auto ws = model.make_workspace({o.batch, o.ctx});
  const auto rule = route::sliding_window::make(o.ctx).value_or_throw();  // the one scorer
  auto bpb_on = [&](const route::scored_docs& docs, const std::vector<float>& theta) {
    const std::vector<const float*> one{theta.data()};
    return route::routed_nll(model, one, docs.spans, std::vector<int>(docs.size(), 0), rule, ws)
        .bits_per_token();
  };
  std::printf("base model: test %.4f bpb (%s)\n", bpb_on(test, theta0), rule.name().c_str());

  const auto levels = *path::split_gpt_levels(model.layout(), o.layers, 1);
  const train::inner_config icfg{.batch = o.batch,
                                 .ctx = o.ctx,
                                 .steps = o.inner,
                                 .grad_clip = 1.0f,
                                 .schedule = {.lr = o.lr,
                                              .min_lr = o.lr / 10,
                                              .warmup = 50,
                                              .total = long(o.rounds) * o.inner},
                                 .threads = std::max(1, o.threads / K)};

  std::vector<row> rows;
  for (auto& sp : *specs) {
    row r{sp};
    std::optional<store::compression> comp;
    if (sp.codec != "fp32") {
      auto c = store::parse_compression(sp.codec);
      if (!c) return std::fprintf(stderr, "inner: %s\n", c.error().what().c_str()), 2;
      comp = *c;
      r.bits = c->spec.kind == compress::codec_kind::quantize ? c->spec.bits : 0;
    }
    // Muon's matrices follow the schedule scaled by muon_lr / aux_lr (optim::muon::step).
    const float aux_lr = sp.optimizer == "muon" && o.muon_adamw_lr > 0 ? o.muon_adamw_lr : o.lr;
    train::inner_config rcfg = icfg;
    rcfg.schedule.lr = aux_lr;
    rcfg.schedule.min_lr = aux_lr / 10;
    auto opt =
        optim::inner_by_name(sp.optimizer, model, optim::adamw{.lr = aux_lr}, {.lr = o.muon_lr});
    if (!opt) return std::fprintf(stderr, "inner: %s\n", opt.error().what().c_str()), 2;
    const auto t0 = clk::now();
    auto world = net::inproc::world(K);
    std::vector<status> errs(static_cast<std::size_t>(K));
    std::vector<train::diloco_traffic> traffic(static_cast<std::size_t>(K));
    std::vector<std::size_t> state_bytes(static_cast<std::size_t>(K));
    std::vector<float> theta;
    io::progress bar(sp.name.c_str(), o.rounds);
    std::vector<std::thread> th;
    for (int w = 0; w < K; ++w)
      th.emplace_back([&, w] {
        const auto i = std::size_t(w);
        worker_t wk(w, model, levels, {0}, *opt, rcfg, shards[i], o.seed + 100 + i);
        auto p = wk.state().get(plane::param);
        std::copy(theta0.begin(), theta0.end(), p.begin());
        std::vector<compress::module_codec> codecs;
        if (comp) {
          auto c = train::diloco_codec(*comp, model);
          if (!c) return void(errs[i] = c.error());
          codecs.push_back(std::move(*c));
        }
        train::round_loop<net::inproc, worker_t, outer::nesterov, train::blocking> loop(
            world[i], wk, outer::nesterov{}, {}, {}, std::move(codecs));
        errs[i] = loop.set_state_periods({.moment1 = sp.period, .moment2 = sp.period});
        if (errs[i])
          errs[i] = loop.run(o.rounds, std::chrono::hours(1), [&](const train::round_end& e) {
            if (w == 0) bar.update(e.round + 1, "inner loss", e.loss);
          });
        if (errs[i]) errs[i] = loop.finish(std::chrono::hours(1));
        traffic[i] = loop.traffic();
        state_bytes[i] = loop.state_bytes();
        if (w == 0) theta.assign(p.begin(), p.end());
      });
    for (auto& t : th) t.join();
    bar.finish();
    for (auto& e : errs)
      if (!e)
        return std::fprintf(stderr, "inner: %s: %s\n", sp.name.c_str(), e.error().what().c_str()),
               3;
    for (int w = 0; w < K; ++w) {
      r.bytes += double(traffic[std::size_t(w)].bytes_sent) / K;
      r.payload += double(traffic[std::size_t(w)].payload_bytes) / K;
      r.state_bytes += double(state_bytes[std::size_t(w)]) / K;
    }
    r.wall_s = secs(t0);
    r.bpb = bpb_on(test, theta);
    r.val_bpb = bpb_on(val, theta);
    std::printf(
        "%-16s test %.4f bpb (validation %.4f), %.2f MB sent per rank (%.2f MB encoded Δ, "
        "%.2f MB states); %.0f s\n",
        sp.name.c_str(), r.bpb, r.val_bpb, r.bytes / 1e6, r.payload / 1e6, r.state_bytes / 1e6,
        r.wall_s);
    rows.push_back(r);
  }

  // ---- table and targets ----
  auto find = [&](const std::string& n) -> const row* {
    for (auto& r : rows)
      if (r.spec.name == n) return &r;
    return nullptr;
  };
  io::table table({"row", "inner", "Δ", "states every", "test bpb", "val bpb", "MB sent/rank",
                   "MB encoded Δ", "wall s"});
  nlohmann::json jr = nlohmann::json::array();
  for (auto& r : rows) {
    const std::string every = r.spec.period == 0 ? "never" : std::to_string(r.spec.period) + "H";
    table.add({r.spec.name, r.spec.optimizer, r.spec.codec, every, io::cell(r.bpb, 4),
               io::cell(r.val_bpb, 4), io::cell(r.bytes / 1e6, 3), io::cell(r.payload / 1e6, 3),
               io::cell(r.wall_s, 0)});
    jr.push_back({{"name", r.spec.name},
                  {"optimizer", r.spec.optimizer},
                  {"bits", r.bits},
                  {"codec", r.spec.codec},
                  {"desloc_period", r.spec.period == 0 ? nlohmann::json("inf")
                                                       : nlohmann::json(r.spec.period * o.inner)},
                  {"bpb", std::round(r.bpb * 1e5) / 1e5},
                  {"val_bpb", std::round(r.val_bpb * 1e5) / 1e5},
                  {"bytes", std::llround(r.bytes)},
                  {"payload_bytes", std::llround(r.payload)},
                  {"state_bytes", std::llround(r.state_bytes)},
                  {"wall_s", std::round(r.wall_s * 10) / 10}});
  }
  std::printf("\n");
  table.print(stdout);
  nlohmann::json targets = nlohmann::json::object();
  auto target = [&](const char* name, bool met, const std::string& text) {
    targets[name] = {{"met", met}, {"measured", text}};
    std::printf("target %-34s %s  (%s)\n", name, met ? "met" : "MISSED", text.c_str());
  };
  auto fmt = [](const char* f, auto... a) {
    char s[128];
    std::snprintf(s, sizeof s, f, a...);
    return std::string(s);
  };
  std::printf("\n");
  if (auto* m = find("muon"), *a = find("adamw"); m && a)
    target("muon_le_adamw", m->bpb <= a->bpb,
           fmt("Muon %.4f vs AdamW %.4f test bpb (%+.2f%%)", m->bpb, a->bpb,
               100 * (m->bpb - a->bpb) / a->bpb));
  for (const std::string name : {"muon_int2", "muon_int2_minmax"})
    if (auto* q = find(name), *m = find("muon"); q && m) {
      const double rel = (q->bpb - m->bpb) / m->bpb, enc = m->payload / q->payload,
                   wire = m->bytes / q->bytes;
      target((name + "_within_1pct").c_str(), rel <= 0.01,
             fmt("%+.2f%% test bpb vs Muon fp32", 100 * rel));
      target((name + "_14x_fewer_bytes").c_str(), enc >= 14,
             fmt("encoded Δ %.2fx fewer (on the wire %.2fx: an all-gather of %d payloads against "
                 "a ring all-reduce)",
                 enc, wire, K));
    }
  if (auto* d = find("adamw_desloc_4H"), *a = find("adamw"); d && a)
    target("desloc_4H_le_never_at_1.5x_bytes", d->bpb <= a->bpb && d->bytes <= 1.5 * a->bytes,
           fmt("%.4f vs %.4f test bpb, %.2fx the bytes", d->bpb, a->bpb, d->bytes / a->bytes));
  std::printf("total wall time %.0f s\n", secs(t_all));
  std::printf("%s\n",
              nlohmann::json({{"bench", "inner"},
                              {"rows", jr},
                              {"scorer", rule.name()},
                              {"targets", targets},
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
                                {"base_lr", o.base_lr},
                                {"lr", o.lr},
                                {"muon_lr", o.muon_lr},
                                {"muon_adamw_lr", o.muon_adamw_lr > 0 ? o.muon_adamw_lr : o.lr},
                                {"outer", "nesterov 0.7/0.9"},
                                {"params", model.param_count()},
                                {"wall_s", std::round(secs(t_all))}}}})
                  .dump()
                  .c_str());
  return 0;
}
