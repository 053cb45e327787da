// example_diloco_ranks: DiLoCo over an all-reduce on the Brown corpus, one process per rank,
// joined by TCP — synchronous, or with the sync overlapped with inner steps (CO2's overlap as a
// delay-corrected merge, eager updates, Streaming DiLoCo, and the naive one-step-delayed
// update for ablations: train::round_loop with the --sync rule; docs/02_dipaco.md). Rank and size
// come from --rank and --size or from the launcher (PACO_RANK/PACO_WORLD_SIZE, mpirun, srun,
// RANK/WORLD_SIZE); the rendezvous from --coordinator or PACO_COORDINATOR (or
// MASTER_ADDR:MASTER_PORT); the group's secret from --token or PACO_TOKEN. With --transport mpi (a
// build with MPI), the ranks are mpirun's and the syncs go over net::mpi.
//
//   examples/diloco_ranks/run_local.sh build/examples/diloco_ranks/example_diloco_ranks 2
//       --sync eager                (two processes on this machine; the flags follow K)
//   PACO_TOKEN=s srun -n 4 example_diloco_ranks --coordinator node1:29500
//       --listen-host 0.0.0.0 --sync streaming               (four ranks under Slurm)
//   mpirun -np 4 example_diloco_ranks --transport mpi --sync eager              (over MPI)
//
// The inner optimizer is AdamW or Muon (--optimizer muon: MuLoCo, with --compress int2 its 2-bit
// error-feedback deltas); --sync-moment1 / --sync-moment2 K average the optimizer's states over
// the ranks every K rounds (DES-LOC's idea, train/state_sync.hpp).
//
// Rank r trains on every k-th training document from the r-th; all ranks start from the same
// initialisation. Rank 0 prints a line per round and, at the end, validation bits per byte;
// every rank prints the hash of its final θ (identical on every rank except with co2 and eager,
// whose ranks differ by design).
//
// Before anything else the ranks agree on the flags that shape the run (collectives::agree):
// a rank started with another --compress, --inner, model size … stops every rank at once,
// the flag and both values named. With --checkpoint-dir DIR (--sync blocking) every rank writes
// its state after every round (train::round_loop's checkpoints: atomically, the newest two
// rounds kept), and --resume continues from the newest round every rank holds, bit-identical to a
// run that was never stopped. Under MPI a rank whose sync fails ends the whole job (MPI_Abort), so
// that a hung or stopped rank cannot keep mpirun waiting.
#include <charconv>
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "paco/collectives/agree.hpp"
#include "paco/core/hash.hpp"
#include "paco/io/io.hpp"
#include "paco/net/asio_tcp.hpp"
#include "paco/net/launch_env.hpp"
#if PACO_EXAMPLE_WITH_MPI
#include "paco/net/mpi.hpp"
#endif
#include "paco/nn/nn.hpp"
#include "paco/optim/optim.hpp"
#include "paco/outer/outer.hpp"
#include "paco/place/measured_ring.hpp"
#include "paco/route/route.hpp"
#include "paco/store/compression.hpp"
#include "paco/train/path_worker.hpp"
#include "paco/train/round_loop.hpp"

using namespace paco;
using clk = std::chrono::steady_clock;
using outer_t = outer::one_of<outer::nesterov, outer::co2>;
using worker_t = train::path_worker<nn::gpt, optim::inner_choice>;

