#pragma once
// A DiPaCo / DiLoCo job's settings, model aside: plain aggregates with defaults, each field's
// meaning beside it. A program sets them in C++, and its command line from a TOML file and --set
// items (job/settings_file.hpp, through job::run_main or paco_train). A grid [1] with
// workers_per_path = k is DiLoCo.
//   settings      every section
//   outer_of      dipaco.outer as the store's outer optimizer (store_outer)
//   sync_of       sync.mode as the workers' sync rule
//   compression_of dipaco.compress as the push codec
//   load_data     the data section's corpus, every split checked non-empty
// Requires of every function here: settings that passed validation (job/validate.hpp, or the
// values' ranges stated beside them); a value out of range throws error_exception.

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "paco/core/error.hpp"
#include "paco/io/text_corpus.hpp"
#include "paco/outer/co2.hpp"
#include "paco/outer/nesterov.hpp"
#include "paco/outer/one_of.hpp"
#include "paco/store/compression.hpp"
#include "paco/train/sync.hpp"

namespace paco::job {

struct train_section {
  int batch = 16;         // sequences per step
  long steps = 0;         // 0: as many as fit in budget_s
  double budget_s = 480;  // wall-clock budget for training when steps == 0
  float lr = 2e-3f;
  float min_lr = 2e-4f;
  long warmup = 100;
  float weight_decay = 0.1f;
  float beta1 = 0.9f;
  float beta2 = 0.95f;
  float grad_clip = 1.0f;  // global norm; 0 disables
  // The DiPaCo workers' inner optimizer: "adamw", or "muon" (optim/muon.hpp: orthogonalised
  // momentum on the hidden matrices at muon_lr, AdamW with the settings above elsewhere).
  std::string optimizer = "adamw";
  float muon_lr = 0.02f;
  float muon_momentum = 0.95f;
  int threads = 2;
  std::string device = "cpu";  // "cpu", or "cuda": the LM job's steps / the DiPaCo workers'
                               // inner loops on CUDA device 0
  std::string gemm = "bf16";   // cuda: "bf16" or "tf32" tensor-core products, or "fp32" GEMMs
  long seed = 1;
  long eval_every = 250;   // steps between validation passes
  long eval_batches = 24;  // batches per periodic validation (the final one uses the whole split)
  long checkpoint_every = 500;
};

struct data_section {
  std::string corpus = "brown";     // "brown", or "files": your own text (docs/corpora.md)
  std::string path;                 // brown: the unpacked corpus (empty: scripts/deps.sh's cache);
                                    // files: a directory of UTF-8 text files, or a JSONL file
  std::string dir;                  // the older name of path; set one of the two
  std::string text_field = "text";  // files, JSONL: the field holding a document's text
};

struct output_section {
  std::string dir = "out/lm_brown";
};

// Pipeline runs (job.mode = "pipeline"): the GPT cut into stages of contiguous blocks, each on
// its own process, activations sent over TCP (docs/pipeline.md). train.steps steps of
// train.batch sequences; every stage reads the same batches.
struct pipeline_section {
  int stages = 2;                  // K, one process each
  std::vector<int> split;          // the first block of stages 1 … K−1; empty: equal stages
  std::string schedule = "local";  // local (Laskin's local losses), gpipe, 1f1b
  int micro_batches = 8;           // gpipe, 1f1b: M, dividing train.batch
  int queue_depth = 2;             // local: steps a stage may run ahead of the next
  std::string head = "linear";     // local: stages 0 … K−2's auxiliary head (or shared_readout)
  int readout_refresh = 10;        // shared_readout: steps between copies of the final head
  int readout_delay = 2;           // shared_readout: steps before a copy applies
  std::vector<std::string> hosts;  // launch.mode = "manual": each stage's host (default loopback)
  int base_port = 0;  // stage k listens on base_port + k (a staged DiPaCo job: base_port + s − 1
                      // for its process s); 0: free ports (local)
  double link_mbps = 0;        // every link between stages, both ways (0: unlimited) …
  double link_latency_ms = 0;  // … with this added one-way latency
  double timeout_s = 120;      // every wait for a neighbour
  long eval_tokens = 0;        // the final scores: about this many tokens of each split (the same
                               // documents every time); 0: the whole splits
  std::string activations = "fp32";  // on the links between stages: fp32, bf16 or int8
};

// DiPaCo / DiLoCo runs (job.mode = "dipaco"). A grid [1] with workers_per_path = k is DiLoCo.
struct dipaco_section {
  std::vector<int> grid = {2, 2};  // experts per level (levels = entries, 1 to 8)
  int workers_per_path = 1;
  int rounds = 8;            // outer steps
  int inner_steps = 100;     // H
  int pretrain_steps = 200;  // shared base model (also the router's feature extractor)
  // The store's outer optimizer: "nesterov" (DiLoCo's: lr, momentum) or "co2" (CO2's
  // heavy-ball momentum on Δ/p, then clipping: outer/co2.hpp; lr α, momentum β).
  std::string outer = "nesterov";
  float outer_lr = 0.7f;
  float outer_momentum = 0.9f;
  float outer_gap_penalty = 1.0f;     // co2: p, the staleness-gap penalty (Δ enters as Δ/p)
  std::string outer_clip = "none";    // co2: none | element | norm (of the momentum)
  float outer_clip_threshold = 1.0f;  // co2: φ
  std::string path_rescale = "none";  // none | sqrt_paths | inv_sqrt_paths
  bool weight_by_shard = true;
  int prefix = 32;  // routing prefix (bytes)
  // Evaluation also re-routes every this many bytes to the path that best predicted the
  // previous chunk (DiPaCo's frequent re-routing); 0: only the prefix routing.
  int reroute_every = 64;
  // Codec of every push (docs/compression.md): fp32 (plain floats), bf16, fp16, int8 … int2
  // (any width), topk:D, lgreco:int, lgreco:topk:D; lossy ones keep an error-feedback residual
  // unless the string ends in "+noef". powersgd and sign_prune need the all-reduce DiLoCo.
  std::string compress = "fp32";
  int lgreco_every = 4;  // L-GreCo: rounds between choices of each tensor's level (F)
  // The documents the results table scores: "validation" (settings are chosen on it) or "test"
  // (figures reported after the settings were chosen; the router routes them the same way).
  std::string eval_split = "validation";
  // Local-loss DiPaCo (docs/pipeline.md): each worker's path cut into this many stages at level
  // boundaries, one process each, every stage pushing its own modules' Δ; [pipeline] says how
  // the stages train (schedule, head, queue_depth, activations, link_*, timeout_s). 1: off.
  int stages = 1;
  std::vector<int> stage_split;  // the first level of stages 1 … K−1; empty: equal runs of levels
};

// How a DiPaCo job's workers sync through the module store (docs/02_dipaco.md).
struct sync_section {
  // blocking: every worker waits for its round to close. co2, eager, naive_delayed: a worker's
  // push overlaps its next round's inner steps and the store's outer step reaches it one round
  // late (train/worker_loop.hpp). streaming: Streaming DiLoCo with the path's modules as
  // fragments, level l synced in slot l of every H inner steps, each sync landing overlap_steps
  // later, mixed in with alpha (no train budget). co2_snapshot: the official CO2 code's
  // asynchronous path made deterministic — the round's averaged modules overwrite θ
  // overlap_steps (≥ 1) steps after the push. Host and device workers alike.
  std::string mode = "blocking";
  int overlap_steps = 0;  // streaming: τ, in [0, H / levels); co2_snapshot: τ in [1, H)
  float alpha = 0.0f;     // streaming: θ ← α·θ + (1 − α)·G on landing, in [0, 1]
  // Workers of different speeds: each worker trains at most this long a round (0: H steps,
  // however long they take) and pushes what it trained, weighted by the share of H it reached,
  // so a slow worker neither holds its partners' rounds nor is left out of them. A push that
  // reaches a round that closed without it is dropped, counted in the worker's log ("late")
  // and the store's.
  double train_budget_s = 0;
  // How a worker's training time per round is set: "budget" (train_budget_s; 0: H steps),
  // "measured" (a worker slower than the store's push pace of its modules — how long after a
  // round opens their faster workers push — trains within 1.05 × that pace;
  // train/worker_loop.hpp pace_measured), "none" (H steps).
  std::string pace = "budget";
  // Rounds that close on a quorum (store/server.hpp): a module's round closes once `quorum` of
  // its workers pushed and `grace` × the median push spread of its recent rounds passed after
  // the quorum's last push (0: when every worker pushed, or at launch.round_timeout_s).
  int quorum = 0;
  double grace = 0.5;
  // Late work merged (store/module_store.hpp merge_late): a push s ≤ max_staleness rounds
  // behind its module's open round joins it with its weight × 1/(1+s) (0: dropped, as above).
  // quorum and max_staleness: sync.mode = "blocking" (for now).
  int max_staleness = 0;
};

struct launch_section {
  std::string mode = "local";  // local: spawn store and workers here over TCP;
                               // manual: prepare the run, print one command per process;
                               // mpi: every process started by mpirun / srun, its role by its
                               // rank (job/ranks.hpp)
  std::string store_host = "127.0.0.1";
  int base_port = 0;             // store listens on base_port + worker; 0: free ports
  double round_timeout_s = 120;  // a round closes this long after its first push
  double peer_timeout_s = 5;     // silence after which a process is considered dead
  int restarts = 3;              // local: a crashed worker is restarted up to this often
  // TLS on every store <-> worker link (mutual certificates from one CA; docs/transport.md).
  // PACO_TLS_CERT / PACO_TLS_KEY override cert and key, so machines can share one config.
  bool tls = false;
  std::string tls_ca, tls_cert, tls_key;
  std::string tls_peer_name;  // optional: a DNS name every peer's certificate must carry
  // Experiments with workers of different speeds: "W:F[,W:F …]" runs worker W F times slower
  // (F ≥ 1; it sleeps (F − 1) times its inner steps' time each round). Empty: none.
  std::string throttle;
  // WAN experiments on one machine: every store <-> worker link, both ways, shaped by paco's
  // per-link shaper (net::shaper_options) to this rate in megabits per second (0: unlimited) and
  // this added one-way latency per frame.
  double link_mbps = 0;
  double link_latency_ms = 0;
  // WAN links (net::tcp_options::streams, bdp_bytes; docs/transport.md): every TCP link of the
  // job (store <-> worker, stage <-> stage) striped over this many streams (1..16; TLS links
  // have one), and the links' bandwidth x round trip in bytes, which sizes their socket buffers
  // (0: autotuning).
  int link_streams = 1;
  double link_bdp_bytes = 0;
  // HTTP for watching a run (job/metrics.hpp, job/status_page.hpp): the store serves Prometheus
  // metrics at /metrics and its status page at / on this port, worker process s its metrics on
  // this port + s. A local run (mode "local", or store_host loopback) listens on loopback only;
  // any other on all interfaces, every request needing "Authorization: Bearer <PACO_TOKEN>"
  // (job/dipaco_job.hpp's http_listen_of). 0: off.
  int metrics_port = 0;
};

// Every section of a job.
struct settings {
  train_section train;
  data_section data;
  output_section output;
  dipaco_section dipaco;
  sync_section sync;
  launch_section launch;
  pipeline_section pipeline;
};

// launch.throttle "W:F[,W:F …]" → worker → factor. Errors: invalid_argument naming the field and
// the entry (a worker outside [1, workers], a factor not finite or below 1, a worker twice).
inline result<std::map<int, double>> parse_throttle(const std::string& text, int workers) {
  std::map<int, double> out;
  std::size_t at = 0;
  while (at < text.size()) {
    const std::size_t end = std::min(text.find(',', at), text.size());
    const std::string item = text.substr(at, end - at);
    at = end + 1;
    const auto colon = item.find(':');
    int w = 0;
    double f = 0;
    bool ok = colon != std::string::npos;
    try {
      std::size_t used = 0;
      if (ok) w = std::stoi(item.substr(0, colon), &used), ok = used == colon;
      if (ok) f = std::stod(item.substr(colon + 1), &used), ok = used == item.size() - colon - 1;
    } catch (const std::exception&) {
      ok = false;
    }
    if (!ok || w < 1 || w > workers || !std::isfinite(f) || f < 1 || out.count(w))
      return error(errc::invalid_argument,
                   "launch.throttle: '" + item + "' is not W:F with W a worker in [1, " +
                       std::to_string(workers) + "] (each once) and F ≥ 1 (e.g. \"4:4\")");
    out[w] = f;
  }
  return out;
}

// Where the data section's corpus lies: data.path, else data.dir (empty: Brown's default).
inline std::string data_path(const data_section& d) {
  return d.path.empty() ? d.dir : d.path;
}

// The data section's corpus, loaded, with every split checked non-empty (the split fractions are
// corpus::subset's defaults). Errors name the field and the file.
inline result<io::corpus> load_data(const data_section& d) {
  const std::string p = data_path(d);
  auto c = io::load_corpus(d.corpus, p, {.text_field = d.text_field});
  if (!c) return error(c.error().code, (p.empty() ? "data: " : "data.path: ") + c.error().message);
  if (auto s = io::check_splits(*c); !s) return error(s.error().code, "data: " + s.error().message);
  return c;
}

// The push codec of a validated config's DiPaCo job.
inline store::compression compression_of(const settings& c) {
  return store::parse_compression(c.dipaco.compress, std::size_t(c.dipaco.lgreco_every))
      .value_or_throw();
}

// The store's outer optimizer, one type for every choice of dipaco.outer.
using store_outer = outer::one_of<outer::nesterov, outer::co2>;

// dipaco.outer with its fields.
inline store_outer outer_of(const settings& cfg) {
  const auto& d = cfg.dipaco;
  if (d.outer == "co2")
    return outer::co2{.lr = d.outer_lr,
                      .momentum = d.outer_momentum,
                      .gap_penalty = d.outer_gap_penalty,
                      .clip = outer::parse_co2_clip(d.outer_clip).value_or_throw(),
                      .clip_threshold = d.outer_clip_threshold};
  return outer::nesterov{.lr = d.outer_lr, .momentum = d.outer_momentum};
}

// sync.mode with its fields.
inline train::sync_choice sync_of(const settings& cfg) {
  return train::parse_sync(cfg.sync.mode, train::streaming{.overlap = cfg.sync.overlap_steps,
                                                           .alpha = cfg.sync.alpha})
      .value_or_throw();
}

}  // namespace paco::job
