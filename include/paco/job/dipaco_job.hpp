#pragma once
// A DiPaCo / DiLoCo job over real processes: what it is made of and the names its processes
// share. The job is one model (any nn::BlockModel: a block_lm of one's own, or nn::gpt) and its
// settings (job/settings.hpp); its roles are
//   launcher  job/launcher.hpp     prepares the run directory, starts (or prints) the processes
//                                  below, shows progress, evaluates and prints the results table
//   prepare   job/prepare.hpp      the shared base model (pretrained) and the routing
//   store     job/store_role.hpp   every module of the grid, one TCP link per worker
//   worker    job/worker_role.hpp  one path: pull, H inner steps, push Δ, wait; checkpoints
// and job/main.hpp dispatches a program's command line to them, so a program of one's own is a
// model, its settings and one call (examples/three_levels_job).
//
//   dipaco_job<Model>   the settings, the model and the job's hooks
//   job_processes       the processes that push to the store (a worker, or a stage of one)
//   config_fingerprint  what a checkpoint of the job depends on
//   link_options        the TCP link of a worker (or stage) process to the store
//   http_listen_of      where a process serves its metrics, and the token it asks
//   check_ports         every port a run's local processes will listen on, free before it starts
//
// Exit codes of the store and worker roles (the launcher restarts only the restartable ones):
//   0  the run is complete for this process
//   2  bad input: configuration, files, checkpoints (restarting cannot help)
//   3  the link to the store or to a worker was lost (restartable)
//   4  the process's state could not be written (checkpoint or log, after retries): the run
//      cannot go on without losing work, and nothing may report it finished

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <unistd.h>

#include <nlohmann/json.hpp>

#include "paco/core/arena.hpp"
#include "paco/core/error.hpp"
#include "paco/io/batches.hpp"
#include "paco/io/json_read.hpp"
#include "paco/io/safetensors.hpp"
#include "paco/job/device_worker.hpp"
#include "paco/job/settings.hpp"
#include "paco/net/free_port.hpp"
#include "paco/net/loopback.hpp"
#include "paco/net/tcp_options.hpp"
#include "paco/nn/concepts.hpp"
#include "paco/optim/adamw.hpp"
#include "paco/path/level_map.hpp"
#include "paco/path/path_plan.hpp"
#include "paco/pipeline/path_stages.hpp"
#include "paco/store/compression.hpp"
#include "paco/train/inner_loop.hpp"