namespace {

struct options {
  int rank = -1, size = -1;
  std::string transport = "tcp", coordinator, listen_host = "127.0.0.1", token;
  std::string sync = "blocking", outer = "auto", compress;
  int rounds = 10, inner = 60, tau = 1, block_fragments = 2;
  int val_docs = 0;  // the validation documents rank 0 scores (0: the whole split)
  float alpha = 0.5f;
  int d = 64, ctx = 64, layers = 2, heads = 4, batch = 8;
  float lr = 2e-3f;
  std::string optimizer = "adamw";          // adamw | muon
  float muon_lr = 0.02f;                    // Muon's peak rate on the hidden matrices
  long sync_moment1 = 0, sync_moment2 = 0;  // rounds between state averages (0: never)
  std::uint64_t seed = 1;
  int deadline_s = 600;
  std::string checkpoint_dir;
  bool resume = false;
  int streams = 1;                       // TCP streams per link (net::tcp_options::streams)
  std::uint64_t bdp_bytes = 0;           // the links' bandwidth x round trip (socket buffers)
  std::string ring_order = "rank";       // rank | measured (place::measured_ring_order)
  std::uint64_t probe_bytes = 4u << 20;  // --ring-order measured: bytes per direction
  int test_stop_rank = -1;    // test only: this rank stops itself (SIGSTOP) before its rounds
  int test_crash_after = -1;  // test only: every rank kills itself after saving round N (1, 2 …)
};

int fail(const std::string& what) {
  std::fprintf(stderr, "example_diloco_ranks: %s\n", what.c_str());
  return 2;
}

// The shortest text that reads back as v.
std::string shortest(float v) {
  char b[32];
  const auto r = std::to_chars(b, b + sizeof b, v);
  return std::string(b, r.ptr);
}

// The flags that shape the run, which every rank must share: the model, the data, the
// schedule, the codec, the trainer. Its "key=value …" form is the checkpoints' configuration.
std::vector<collectives::agree_field> run_fields(const options& o) {
  return {{"--d", std::to_string(o.d)},
          {"--ctx", std::to_string(o.ctx)},
          {"--layers", std::to_string(o.layers)},
          {"--heads", std::to_string(o.heads)},
          {"--batch", std::to_string(o.batch)},
          {"--lr", shortest(o.lr)},
          {"--optimizer", o.optimizer},
          {"--muon-lr", shortest(o.muon_lr)},
          {"--sync-moment1", std::to_string(o.sync_moment1)},
          {"--sync-moment2", std::to_string(o.sync_moment2)},
          {"--seed", std::to_string(o.seed)},
          {"--rounds", std::to_string(o.rounds)},
          {"--inner", std::to_string(o.inner)},
          {"--sync", o.sync},
          {"--outer", o.outer},
          {"--compress", o.compress.empty() ? "fp32" : o.compress},
          {"--tau", std::to_string(o.tau)},
          {"--alpha", shortest(o.alpha)},
          {"--block-fragments", std::to_string(o.block_fragments)}};
}

// The run of one rank once the group is formed: the agreement on the run's flags, its shard,
// the round loop with the --sync rule (and its checkpoints), and the report. Returns the exit
// code.
template <net::Transport T>
int train_ranks(const options& o, T& t, const nn::gpt& model,
                const std::optional<store::compression>& compression,
                const train::sync_choice& rule, const std::vector<train::fragment>& frags) {
  const int rank = t.rank(), size = t.size();
  const bool lead = rank == 0;
  const auto deadline = std::chrono::seconds(o.deadline_s);
  const std::string here = "rank " + std::to_string(rank) + ": ";

  // ---- every rank runs the same configuration, or none runs ----
  auto fields = run_fields(o);
  const std::string config = collectives::join_fields(fields);
  fields.push_back({"--checkpoint-dir", o.checkpoint_dir.empty() ? "none" : "given"});
  fields.push_back({"--resume", o.resume ? "yes" : "no"});
  fields.push_back({"--ring-order", o.ring_order});
  fields.push_back({"--probe-bytes", std::to_string(o.probe_bytes)});
  collectives::collective_options agreed;
  agreed.until = net::after(deadline);
  if (auto s = collectives::agree(t, fields, agreed); !s)
    return fail(here + "the ranks were started differently: " + s.error().what());
  if (rank == o.test_stop_rank) std::raise(SIGSTOP);  // as a hung process would

  // ---- the ring: rank order, or the links' measured one ----
  std::vector<int> ring;
  if (o.ring_order == "measured") {
    place::link_probe_options po;
    po.probe_bytes = o.probe_bytes;
    po.collective.until = net::after(deadline);
    po.collective.tag = 0x6a000000u;
    place::measured_links links;
    auto r = place::measured_ring_order(t, po, {}, &links);
    if (!r) return fail(here + "measuring the links: " + r.error().message);
    ring = std::move(r.value());
    if (lead) {
      std::printf("links measured (MB/s, row: from rank):\n");
      for (int i = 0; i < size; ++i) {
        for (int j = 0; j < size; ++j)
          std::printf(" %9.1f", i == j ? 0.0 : links.bandwidth[std::size_t(i * size + j)] / 1e6);
        std::printf("\n");
      }
      std::printf("ring order:");
      for (int r2 : ring) std::printf(" %d", r2);
      std::printf("\n");
    }
  }

  // ---- data: this rank's shard of the training documents; validation on rank 0 ----
  auto corpus = io::load_brown(io::default_brown_dir());
  if (!corpus) return fail(corpus.error().what());
  const io::corpus train_docs = corpus->subset(io::split::train);
  io::corpus part;
  for (std::size_t i = std::size_t(rank); i < train_docs.docs.size(); i += std::size_t(size))
    part.docs.push_back(train_docs.docs[i]);
  const auto shard = io::token_stream::from(part);

  const auto levels = *path::split_gpt_levels(model.layout(), o.layers, 1);
  const train::inner_config icfg{
      .batch = o.batch,
      .ctx = o.ctx,
      .steps = o.inner,
      .grad_clip = 1.0f,
      .schedule = {.lr = o.lr,
                   .min_lr = o.lr / 10,
                   .warmup = std::min(50L, long(o.rounds) * o.inner / 10),
                   .total = long(o.rounds) * o.inner},
      .threads = 1};
  const std::uint64_t data_seed = o.seed + 100 + std::uint64_t(rank);
  const outer_t outer =
      o.outer == "co2"
          ? outer_t(outer::co2{.momentum = 0.2f, .clip = outer::co2::clip_mode::element})
          : outer_t(outer::nesterov{});
  if (lead)
    std::printf(
        "%d ranks over %s, inner %s, sync %s, outer %s, Δ %s; GPT d=%d layers=%d ctx=%d (%.2fM "
        "parameters), %d rounds x H=%d, %zu training bytes on rank 0\n",
        size, o.transport.c_str(), o.optimizer.c_str(), o.sync.c_str(), o.outer.c_str(),
        o.compress.empty() ? "fp32" : o.compress.c_str(), o.d, o.layers, o.ctx,
        double(model.param_count()) / 1e6, o.rounds, o.inner, shard.ids.size());

  // ---- the rounds ----
  const auto start = clk::now();
  auto on_round = [&](long round, double loss, std::size_t bytes) {
    if (lead)
      std::printf("round %3ld  inner loss %.4f  %.1f s  %.2f MB sent\n", round + 1, loss,
                  std::chrono::duration<double>(clk::now() - start).count(), double(bytes) / 1e6);
  };
  std::vector<compress::module_codec> codecs;  // one per fragment, or none (fp32)
  if (compression) {
    auto c = train::fragment_codecs(*compression, model, frags);
    if (!c) return fail("--compress: " + c.error().message);
    codecs = std::move(*c);
  }
  auto inner =
      optim::inner_by_name(o.optimizer, model, optim::adamw{.lr = o.lr}, {.lr = o.muon_lr});
  if (!inner) return fail("--optimizer: " + inner.error().message);
  worker_t w(rank, model, levels, {0}, *inner, icfg, shard, data_seed);
  model.init(w.state(), o.seed);  // the same θ on every rank
  train::round_loop<T, worker_t, outer_t> loop(t, w, outer, rule, frags, std::move(codecs));
  status s = loop.set_ring_order(ring);
  if (s) s = loop.set_state_periods({.moment1 = o.sync_moment1, .moment2 = o.sync_moment2});
  const std::filesystem::path dir = o.checkpoint_dir;
  if (s && !dir.empty()) {
    s = loop.open_checkpoints(dir, config, o.resume, deadline);
    if (s && o.resume && lead)
      std::printf("resumed from %s after round %ld\n", dir.c_str(), loop.rounds_done());
  }
  while (s && loop.rounds_done() < o.rounds) {
    s = loop.run(1, deadline,
                 [&](const train::round_end& e) { on_round(e.round, e.loss, e.bytes_sent); });
    if (s && !dir.empty()) s = loop.save_round(dir, config);
    if (s && loop.rounds_done() == o.test_crash_after) std::raise(SIGKILL);
  }
  if (s) s = loop.finish(deadline);
  const std::size_t sent = loop.traffic().bytes_sent;
  const double hidden = o.sync == "blocking" ? -1 : loop.overlap().hidden();
  if (!s) return fail(here + s.error().what());

  const auto theta = w.state().get(plane::param);
  if (lead) {
    auto held_out = corpus->subset(io::split::validation);
    if (o.val_docs > 0 && held_out.docs.size() > std::size_t(o.val_docs))
      held_out.docs.resize(std::size_t(o.val_docs));
    const auto val = route::scored_docs::of(held_out);
    auto ws = model.make_workspace({o.batch, o.ctx});
    const auto rule = route::sliding_window::make(o.ctx).value_or_throw();
    const std::vector<const float*> one{theta.data()};
    const double bpb =
        route::routed_nll(model, one, val.spans, std::vector<int>(val.size(), 0), rule, ws)
            .bits_per_token();
    std::printf(
        "validation: %.4f bits per byte (%s, %zu documents); %.1f s; %.2f MB sent by "
        "rank 0",
        bpb, rule.name().c_str(), held_out.docs.size(),
        std::chrono::duration<double>(clk::now() - start).count(), double(sent) / 1e6);
    if (hidden >= 0) std::printf("; %.0f%% of the communication hidden", 100 * hidden);
    if (loop.state_bytes() > 0)
      std::printf("; %.2f MB of them optimizer states", double(loop.state_bytes()) / 1e6);
    std::printf("\n");
  }
  std::printf("rank %d final theta hash %016" PRIx64 "\n", rank,
              hash64(theta.data(), theta.size_bytes()));
  return 0;
}

}  // namespace

