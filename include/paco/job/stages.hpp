#pragma once
// The [pipeline] settings as the library's pipeline options, for a job whose model is cut into
// stages, one process each: how they train (pipeline_options_of), the links between them
// (stage_link_options), what every stage must share before it trains (stage_fields, for
// collectives::agree, and stage_agreement_failure when they do not), and the --peers list of
// every stage's host:port (split_peers).
#include <chrono>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "paco/collectives/agree.hpp"
#include "paco/job/dipaco_job.hpp"
#include "paco/job/settings.hpp"
#include "paco/net/tcp_options.hpp"
#include "paco/pipeline/schedule.hpp"
#include "paco/pipeline/stage_runner.hpp"

namespace paco::job {

// How stages train and talk ([pipeline] with train.grad_clip), as the pipeline's options.
inline pipeline::pipeline_options pipeline_options_of(const settings& c) {
  const auto& p = c.pipeline;
  return {.sched = pipeline::parse_schedule(p.schedule).value_or_throw(),
          .micro_batches = p.micro_batches,
          .queue_depth = p.queue_depth,
          .head = pipeline::parse_head_kind(p.head).value_or_throw(),
          .readout_refresh = p.readout_refresh,
          .readout_delay = p.readout_delay,
          .grad_clip = c.train.grad_clip,
          .activations = pipeline::parse_wire_format(p.activations).value_or_throw(),
          .timeout = std::chrono::milliseconds(long(p.timeout_s * 1000))};
}

// Stage k's endpoint: the group of every stage, its links to the neighbouring stages shaped by
// pipeline.link_mbps and pipeline.link_latency_ms.
inline net::tcp_options stage_link_options(const settings& c, int k,
                                           const std::vector<std::string>& peers) {
  net::tcp_options o;
  o.rank = k;
  o.size = int(peers.size());
  o.peers = peers;
  o.token = token_from_env();
  o.allow_single = true;
  o.peer_timeout = std::chrono::milliseconds(long(c.launch.peer_timeout_s * 1000));
  o.connect_timeout = std::chrono::milliseconds(long(c.pipeline.timeout_s * 1000));
  net::shaper_options link;
  link.rate_bytes_per_s = c.pipeline.link_mbps * 1e6 / 8;
  link.latency = std::chrono::microseconds(long(c.pipeline.link_latency_ms * 1000));
  for (int n : {k - 1, k + 1})
    if (n >= 0 && n < o.size) o.peer_shapers[n] = link;
  o.streams = c.launch.link_streams;
  o.bdp_bytes = static_cast<std::size_t>(c.launch.link_bdp_bytes);
  return o;
}

// What every stage of a run must share: the model, the data, the batches and step count, the
// optimizer and the pipeline's schedule (collectives::agree refuses a difference, naming it).
// model: the model's description (its configuration as key=value items).
inline std::vector<collectives::agree_field> stage_fields(const settings& c,
                                                          const std::string& model) {
  auto str = [](auto v) {
    std::ostringstream os;
    os << v;
    return os.str();
  };
  std::string split;
  for (int b : c.pipeline.split) split += (split.empty() ? "" : ",") + std::to_string(b);
  const auto& t = c.train;
  const auto& p = c.pipeline;
  return {{"model", model},
          {"data.corpus", c.data.corpus},
          {"train.batch", str(t.batch)},
          {"train.steps", str(t.steps)},
          {"train.seed", str(t.seed)},
          {"train.lr", str(t.lr) + " " + str(t.min_lr) + " warmup " + str(t.warmup)},
          {"train.weight_decay", str(t.weight_decay)},
          {"train.grad_clip", str(t.grad_clip)},
          {"pipeline.stages", str(p.stages)},
          {"pipeline.split", split},
          {"pipeline.schedule", p.schedule},
          {"pipeline.micro_batches", str(p.micro_batches)},
          {"pipeline.queue_depth", str(p.queue_depth)},
          {"pipeline.head", p.head + " " + str(p.readout_refresh) + " " + str(p.readout_delay)},
          {"pipeline.activations", p.activations}};
}

// A failed agreement of the stages (collectives::agree over their links), as an exit code and a
// message: settings that differ, or fields that do not parse, are bad input (exit_bad_input: a
// restart cannot mend them); a stage lost while they agreed is a lost link (exit_link_lost: the
// launcher restarts the stages).
inline std::pair<int, std::string> stage_agreement_failure(const error& e) {
  if (e.code == errc::mismatch || e.code == errc::protocol || e.code == errc::too_large)
    return {exit_bad_input, "the stages were started with different settings: " + e.what()};
  return {exit_link_lost,
          "a stage was lost while the stages agreed on their settings: " + e.what()};
}

// --peers: every stage's host:port, comma-separated.
inline std::vector<std::string> split_peers(const std::string& csv) {
  std::vector<std::string> peers;
  std::stringstream ss(csv);
  for (std::string p; std::getline(ss, p, ',');) peers.push_back(p);
  return peers;
}

}  // namespace paco::job
