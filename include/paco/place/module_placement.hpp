#pragma once
// module_placement: where the DiPaCo module store keeps each module shard. Every round, each path
// worker pulls the modules of its path from the store hosts that own them and, after its inner
// steps, pushes one delta per module back (ARCHITECTURE.md, "one DiPaCo round"). Modules are
// split into `shards_per_module` equal shards; each shard lives on one store host. The placement
// minimises the round's communication critical path (cost model in docs/placement.md):
//
//   b[w][s]   = bytes of the shards on host s that worker w's path uses           (W,S)
//   link(w,s) = A[w][s]/1e3 + b[w][s]*8 / (B[w][s]*1e9)      if b[w][s] > 0, else 0
//   worker(w) = max( max_s link(w,s), sum_s b[w][s]*8 / (worker_nic[w]*1e9) )
//   host(s)   = sum_w b[w][s]*8 / (store_nic[s]*1e9)
//   phase(b)  = max( max_w worker(w), max_s host(s) )
//   round     = phase(b) + phase(push_ratio * b)          (pull, then push of the deltas)
//
// Transfers of one worker to different hosts run in parallel; a NIC of 0 means "not a limit".

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include "paco/core/error.hpp"

namespace paco::place {

// The module-placement problem. Matrices are row-major (W,S): worker w to store host s.
struct module_problem {
  int workers = 0;                        // W path workers
  int hosts = 0;                          // S store hosts
  std::vector<double> latency_ms{};       // (W,S) ms
  std::vector<double> bandwidth_gbps{};   // (W,S) Gbit/s, > 0
  std::vector<double> store_nic_gbps{};   // (S) host NIC, 0 = unlimited; empty = all unlimited
  std::vector<double> worker_nic_gbps{};  // (W) worker NIC, 0 = unlimited; empty = all unlimited
  std::vector<double> module_bytes{};     // (M) bytes of each module
  std::vector<std::vector<int>> paths{};  // (W) module ids used by each worker's path
};

// Placement settings.
struct module_placement_config {
  int shards_per_module = 1;  // equal shards per module, >= 1
  double push_ratio = 1.0;    // pushed delta bytes / pulled bytes (compression), >= 0
  int max_passes = 20;        // local-search passes (move one shard, or swap two), >= 0
};

// A placement: host_of_shard[m * shards_per_module + k] is the host of shard k of module m.
struct module_placement {
  std::vector<int> host_of_shard;  // (M * shards_per_module)
  double round_s = 0;              // round critical path (pull + push), seconds
  double pull_s = 0;               // pull phase, seconds
  double push_s = 0;               // push phase, seconds
};

// Checks a problem. Ensures: ok() iff W, S >= 1, matrices (W,S) finite with latency >= 0 and
// bandwidth > 0, NIC vectors empty or sized with entries >= 0, module sizes >= 0, every path
// entry a valid module id; else invalid_argument naming the field. Cost: O(W S + sum |path|).
inline status validate(const module_problem& p) {
  if (p.workers < 1 || p.hosts < 1)
    return {errc::invalid_argument, "module_problem: workers and hosts must be >= 1"};
  const auto ws = static_cast<std::size_t>(p.workers) * static_cast<std::size_t>(p.hosts);
  if (p.latency_ms.size() != ws || p.bandwidth_gbps.size() != ws)
    return {errc::invalid_argument, "module_problem: latency_ms and bandwidth_gbps must be " +
                                        std::to_string(p.workers) + "x" + std::to_string(p.hosts) +
                                        " (workers x hosts)"};
  for (std::size_t k = 0; k < ws; ++k) {
    if (!std::isfinite(p.latency_ms[k]) || p.latency_ms[k] < 0)
      return {errc::invalid_argument,
              "module_problem.latency_ms[" + std::to_string(k) + "]: must be finite and >= 0"};
    if (!std::isfinite(p.bandwidth_gbps[k]) || p.bandwidth_gbps[k] <= 0)
      return {errc::invalid_argument,
              "module_problem.bandwidth_gbps[" + std::to_string(k) + "]: must be finite and > 0"};
  }
  auto nic_ok = [](const std::vector<double>& v, int n) {
    if (v.empty()) return true;
    if (static_cast<int>(v.size()) != n) return false;
    return std::all_of(v.begin(), v.end(), [](double x) { return std::isfinite(x) && x >= 0; });
  };
  if (!nic_ok(p.store_nic_gbps, p.hosts))
    return {errc::invalid_argument,
            "module_problem.store_nic_gbps: empty or one entry >= 0 per host"};
  if (!nic_ok(p.worker_nic_gbps, p.workers))
    return {errc::invalid_argument,
            "module_problem.worker_nic_gbps: empty or one entry >= 0 per worker"};
  for (double b : p.module_bytes)
    if (!std::isfinite(b) || b < 0)
      return {errc::invalid_argument, "module_problem.module_bytes: entries must be >= 0"};
  if (static_cast<int>(p.paths.size()) != p.workers)
    return {errc::invalid_argument, "module_problem.paths: need one path per worker"};
  for (const auto& path : p.paths)
    for (int m : path)
      if (m < 0 || m >= static_cast<int>(p.module_bytes.size()))
        return {errc::invalid_argument, "module_problem.paths: module id " + std::to_string(m) +
                                            " out of range [0, " +
                                            std::to_string(p.module_bytes.size()) + ")"};
  return {};
}

namespace detail {

// Bytes per (worker, host) for a placement. (W,S)
inline std::vector<double> bytes_per_link(const module_problem& p, int shards,
                                          const std::vector<int>& host_of_shard) {
  const auto S = static_cast<std::size_t>(p.hosts);
  std::vector<double> b(static_cast<std::size_t>(p.workers) * S, 0.0);
  for (std::size_t w = 0; w < p.paths.size(); ++w)
    for (int m : p.paths[w])
      for (int k = 0; k < shards; ++k) {
        const auto h =
            static_cast<std::size_t>(host_of_shard[static_cast<std::size_t>(m) * shards + k]);
        b[w * S + h] += p.module_bytes[static_cast<std::size_t>(m)] / shards;
      }
  return b;
}

// phase(scale * b) of the cost model; `spread` (optional) receives the sum of every worker and
// host term, the tie-breaker of the local search on plateaus of the max.
inline double phase_s(const module_problem& p, const std::vector<double>& b, double scale,
                      double* spread = nullptr) {
  const auto W = static_cast<std::size_t>(p.workers), S = static_cast<std::size_t>(p.hosts);
  double worst = 0, sum = 0;
  std::vector<double> host_bytes(S, 0.0);
  for (std::size_t w = 0; w < W; ++w) {
    double total = 0, link_max = 0;
    for (std::size_t s = 0; s < S; ++s) {
      const double bytes = scale * b[w * S + s];
      if (bytes <= 0) continue;
      total += bytes;
      host_bytes[s] += bytes;
      link_max = std::max(link_max, p.latency_ms[w * S + s] / 1e3 +
                                        bytes * 8.0 / (p.bandwidth_gbps[w * S + s] * 1e9));
    }
    double t = link_max;
    if (!p.worker_nic_gbps.empty() && p.worker_nic_gbps[w] > 0)
      t = std::max(t, total * 8.0 / (p.worker_nic_gbps[w] * 1e9));
    worst = std::max(worst, t);
    sum += t;
  }
  if (!p.store_nic_gbps.empty())
    for (std::size_t s = 0; s < S; ++s)
      if (p.store_nic_gbps[s] > 0) {
        const double t = host_bytes[s] * 8.0 / (p.store_nic_gbps[s] * 1e9);
        worst = std::max(worst, t);
        sum += t;
      }
  if (spread) *spread += sum;
  return worst;
}

}  // namespace detail

// The round critical path of a placement (the cost model at the top of this file).
// Requires: validate(p).ok(); host_of_shard has M * shards_per_module entries in [0, S).
// Ensures: round_s == pull_s + push_s. Cost: O(sum |path| * shards + W S).
inline module_placement evaluate_placement(const module_problem& p,
                                           const module_placement_config& c,
                                           std::vector<int> host_of_shard) {
  module_placement r;
  const auto b = detail::bytes_per_link(p, c.shards_per_module, host_of_shard);
  r.pull_s = detail::phase_s(p, b, 1.0);
  r.push_s = detail::phase_s(p, b, c.push_ratio);
  r.round_s = r.pull_s + r.push_s;
  r.host_of_shard = std::move(host_of_shard);
  return r;
}

// Round-robin placement (shard i on host i mod S): the reference a store without placement uses.
// Ensures: as evaluate_placement. Cost: as evaluate_placement.
inline module_placement round_robin_placement(const module_problem& p,
                                              const module_placement_config& c) {
  std::vector<int> h(p.module_bytes.size() * static_cast<std::size_t>(c.shards_per_module));
  for (std::size_t i = 0; i < h.size(); ++i)
    h[i] = static_cast<int>(i % static_cast<std::size_t>(p.hosts));
  return evaluate_placement(p, c, std::move(h));
}

// Places module shards on store hosts: greedy (largest shard x users first, each on the host
// that minimises the round so far), then local search moving one shard or swapping two while
// the round strictly shrinks.
// Requires: validate(p) and the config ranges (else invalid_argument naming the field).
// Ensures: round_s <= the greedy placement's round_s; deterministic. Cost: greedy
// O(M k S C) and O(passes (M k)^2 C) for the search, C = one evaluation.
inline result<module_placement> place_modules(const module_problem& p,
                                              const module_placement_config& c = {}) {
  if (auto s = validate(p); !s) return s.error();
  if (c.shards_per_module < 1)
    return {errc::invalid_argument, "module_placement.shards_per_module = " +
                                        std::to_string(c.shards_per_module) + ": must be >= 1"};
  if (!std::isfinite(c.push_ratio) || c.push_ratio < 0)
    return {errc::invalid_argument, "module_placement.push_ratio: must be finite and >= 0"};
  if (c.max_passes < 0)
    return {errc::invalid_argument, "module_placement.max_passes: must be >= 0"};
  const int shards = c.shards_per_module;
  const auto M = p.module_bytes.size();
  const std::size_t n_shards = M * static_cast<std::size_t>(shards);
  std::vector<int> users(M, 0);
  for (const auto& path : p.paths)
    for (int m : path) ++users[static_cast<std::size_t>(m)];
  std::vector<std::size_t> order(n_shards);
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    const auto ma = a / static_cast<std::size_t>(shards), mb = b / static_cast<std::size_t>(shards);
    return p.module_bytes[ma] * users[ma] > p.module_bytes[mb] * users[mb];
  });
  // Unplaced shards sit on host -1 and contribute nothing while the greedy pass runs.
  std::vector<int> host(n_shards, -1);
  auto round_of = [&](const std::vector<int>& h) {
    const auto S = static_cast<std::size_t>(p.hosts);
    std::vector<double> b(static_cast<std::size_t>(p.workers) * S, 0.0);
    for (std::size_t w = 0; w < p.paths.size(); ++w)
      for (int m : p.paths[w])
        for (int k = 0; k < shards; ++k) {
          const int hs = h[static_cast<std::size_t>(m) * shards + k];
          if (hs >= 0)
            b[w * S + static_cast<std::size_t>(hs)] +=
                p.module_bytes[static_cast<std::size_t>(m)] / shards;
        }
    double spread = 0;
    const double round =
        detail::phase_s(p, b, 1.0, &spread) + detail::phase_s(p, b, c.push_ratio, &spread);
    return std::pair{round, spread};
  };
  // Strictly better: a shorter round, or the same round with less total time elsewhere (this
  // walks the plateaus of the max, where no single move shortens the critical path).
  auto better = [](std::pair<double, double> a, std::pair<double, double> b) {
    if (a.first < b.first * (1 - 1e-12)) return true;
    return a.first <= b.first * (1 + 1e-12) && a.second < b.second * (1 - 1e-12);
  };
  for (std::size_t sh : order) {
    std::pair<double, double> best{std::numeric_limits<double>::infinity(), 0.0};
    int best_h = 0;
    for (int h = 0; h < p.hosts; ++h) {
      host[sh] = h;
      const auto r = round_of(host);
      if (h == 0 || better(r, best)) {
        best = r;
        best_h = h;
      }
    }
    host[sh] = best_h;
  }
  auto cur = round_of(host);
  for (int pass = 0; pass < c.max_passes; ++pass) {
    bool improved = false;
    for (std::size_t a = 0; a < n_shards; ++a) {
      for (int h = 0; h < p.hosts; ++h) {  // move shard a to host h
        const int old = host[a];
        if (h == old) continue;
        host[a] = h;
        const auto r = round_of(host);
        if (better(r, cur)) {
          cur = r;
          improved = true;
        } else {
          host[a] = old;
        }
      }
      for (std::size_t b = a + 1; b < n_shards; ++b) {  // swap the hosts of shards a and b
        if (host[a] == host[b]) continue;
        std::swap(host[a], host[b]);
        const auto r = round_of(host);
        if (better(r, cur)) {
          cur = r;
          improved = true;
        } else {
          std::swap(host[a], host[b]);
        }
      }
    }
    if (!improved) break;
  }
  return evaluate_placement(p, c, std::move(host));
}

}  // namespace paco::place
