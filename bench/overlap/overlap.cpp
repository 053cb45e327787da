// bench/run overlap: DiLoCo against its overlapped forms (CO2 as its authors' code runs it,
// eager updates, Streaming DiLoCo, and the naive one-round-delayed update) on the Brown corpus, two
// ranks joined by real TCP sockets (asio_tcp on loopback) whose links are shaped slow enough that
// communication matters.
//
// Every row starts from the same base model (pretrained on all training text), trains the same
// two random shards with the same seeds, inner steps and rounds, and is scored by the one
// scorer (whole documents, bits per byte):
// Every row is train::round_loop with one sync rule (train/sync.hpp):
//   diloco  blocking: H inner steps, then the fp32 ring all-reduce of Δ, then the
//           outer Nesterov step (0.7, 0.9) — the inner steps wait for the link.
//   co2     co2: the all-reduce of round t runs while round
//           t+1's inner steps do; each rank goes on from its own θ and the mean lands one round
//           late as a correction (its own stale Δ swapped for the mean), by outer::co2 with the
//           GPT-2 script's β = 0.2 and element clipping at 1, or by DiLoCo's Nesterov step.
//   naive_delayed  naive_delayed (Kale et al.'s baseline; paco's "co2" rows
//           before 2026-11-26): every rank restarts from the global model and the mean Δ is
//           applied one round late, by outer::co2 with β = 0.2 and clipping at 1, fairscale's
//           β = 0.5, fairseq's β = 0 at α = 1 and at α = 0.5, or DiLoCo's Nesterov step.
//   eager   eager: the same overlap, each rank's own fresh Δ
//           standing in for its share of the mean (Kale et al. 2025), with DiLoCo's Nesterov
//           step or CO2's β = 0.2 clip 1.
//   streaming streaming: three fragments (embedding and head; the blocks strided
//           in two), one synced every H/3 steps, each every H, its all-reduce running behind
//           τ = 5 or τ = H/3 − 1 inner steps, mixed in with α = 0.5, DiLoCo's Nesterov step.
// The overlapped row is chosen on validation and all rows are reported on test. The links run at
// the rate that makes one fp32 all-reduce of Δ last --comm-ratio times the H inner steps (measured
// on this machine before the rows start), the regime CO2 was made for.
// LAST line: {"bench":"overlap","rows":[...],"chosen":..,"round_time_ratio":..,...}.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <thread>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "paco/io/io.hpp"
#include "paco/net/asio_tcp.hpp"
#include "paco/net/free_port.hpp"
#include "paco/nn/nn.hpp"
#include "paco/optim/optim.hpp"
#include "paco/outer/outer.hpp"
#include "paco/path/level_map.hpp"
#include "paco/route/route.hpp"
#include "paco/train/dense_run.hpp"
#include "paco/train/inner_loop.hpp"
#include "paco/train/path_worker.hpp"
#include "paco/train/round_loop.hpp"

using namespace paco;
using clk = std::chrono::steady_clock;