namespace paco::job {

namespace fs = std::filesystem;
using json = nlohmann::json;

constexpr double ln2 = 0.6931471805599453;

// Exit codes of the roles (see the file comment).
constexpr int exit_bad_input = 2, exit_link_lost = 3, exit_write_failed = 4;
// Whether a process that exited with `code` is restarted (within launch.restarts): not after bad
// input or a state it could not write (exit 2, 4), which stay so however often it restarts. The
// rule of every launcher: the DiPaCo job's (job/launcher.hpp) and the pipeline job's
// (job/pipeline_job.hpp).
inline bool restartable(int code) {
  return code != exit_bad_input && code != exit_write_failed;
}
// Tries of a checkpoint or log write before it is fatal (pauses of 0.2, 0.4, 0.8 s between).
constexpr int write_tries = 4;

// The environment variable through which the launcher (launcher.hpp) tells the processes it
// spawns its pid: a process whose parent it names is restarted by it when it fails.
constexpr const char* supervisor_env = "PACO_SUPERVISOR";
inline bool supervised_by_launcher() {
  const char* s = std::getenv(supervisor_env);
  return s != nullptr && std::string(s) == std::to_string(::getppid());
}

// How long workers may fail to reach a live store before the store is blamed: the launcher then
// stops the run; a worker that rejoins in its own process (worker_role.hpp) gives up.
inline std::chrono::duration<double> store_silence(const settings& cfg) {
  return std::chrono::duration<double>(
      std::max({60.0, 2 * cfg.launch.round_timeout_s, 10 * cfg.launch.peer_timeout_s}));
}

// A worker on a device instead of the host (job/device_worker.hpp): worker `id` of a path
// (its levels and modules) with the inner optimizer, inner loop settings, shard, seed and push
// codec the host worker would have. Errors: unsupported (no device, no kernels for the codec).
template <class Model>
using device_factory = std::function<result<std::unique_ptr<device_path_worker>>(
    int id, const Model& model, std::vector<path::level_span> levels, std::vector<int> modules,
    optim::adamw opt, const train::inner_config& cfg, const io::token_stream& shard,
    std::uint64_t seed, const store::compression& compression)>;

// The LM job's inner loop on a device (job/device_worker.hpp, job/lm_job.hpp): the model (which
// outlives it), the loop's settings, the shard it samples and the sampler's seed. Errors:
// unsupported (no device, naming why).
template <class Model>
using lm_device_factory = std::function<result<std::unique_ptr<device_lm>>(
    const Model& model, const train::inner_config& cfg, const io::token_stream& shard,
    std::uint64_t seed)>;

// Writes one exported model (a path's θ, or the base model's) as out/<stem>…; meta: where it
// came from (source, path, grid, round). Errors name the file.
template <class Model>
using model_writer =
    std::function<status(const fs::path& out, const std::string& stem, const Model& model,
                         const float* theta, const std::map<std::string, std::string>& meta)>;

// A DiPaCo job: the settings (every section), the model, and what the job cannot know of it.
// The model's blocks are cut into the grid's levels (path::split_gpt_levels: the embedding with
// the first level, the final norm and head with the last), so Model is a BlockModel
// (nn::block_lm of any block, or nn::gpt). The same job runs the model as one (job.mode = "lm",
// job/lm_job.hpp) or cut into pipeline stages (job/pipeline_job.hpp).
template <nn::BlockModel Model>
struct dipaco_job : settings {
  Model model;
  // The model's configuration as space-separated key=value items: the first part of every
  // checkpoint's fingerprint, so a checkpoint of another model is refused. Empty:
  // describe_model's (vocab, ctx, width, blocks, parameter count), which does not tell apart
  // models of the same size (another head count): set it whenever that can happen.
  std::string model_fingerprint;
  // The model's whole configuration as JSON, recorded (not compared) in the store checkpoint and
  // quoted by the export's model card (empty: describe_model's items).
  std::string model_config;
  // The name in the launcher's messages and its lock.
  std::string program = "paco";
  // The arguments that give a child process of this program this job, after the program's name
  // (paco_train: --config FILE and every --set): the launcher appends the process's role. A
  // program whose main() is run_main builds its job in code and leaves this empty (run_main
  // refuses arguments it does not know).
  std::vector<std::string> child_args;
  // train.device = "cuda": the device worker (empty: only host workers).
  device_factory<Model> make_device_worker;
  // train.device = "cuda" in the LM job (job/lm_job.hpp; empty: the host only).
  lm_device_factory<Model> make_device_lm;
  // --export: how a model is written (empty: write_safetensors_model).
  model_writer<Model> write_model;
  // The program's configuration as it was given (paco_train: its config file and every --set, as
  // JSON), which a new run keeps in its directory (run_dir::config_record) so that a program can
  // --export, --score or rebuild the table of the run from its directory alone. Empty: none kept.
  std::string config_record;
};

// The model's shape and size as key=value items (model.vocab, ctx, d, blocks, params,
// tie_weights).
template <nn::BlockModel Model>
std::string describe_model(const Model& m) {
  std::ostringstream o;
  o << "model.vocab=" << m.shape().vocab << " model.ctx=" << m.shape().ctx
    << " model.d=" << m.shape().d << " model.blocks=" << m.blocks()
    << " model.params=" << m.param_count() << " model.tie_weights=" << m.shape().tie_weights;
  return o.str();
}

// The job's model as its checkpoints and its stages describe it.
template <nn::BlockModel Model>
std::string model_description(const dipaco_job<Model>& cfg) {
  return cfg.model_fingerprint.empty() ? describe_model(cfg.model) : cfg.model_fingerprint;
}

// The default model_writer: out/<stem>.safetensors with the model's tensor names and meta.
template <nn::BlockModel Model>
status write_safetensors_model(const fs::path& out, const std::string& stem, const Model& model,
                               const float* theta, const std::map<std::string, std::string>& meta) {
  std::vector<io::tensor_ref> t;
  for (auto& nt : model.tensors()) t.push_back({nt.name, nt.shape, theta + nt.offset});
  auto m = meta;
  m["format"] = "paco-model-1";
  m["model"] = describe_model(model);
  return io::save_safetensors(out / (stem + ".safetensors"), t, m);
}

// The model's levels: its blocks cut into as many levels as the grid has.
template <nn::BlockModel Model>
std::vector<path::level_span> levels_of(const dipaco_job<Model>& cfg) {
  return path::split_gpt_levels(cfg.model.layout(), cfg.model.blocks(), int(cfg.dipaco.grid.size()))
      .value_or_throw();
}

// 32 random hex digits (the launcher's PACO_TOKEN, a run's id).
inline std::string random_token() {
  std::random_device rd;
  char b[33];
  for (int i = 0; i < 32; ++i) b[i] = "0123456789abcdef"[rd() % 16];
  b[32] = 0;
  return b;
}

// The run's plan: the configured grid over the model's levels, workers_per_path workers per
// path. Worker ids of the job are 1 … workers; worker w is the plan's worker w − 1.
template <nn::BlockModel Model>
path::path_plan make_plan(const dipaco_job<Model>& cfg) {
  return path::path_plan::make_runtime(cfg.dipaco.grid, levels_of(cfg), cfg.dipaco.workers_per_path)
      .value_or_throw();
}

// ---- the processes that push to the store ----
// One per worker; with dipaco.stages = K > 1 (local-loss DiPaCo) one per stage of each worker's
// path, every stage pushing its own modules' Δ. Process s (1 … count()) is stage (s − 1) % K of
// worker (s − 1) / K + 1, and the store's worker s (its link, port and pushes).
struct job_processes {
  int workers = 0, K = 1;
  int count() const noexcept { return workers * K; }
  bool staged() const noexcept { return K > 1; }
  int worker_of(int s) const noexcept { return (s - 1) / K + 1; }
  int stage_of(int s) const noexcept { return (s - 1) % K; }
  int id(int w, int k) const noexcept { return (w - 1) * K + k + 1; }
  // The name of its log files: worker-W, or worker-W-stage-K.
  std::string name(int s) const {
    const std::string w = "worker-" + std::to_string(worker_of(s));
    return staged() ? w + "-stage-" + std::to_string(stage_of(s)) : w;
  }
};
inline job_processes processes_of(const settings& cfg, const path::path_plan& g) {
  return {g.workers(), std::max(1, cfg.dipaco.stages)};
}
// The cut of a path into dipaco.stages stages.
template <nn::BlockModel Model>
pipeline::path_stages stages_of(const dipaco_job<Model>& cfg, const path::path_plan& g) {
  return pipeline::path_stages::make(cfg.model, g.level_spans(), std::max(1, cfg.dipaco.stages),
                                     cfg.dipaco.stage_split)
      .value_or_throw();
}
// The modules process s pushes: its worker's path's, or those of its stage's levels.
template <nn::BlockModel Model>
std::vector<int> process_modules(const dipaco_job<Model>& cfg, const path::path_plan& g,
                                 const job_processes& jp, int s) {
  const auto& all = g.worker_modules(jp.worker_of(s) - 1);
  if (!jp.staged()) return all;
  std::vector<int> m;
  for (int l : stages_of(cfg, g).levels_of(jp.stage_of(s))) m.push_back(all[std::size_t(l)]);
  return m;
}

// The environment variable `name`, or `fallback` when it is unset or empty.
inline std::string env_or(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::string(v) : fallback;
}

inline std::string token_from_env() {
  return env_or("PACO_TOKEN", "");
}

// The store and the workers authenticate every link with PACO_TOKEN: without it nothing can
// connect, so a process without one refuses to start.
inline status require_token(const char* role) {
  if (!token_from_env().empty()) return {};
  return {errc::invalid_argument,
          std::string(role) +
              ": PACO_TOKEN is not set (the launcher sets it for the processes "
              "it starts; set the same secret on every machine of a manual run)"};
}

// Where a process of the run serves HTTP (launch.metrics_port) and what its clients must show.
struct http_listen {
  std::string host;   // the address to bind
  std::string token;  // required of every request as a bearer token (empty: none)
};
// A local run (launch.mode "local", or launch.store_host naming loopback: localhost, 127.x.y.z,
// ::1) binds loopback only (store_host when it is a loopback address, else 127.0.0.1) and asks
// no token; any other binds every interface (0.0.0.0) and requires `token`, the run's.
// Requires: token non-empty (require_token) when the run is not local.
inline http_listen http_listen_of(const launch_section& l, const std::string& token) {
  const bool loopback = net::is_loopback_host(l.store_host);
  if (!loopback && l.mode != "local") return {"0.0.0.0", token};
  std::string host = l.store_host;
  if (host.size() > 2 && host.front() == '[') host = host.substr(1, host.size() - 2);
  if (!loopback || host.find_first_not_of("0123456789.:abcdefABCDEF") != std::string::npos)
    host = "127.0.0.1";  // a name (localhost), or a local run on another interface's address
  return {host, ""};
}

// Every port the processes of a run on this machine will listen on, checked before any work
// starts (a port in use would otherwise surface late: a store waiting for workers that cannot
// reach it, a metrics server failing after pretraining): the store's link per process
// (launch.base_port + s, when set), the metrics of the store and of process s (launch.metrics_port,
// + s), and with stages their links (pipeline.base_port + s − 1, when set). stages_here: whether
// the stage links are on this machine (a local launch). Errors: io naming the port, whose it is,
// the setting and the system's reason.
inline status check_ports(const settings& cfg, const job_processes& jp, bool stages_here) {
  auto check = [](const std::string& host, int port, const std::string& whose,
                  const char* setting) -> status {
    if (auto s = net::port_available(host, port); !s)
      return {errc::io, "port " + std::to_string(port) + " (" + whose + ", " + setting +
                            ") cannot be listened on: " + s.error().message +
                            " (another process holds it? choose another " + setting + ")"};
    return {};
  };
  const std::string link_host = cfg.launch.store_host;
  for (int s = 1; s <= jp.count() && cfg.launch.base_port > 0; ++s)
    if (auto st = check(link_host, cfg.launch.base_port + s, "the store's link to " + jp.name(s),
                        "launch.base_port");
        !st)
      return st;
  if (cfg.launch.metrics_port > 0) {
    const std::string host = http_listen_of(cfg.launch, "-").host;
    if (auto st =
            check(host, cfg.launch.metrics_port, "the store's metrics", "launch.metrics_port");
        !st)
      return st;
    for (int s = 1; s <= jp.count(); ++s)
      if (auto st = check(host, cfg.launch.metrics_port + s, jp.name(s) + "'s metrics",
                          "launch.metrics_port");
          !st)
        return st;
  }
  for (int s = 1; jp.staged() && stages_here && cfg.pipeline.base_port > 0 && s <= jp.count(); ++s)
    if (auto st = check("127.0.0.1", cfg.pipeline.base_port + s - 1, jp.name(s) + "'s stage link",
                        "pipeline.base_port");
        !st)
      return st;
  return {};
}

// The configuration a checkpoint of this job depends on, as space-separated key=value items
// (recorded in every checkpoint's metadata and compared on resume; dipaco.rounds may change).
template <nn::BlockModel Model>
std::string config_fingerprint(const dipaco_job<Model>& cfg) {
  std::string grid;
  for (std::size_t i = 0; i < cfg.dipaco.grid.size(); ++i)
    grid += (i ? "x" : "") + std::to_string(cfg.dipaco.grid[i]);
  const auto& d = cfg.dipaco;
  std::ostringstream o;
  o << model_description(cfg) << " dipaco.grid=" << grid
    << " dipaco.workers_per_path=" << d.workers_per_path << " dipaco.inner_steps=" << d.inner_steps
    << " dipaco.pretrain_steps=" << d.pretrain_steps << " dipaco.outer_lr=" << d.outer_lr
    << " dipaco.outer_momentum=" << d.outer_momentum << " dipaco.path_rescale=" << d.path_rescale
    << " dipaco.weight_by_shard=" << d.weight_by_shard << " dipaco.prefix=" << d.prefix
    << " dipaco.compress=" << d.compress << " train.batch=" << cfg.train.batch
    << " train.seed=" << cfg.train.seed;
  // The routing file holds a route per scored document: another split is another run.
  if (d.eval_split != "validation") o << " dipaco.eval_split=" << d.eval_split;
  // An overlapped rule's checkpoint holds a round trained and not landed, a blocking one's a
  // round already pushed: neither resumes under the other (blocking adds nothing, so checkpoints
  // written before the overlapped rules existed still resume).
  if (cfg.sync.mode != "blocking") o << " sync.mode=" << cfg.sync.mode;
  if (cfg.sync.mode == "streaming")
    o << " sync.overlap_steps=" << cfg.sync.overlap_steps << " sync.alpha=" << cfg.sync.alpha;
  // The inner optimizer's state is in every worker checkpoint: adamw (the only one before
  // train.optimizer) adds nothing.
  if (cfg.train.optimizer != "adamw")
    o << " train.optimizer=" << cfg.train.optimizer << " train.muon_lr=" << cfg.train.muon_lr
      << " train.muon_momentum=" << cfg.train.muon_momentum;
  // Likewise the outer optimizer: nesterov, the only one before dipaco.outer, adds nothing.
  if (d.outer != "nesterov")
    o << " dipaco.outer=" << d.outer << " dipaco.outer_gap_penalty=" << d.outer_gap_penalty
      << " dipaco.outer_clip=" << d.outer_clip
      << " dipaco.outer_clip_threshold=" << d.outer_clip_threshold;
  return o.str();
}

// The link of process `worker` to the store on `port`: rank 0 the store's end, 1 the worker's.
inline net::tcp_options link_options(const settings& cfg, int worker, int port, int rank,
                                     const std::string& token) {
  net::tcp_options o;
  o.rank = rank;
  o.size = 2;
  o.coordinator = cfg.launch.store_host + ":" + std::to_string(port);
  o.listen_host = cfg.launch.store_host == "127.0.0.1" ? "127.0.0.1" : "0.0.0.0";
  o.token = token;
  o.epoch = std::uint64_t(worker);
  o.connect_timeout = std::chrono::milliseconds(rank == 0 ? 2000 : 60000);
  o.peer_timeout = std::chrono::milliseconds(long(cfg.launch.peer_timeout_s * 1000));
  o.heartbeat_interval =
      std::chrono::milliseconds(std::max(50L, long(cfg.launch.peer_timeout_s * 100)));
  o.shaper.rate_bytes_per_s = cfg.launch.link_mbps * 1e6 / 8;
  o.shaper.latency = std::chrono::microseconds(long(cfg.launch.link_latency_ms * 1000));
  o.streams = cfg.launch.link_streams;
  o.bdp_bytes = static_cast<std::size_t>(cfg.launch.link_bdp_bytes);
  if (cfg.launch.tls) {
    o.tls = {.enabled = true,
             .ca_file = cfg.launch.tls_ca,
             .cert_file = env_or("PACO_TLS_CERT", cfg.launch.tls_cert),
             .key_file = env_or("PACO_TLS_KEY", cfg.launch.tls_key),
             .peer_name = cfg.launch.tls_peer_name};
  }
  return o;
}

// The job's data as the store's checkpoint and description record it: the corpus, and where it
// lies when not in the default place.
inline std::string data_description(const settings& cfg) {
  return "corpus=" + cfg.data.corpus +
         (data_path(cfg.data).empty() ? "" : " path=" + data_path(cfg.data));
}

// The store's port of process `worker`: the run's drawn ports, else launch.base_port + worker.
// Requires: routing from read_routing (its ports checked: integers in [1, 65535]), with a port
// for process `worker` when it has ports. Ensures: the port, read through io::json_int (never
// narrowed unchecked); 0 (no port) in a release build if the requirement is broken.
inline int port_of(const settings& cfg, const json& routing, int worker) {
  if (!routing.contains("ports")) return cfg.launch.base_port + worker;
  const json& ports = routing["ports"];
  const auto i = std::size_t(worker - 1);
  const auto port =
      ports.is_array() && i < ports.size()
          ? io::json_int(ports[i], "routing.json ports[" + std::to_string(i) + "]", 1, 65535)
          : result<int>(errc::corrupt,
                        "routing.json holds no port for process " + std::to_string(worker));
  PACO_ASSERT(port.ok(), port.error().message);
  return port ? *port : 0;
}

}  // namespace paco::job