int main(int argc, char** argv) try {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  options o;
  CLI::App app{"DiLoCo over an all-reduce, one process per rank, on the Brown corpus"};
  app.add_option("--transport", o.transport, "tcp | mpi (ranks from mpirun; a build with MPI)")
      ->check(CLI::IsMember({"tcp", "mpi"}));
  app.add_option("--rank", o.rank, "this rank (default: from the launcher's variables)");
  app.add_option("--size", o.size, "number of ranks (default: from the launcher's variables)");
  app.add_option("--coordinator", o.coordinator,
                 "rank 0's host:port (default: PACO_COORDINATOR or MASTER_ADDR:MASTER_PORT)");
  app.add_option("--listen-host", o.listen_host, "interface ranks > 0 listen on");
  app.add_option("--token", o.token, "the group's shared secret (default: PACO_TOKEN)");
  app.add_option("--streams", o.streams, "TCP streams per link (WAN: docs/transport.md)")
      ->check(CLI::Range(1, 16));
  app.add_option("--bdp-bytes", o.bdp_bytes,
                 "the links' bandwidth x round trip in bytes: sizes the socket buffers");
  app.add_option("--ring-order", o.ring_order,
                 "rank | measured: the links' bandwidth measured when the group forms orders the "
                 "all-reduce ring (place::measured_ring_order)")
      ->check(CLI::IsMember({"rank", "measured"}));
  app.add_option("--probe-bytes", o.probe_bytes, "--ring-order measured: bytes per direction")
      ->check(CLI::Range(std::uint64_t(1), std::uint64_t(1) << 30));
  app.add_option(
      "--sync", o.sync,
      "blocking (DiLoCo) | co2 (CO2's overlap, a delay-corrected merge) | co2_snapshot (the "
      "official CO2 code's asynchronous path made deterministic: the averaged snapshot "
      "overwrites θ --tau steps later) | eager | streaming | naive_delayed (the naive "
      "one-step-delayed update, an ablation)");
  app.add_option("--outer", o.outer,
                 "outer step: nesterov (0.7, 0.9) | co2 (β 0.2, clip 1) | auto (co2 for the "
                 "co2 and naive_delayed rules, else nesterov)")
      ->check(CLI::IsMember({"auto", "nesterov", "co2"}));
  app.add_option("--compress", o.compress, "Δ compression (int8, bf16, topk:0.1 …; default fp32)");
  app.add_option("--rounds", o.rounds, "outer rounds")->check(CLI::Range(1, 100000));
  app.add_option("--inner", o.inner, "inner steps per round (H)")->check(CLI::Range(1, 1000000));
  app.add_option(
      "--tau", o.tau,
      "streaming: inner steps a sync runs behind (τ < H/P); co2_snapshot: steps before the "
      "write-back (1 ≤ τ < H)");
  app.add_option("--alpha", o.alpha, "streaming: θ ← αθ + (1 − α)g on receipt");
  app.add_option("--block-fragments", o.block_fragments,
                 "streaming: fragments of the blocks (plus one of the rest)");
  app.add_option("--d", o.d)->check(CLI::Range(8, 4096));
  app.add_option("--ctx", o.ctx)->check(CLI::Range(2, 8192));
  app.add_option("--layers", o.layers)->check(CLI::Range(1, 128));
  app.add_option("--heads", o.heads)->check(CLI::Range(1, 128));
  app.add_option("--batch", o.batch)->check(CLI::Range(1, 4096));
  app.add_option("--lr", o.lr, "inner AdamW peak learning rate (Muon: of its AdamW part)");
  app.add_option("--optimizer", o.optimizer,
                 "inner optimizer: adamw | muon (Newton–Schulz orthogonalised momentum on the "
                 "hidden matrices, AdamW on the rest: MuLoCo)")
      ->check(CLI::IsMember({"adamw", "muon"}));
  app.add_option("--muon-lr", o.muon_lr, "Muon's peak learning rate on the hidden matrices");
  app.add_option("--sync-moment1", o.sync_moment1,
                 "average the optimizer's first moment (Muon: momentum) over the ranks every K "
                 "rounds (0: never; DES-LOC)")
      ->check(CLI::Range(0L, 1000000L));
  app.add_option("--sync-moment2", o.sync_moment2,
                 "average AdamW's second moment over the ranks every K rounds (0: never)")
      ->check(CLI::Range(0L, 1000000L));
  app.add_option("--val-docs", o.val_docs,
                 "rank 0 scores the first N validation documents (0: the whole split)")
      ->check(CLI::Range(0, 1000000));
  app.add_option("--seed", o.seed);
  app.add_option("--deadline", o.deadline_s, "seconds a sync may take")
      ->check(CLI::Range(1, 86400));
  app.add_option("--checkpoint-dir", o.checkpoint_dir,
                 "after every round, each rank writes its state to DIR/rank-R.round-K.safetensors "
                 "(the newest two kept; --sync blocking)");
  app.add_flag("--resume", o.resume,
               "continue from the newest round every rank holds in --checkpoint-dir");
  app.add_option("--test-stop-rank", o.test_stop_rank)->group("");      // tests: a stopped rank
  app.add_option("--test-crash-after", o.test_crash_after)->group("");  // tests: a killed job
  CLI11_PARSE(app, argc, argv);
  if (o.d % o.heads != 0) return fail("--d must be a multiple of --heads");
  if (!std::isfinite(o.lr) || o.lr <= 0)
    return fail("--lr must be a finite number > 0, got " + shortest(o.lr));
  if (!std::isfinite(o.alpha))
    return fail("--alpha must be a finite number in [0, 1], got " + shortest(o.alpha));
  if (o.resume && o.checkpoint_dir.empty())
    return fail("--resume needs --checkpoint-dir (where the checkpoints are)");
  if (o.sync == "co2_snapshot" && o.tau < 1)  // parse_sync's default τ = 1 is not what was asked
    return fail(
        "--tau must be ≥ 1 with --sync co2_snapshot (the steps before the write-back), "
        "got " +
        std::to_string(o.tau));
  train::streaming st{.overlap = o.tau, .alpha = o.alpha};
  const auto rule = train::parse_sync(o.sync, st);
  if (!rule) return fail("--sync: " + rule.error().message);
  if (!o.checkpoint_dir.empty() && o.sync != "blocking")
    return fail(
        "--checkpoint-dir works with --sync blocking only: with --sync " + o.sync +
        " a sync is in flight at every round boundary (co2, eager and naive_delayed apply each "
        "round's mean one round late; streaming staggers its fragments' syncs across it), and "
        "the round loop does not save what it carries");
  if (o.outer == "auto")
    o.outer = o.sync == "co2" || o.sync == "naive_delayed" ? "co2" : "nesterov";
  const nn::gpt model({.vocab = 256, .ctx = o.ctx, .d = o.d, .layers = o.layers, .heads = o.heads});
  std::optional<store::compression> compression;
  if (!o.compress.empty()) {
    auto c = store::parse_compression(o.compress);
    if (!c) return fail("--compress: " + c.error().message);
    compression = *c;
    if (!o.checkpoint_dir.empty())
      if (auto k = train::checkpointable(c->spec); !k)
        return fail("--checkpoint-dir: --compress " + o.compress + ": " + k.error().message);
  }
  // The fragments (Streaming DiLoCo's; the whole plane for the other rules) and the rule's plan,
  // checked before anything connects (with the group's size when it is known).
  std::vector<train::fragment> fragments = train::whole_plane(model.layout());
  if (o.sync == "streaming") {
    auto f = train::gpt_fragments(model.layout(), o.layers, o.block_fragments,
                                  train::fragment_order::strided);
    if (!f) return fail("--block-fragments: " + f.error().message);
    fragments = std::move(*f);
  }
  if (auto p = rule->plan(std::max(o.size, 1), fragments.size(), o.inner); !p)
    return fail("--sync " + o.sync + ": " + p.error().message);

  if (o.transport == "mpi") {
#if PACO_EXAMPLE_WITH_MPI
    net::mpi_environment env(&argc, &argv);
    net::mpi t;
    int rc = 0;
    try {
      rc = train_ranks(o, t, model, compression, *rule, fragments);
    } catch (const std::exception& e) {
      rc = fail(e.what());
    }
    // The error is printed; a peer may be waiting in a sync (hung, stopped) that MPI cannot
    // interrupt, so the whole job ends here rather than in a MPI_Finalize that waits for it.
    if (rc != 0) env.abort(rc);
    return rc;
#else
    return fail("--transport mpi: this build has no MPI (install Open MPI and rebuild)");
#endif
  }

  // ---- over TCP: who we are, and where the group meets ----
  if (o.rank < 0 || o.size < 0) {
    auto who = net::rank_from_env();
    if (!who) return fail(who.error().message);
    if (!*who)
      return fail(
          "no rank: pass --rank and --size, or start it under a launcher (PACO_RANK/"
          "PACO_WORLD_SIZE, mpirun, srun, RANK/WORLD_SIZE)");
    if (o.rank < 0) o.rank = (*who)->rank;
    if (o.size < 0) o.size = (*who)->size;
    std::printf("rank %d of %d from %s\n", o.rank, o.size, (*who)->source.c_str());
  }
  if (o.coordinator.empty()) {
    auto c = net::coordinator_from_env();
    if (!c) return fail(c.error().message);
    if (!*c) return fail("no rendezvous: pass --coordinator host:port or set PACO_COORDINATOR");
    o.coordinator = **c;
  }
  if (o.token.empty())
    if (const char* t = std::getenv("PACO_TOKEN")) o.token = t;
  if (o.token.empty()) return fail("no token: pass --token or set PACO_TOKEN (the group's secret)");
  net::tcp_options to;
  to.rank = o.rank;
  to.size = o.size;
  to.allow_single = true;
  to.coordinator = o.coordinator;
  to.listen_host = o.listen_host;
  to.token = o.token;
  to.streams = o.streams;
  to.bdp_bytes = o.bdp_bytes;
  auto tcp = net::asio_tcp::connect(to);
  if (!tcp) return fail("connect: " + tcp.error().what());
  return train_ranks(o, **tcp, model, compression, *rule, fragments);
} catch (const std::exception& e) {
  return fail(e.what());
}