namespace {

struct options {
  int d = 128, ctx = 128, layers = 4, heads = 4, batch = 16;
  int rounds = 8;      // outer rounds
  int inner = 100;     // H
  int pretrain = 300;  // base model steps
  double comm_ratio = 1.0;
  float lr = 2e-3f, min_lr = 2e-4f;
  std::uint64_t seed = 1;
  std::vector<std::string> methods{"diloco", "co2", "eager", "streaming",
                                   "naive_delayed"};  // rows to run
};

using outer_t = outer::one_of<outer::nesterov, outer::co2>;

struct variant {
  std::string method, outer_name;
  outer_t outer;
  train::sync_choice rule = train::blocking{};
  int tau = 0;         // streaming: τ (−1: H/P − 1)
  float alpha = 0.5f;  // streaming: α
};

struct row {
  variant v;
  double val_bpb = 0, test_bpb = 0, round_s = 0, hidden = 0, wait_s = 0, comm_s = 0, wall_s = 0;
  double bytes_sent = 0;
};

double secs(clk::duration d) {
  return std::chrono::duration<double>(d).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  options o;
  CLI::App app{
      "DiLoCo vs its overlapped forms over shaped TCP on Brown: bits per byte and round time"};
  app.add_option("--rounds", o.rounds, "outer rounds")->check(CLI::Range(2, 1000));
  app.add_option("--inner", o.inner, "inner steps per round (H)")->check(CLI::Range(1, 100000));
  app.add_option("--pretrain", o.pretrain, "steps of the shared base model")
      ->check(CLI::Range(1, 1000000));
  app.add_option("--comm-ratio", o.comm_ratio,
                 "link rate: an fp32 all-reduce of Δ lasts this many times the H inner steps")
      ->check(CLI::Range(0.05, 20.0));
  app.add_option("--d", o.d);
  app.add_option("--ctx", o.ctx);
  app.add_option("--layers", o.layers);
  app.add_option("--batch", o.batch);
  app.add_option("--seed", o.seed, "shards, initialisation and sampling");
  app.add_option("--methods", o.methods,
                 "rows to run: diloco (always), co2, eager, streaming, naive_delayed")
      ->delimiter(',')
      ->check(CLI::IsMember({"diloco", "co2", "eager", "streaming", "naive_delayed"}));
  CLI11_PARSE(app, argc, argv);
  const int K = 2;
  const auto t_all = clk::now();

  // ---- data: Brown; two random shards of the training documents; validation and test ----
  auto corpus = io::load_brown(io::default_brown_dir());
  if (!corpus) {
    std::fprintf(stderr, "overlap: %s\n", corpus.error().what().c_str());
    return 2;
  }
  io::byte_tokenizer tok;
  std::vector<std::vector<std::int32_t>> train;
  for (auto& d : corpus->subset(io::split::train).docs) train.push_back(tok.encode(d.text));
  const auto [shards, all] = io::deal_random_shards(train, K, o.seed * 977 + 3);
  const auto val = route::scored_docs::of(corpus->subset(io::split::validation));
  const auto test = route::scored_docs::of(corpus->subset(io::split::test));
  std::printf(
      "Brown: %zu training documents in %d random shards, %zu validation and %zu test "
      "documents (scored whole)\n",
      train.size(), K, val.size(), test.size());

  nn::gpt model({.vocab = 256, .ctx = o.ctx, .d = o.d, .layers = o.layers, .heads = o.heads});
  const std::size_t n = model.param_count();
  std::printf(
      "model: GPT d=%d layers=%d heads=%d ctx=%d, %.2fM parameters; %d ranks, %d rounds "
      "x H=%d, batch %d\n",
      o.d, o.layers, o.heads, o.ctx, double(n) / 1e6, K, o.rounds, o.inner, o.batch);

  // ---- the shared base model ----
  arena<host> base(model.layout());
  model.init(base, o.seed);
  {
    io::progress bar("base model", o.pretrain);
    train::dense_run(model, base, all,
                     {.batch = o.batch,
                      .ctx = o.ctx,
                      .grad_clip = 1.0f,
                      .schedule = {.lr = o.lr, .min_lr = o.lr, .warmup = 50, .total = o.pretrain},
                      .threads = 2},
                     optim::adamw{.lr = o.lr}, o.pretrain, o.seed + 1, 1000,
                     [&](long t, double l) { bar.update(t, "loss", l); });
    bar.finish();
  }
  const std::vector<float> theta0(base.get(plane::param).begin(), base.get(plane::param).end());

  auto ws = model.make_workspace({o.batch, o.ctx});
  const auto rule = route::sliding_window::make(o.ctx).value_or_throw();  // the one scorer
  auto bpb = [&](const route::scored_docs& docs, const std::vector<float>& theta) {
    const std::vector<const float*> one{theta.data()};
    return route::routed_nll(model, one, docs.spans, std::vector<int>(docs.size(), 0), rule, ws)
        .bits_per_token();
  };
  std::printf("base model: val %.4f bpb, scorer %s\n", bpb(val, theta0), rule.name().c_str());

  const auto levels = *path::split_gpt_levels(model.layout(), o.layers, 1);  // one module
  const train::inner_config icfg{
      .batch = o.batch,
      .ctx = o.ctx,
      .steps = o.inner,
      .grad_clip = 1.0f,
      .schedule = {.lr = o.lr, .min_lr = o.min_lr, .warmup = 50, .total = long(o.rounds) * o.inner},
      .threads = 1};
  const optim::adamw inner{.lr = o.lr};

  // ---- the link: an fp32 ring all-reduce of Δ (4n bytes sent per rank at k = 2) lasts
  // comm_ratio x the H inner steps of one rank, both ranks training at once ----
  double inner_s = 0;
  {
    std::vector<double> t(K);
    std::vector<std::thread> th;
    for (int r = 0; r < K; ++r)
      th.emplace_back([&, r] {
        train::path_worker<nn::gpt, optim::adamw> w(r, model, levels, {0}, inner, icfg,
                                                    shards[std::size_t(r)], 7);
        auto p = w.state().get(plane::param);
        std::copy(theta0.begin(), theta0.end(), p.begin());
        const int steps = std::max(5, o.inner / 5);
        const auto t0 = clk::now();
        w.train(steps);
        t[std::size_t(r)] = secs(clk::now() - t0) * double(o.inner) / steps;
      });
    for (auto& x : th) x.join();
    inner_s = std::max(t[0], t[1]);
  }
  const double ring_bytes = double(collectives::allreduce_ring.cost(4 * n, K).bytes);
  const double rate = ring_bytes / (o.comm_ratio * inner_s);
  std::printf(
      "H inner steps take %.2f s per rank; links shaped to %.2f Mbit/s, so an fp32 "
      "all-reduce of Δ (%.2f MB sent per rank) takes about %.2f s\n",
      inner_s, rate * 8 / 1e6, ring_bytes / 1e6, ring_bytes / rate);

  // Streaming DiLoCo's fragments: the embedding and the head, then the blocks strided in two.
  const auto frags =
      *train::gpt_fragments(model.layout(), o.layers, 2, train::fragment_order::strided);
  if (o.inner % int(frags.size()) != 0) {
    std::fprintf(stderr, "overlap: --inner must be a multiple of the %zu fragments\n",
                 frags.size());
    return 2;
  }
  const std::vector<variant> variants{
      {"diloco", "nesterov 0.7/0.9", outer::nesterov{}},
      {"co2", "co2 b=0.2 clip=1",
       outer::co2{.momentum = 0.2f, .clip = outer::co2::clip_mode::element}, train::co2{}},
      {"co2", "nesterov 0.7/0.9", outer::nesterov{}, train::co2{}},
      {"naive_delayed", "co2 b=0.2 clip=1",
       outer::co2{.momentum = 0.2f, .clip = outer::co2::clip_mode::element},
       train::naive_delayed{}},
      {"naive_delayed", "co2 b=0.5", outer::co2{.momentum = 0.5f}, train::naive_delayed{}},
      {"naive_delayed", "co2 b=0", outer::co2{.momentum = 0.0f}, train::naive_delayed{}},
      {"naive_delayed", "co2 a=0.5 b=0", outer::co2{.lr = 0.5f, .momentum = 0.0f},
       train::naive_delayed{}},
      {"naive_delayed", "nesterov 0.7/0.9", outer::nesterov{}, train::naive_delayed{}},
      {"eager", "nesterov 0.7/0.9", outer::nesterov{}, train::eager{}},
      {"eager", "co2 b=0.2 clip=1",
       outer::co2{.momentum = 0.2f, .clip = outer::co2::clip_mode::element}, train::eager{}},
      {"streaming", "nesterov 0.7/0.9, tau=5", outer::nesterov{}, train::streaming{}, 5},
      {"streaming", "nesterov 0.7/0.9, tau=c-1", outer::nesterov{}, train::streaming{}, -1},
  };
  std::vector<row> rows;
  for (const auto& v : variants) {
    if (v.method != "diloco" &&
        std::find(o.methods.begin(), o.methods.end(), v.method) == o.methods.end())
      continue;
    row r{v};
    const auto t0 = clk::now();
    const int port = net::free_loopback_port();
    std::vector<status> errs(K);
    std::vector<double> round_end;  // rank 0
    std::vector<float> theta;
    train::diloco_traffic traffic;
    train::overlap_stats overlap;
    io::progress bar((v.method + ", " + v.outer_name).c_str(), o.rounds);
    std::vector<std::thread> th;
    for (int k = 0; k < K; ++k)
      th.emplace_back([&, k] {
        net::tcp_options to;
        to.rank = k;
        to.size = K;
        to.coordinator = "127.0.0.1:" + std::to_string(port);
        to.token = "overlap-bench";
        to.shaper.rate_bytes_per_s = rate;
        auto t = net::asio_tcp::connect(to);
        if (!t) return void(errs[std::size_t(k)] = t.error());
        train::path_worker<nn::gpt, optim::adamw> w(k, model, levels, {0}, inner, icfg,
                                                    shards[std::size_t(k)],
                                                    o.seed + 100 + std::uint64_t(k));
        auto p = w.state().get(plane::param);
        std::copy(theta0.begin(), theta0.end(), p.begin());
        const auto start = clk::now();
        auto on_round = [&](const train::round_end& e) {
          if (k != 0) return;
          round_end.push_back(secs(clk::now() - start));
          bar.update(e.round + 1, "inner loss", e.loss);
        };
        const auto deadline = std::chrono::minutes(10);
        train::sync_choice rule = v.rule;
        if (v.method == "streaming")
          rule = train::streaming{.overlap = v.tau >= 0 ? v.tau : o.inner / int(frags.size()) - 1,
                                  .alpha = v.alpha};
        train::round_loop<net::asio_tcp, train::path_worker<nn::gpt, optim::adamw>, outer_t> rep(
            **t, w, v.outer, rule,
            v.method == "streaming" ? frags : train::whole_plane(model.layout()));
        status s = rep.run(o.rounds, deadline, on_round);
        if (s) s = rep.finish(deadline);
        if (k == 0) {
          round_end.back() = secs(clk::now() - start);  // the last round ends with finish()
          traffic = rep.traffic();
          overlap = rep.overlap();
        }
        errs[std::size_t(k)] = s;
        if (k == 0) theta.assign(p.begin(), p.end());
      });
    for (auto& x : th) x.join();
    bar.finish();
    for (auto& e : errs)
      if (!e) {
        std::fprintf(stderr, "overlap: %s (%s): %s\n", v.method.c_str(), v.outer_name.c_str(),
                     e.error().what().c_str());
        return 3;
      }
    std::vector<double> per_round;
    for (std::size_t i = 0; i < round_end.size(); ++i)
      per_round.push_back(round_end[i] - (i ? round_end[i - 1] : 0.0));
    r.round_s = median(per_round);
    r.wall_s = secs(clk::now() - t0);
    r.bytes_sent = double(traffic.bytes_sent);
    const bool overlapped = v.method != "diloco";
    r.hidden = overlapped ? overlap.hidden() : 0.0;
    r.wait_s = overlap.wait_s;
    r.comm_s = overlap.comm_s;
    r.val_bpb = bpb(val, theta);
    r.test_bpb = bpb(test, theta);
    std::printf("%-9s %-26s val %.4f  test %.4f bpb; round %.2f s (median); %.2f MB sent",
                v.method.c_str(), v.outer_name.c_str(), r.val_bpb, r.test_bpb, r.round_s,
                r.bytes_sent / 1e6);
    if (overlapped)
      std::printf("; %.0f%% of %.1f s communication hidden", 100 * r.hidden, r.comm_s);
    std::printf("\n");
    rows.push_back(r);
  }

  // ---- the overlapped row chosen on validation; the table on test ----
  const row* dil = &rows[0];  // DiLoCo, the first row, always runs
  if (rows.size() < 2) {
    std::fprintf(stderr, "overlap: --methods names no overlapped row\n");
    return 2;
  }
  const row* chosen = nullptr;
  for (auto& r : rows)
    if (r.v.method != "diloco" && (!chosen || r.val_bpb < chosen->val_bpb)) chosen = &r;
  io::table table({"method", "outer step", "val bpb", "test bpb", "round s", "hidden", "MB sent"});
  nlohmann::json jr = nlohmann::json::array();
  auto r4 = [](double x) { return std::round(x * 1e4) / 1e4; };
  for (auto& r : rows) {
    table.add({r.v.method + (&r == chosen ? " *" : ""), r.v.outer_name, io::cell(r.val_bpb, 4),
               io::cell(r.test_bpb, 4), io::cell(r.round_s, 2),
               r.v.method != "diloco" ? io::cell(100 * r.hidden, 0, "%") : std::string("-"),
               io::cell(r.bytes_sent / 1e6, 2)});
    jr.push_back({{"method", r.v.method},
                  {"outer", r.v.outer_name},
                  {"val_bpb", r4(r.val_bpb)},
                  {"test_bpb", r4(r.test_bpb)},
                  {"round_s", r4(r.round_s)},
                  {"hidden", r4(r.hidden)},
                  {"comm_s", r4(r.comm_s)},
                  {"wait_s", r4(r.wait_s)},
                  {"bytes_sent", std::llround(r.bytes_sent)},
                  {"wall_s", std::round(r.wall_s * 10) / 10}});
  }
  std::printf("\n");
  table.print(stdout);
  const double ratio = chosen->round_s / dil->round_s;
  std::printf(
      "\n%s (%s, chosen on validation) against DiLoCo: round time %.2fx, test %+.4f bpb; "
      "%.0f s in all\n",
      chosen->v.method.c_str(), chosen->v.outer_name.c_str(), ratio,
      chosen->test_bpb - dil->test_bpb, secs(clk::now() - t_all));
  nlohmann::json out = {{"bench", "overlap"},
                        {"rows", jr},
                        {"chosen", chosen->v.method + ", " + chosen->v.outer_name},
                        {"round_time_ratio", r4(ratio)},
                        {"test_bpb_delta", r4(chosen->test_bpb - dil->test_bpb)},
                        {"config",
                         {{"ranks", K},
                          {"rounds", o.rounds},
                          {"inner", o.inner},
                          {"d", o.d},
                          {"layers", o.layers},
                          {"ctx", o.ctx},
                          {"batch", o.batch},
                          {"params", n},
                          {"comm_ratio", o.comm_ratio},
                          {"link_mbit_s", std::round(rate * 8 / 1e4) / 100},
                          {"inner_s", r4(inner_s)}}}};
  std::printf("%s\n", out.dump().c_str());
  return 0;
}
