#pragma once
// topology: devices joined by a network described by a latency matrix A (ms) and a bandwidth
// matrix B (Gbit/s), plus the DT-FM workload (pipeline/data-parallel degrees and payloads).
// Sending c GB from d to d' takes A[d][d']/1e3 + c*8/B[d][d'] seconds (the alpha-beta model of
// ALGORITHMS.md §1.1). Matrices are row-major (N,N); the diagonal is never used by the cost model.

#include <cmath>
#include <cstddef>
#include <string>
#include <vector>

#include "paco/core/error.hpp"

namespace paco::place {

// One device: a GPU (or host) that runs exactly one tasklet.
// compute_tflops and memory_gb describe the device; the DT-FM cost model does not use them.
struct device {
  std::string name;           // unique label, e.g. "Oregon/3"
  std::string site;           // region, instance or site; devices of one site share a row pattern
  double compute_tflops = 0;  // peak rate (informative)
  double memory_gb = 0;       // device memory (informative)
};

// The network: N devices and their (N,N) latency and bandwidth matrices.
// Requires (checked by validate): both matrices hold N*N finite entries; latency >= 0 everywhere;
// bandwidth > 0 off the diagonal.
struct topology {
  std::vector<device> devices;         // (N)
  std::vector<double> latency_ms;      // (N,N) row-major, milliseconds
  std::vector<double> bandwidth_gbps;  // (N,N) row-major, Gbit/s ("Gbps" in the DT-FM code)

  // Number of devices N.
  int size() const noexcept { return static_cast<int>(devices.size()); }
  // Latency from i to j in ms. Requires: 0 <= i,j < N.
  double latency(int i, int j) const noexcept {
    return latency_ms[static_cast<std::size_t>(i) * devices.size() + static_cast<std::size_t>(j)];
  }
  // Bandwidth from i to j in Gbit/s. Requires: 0 <= i,j < N.
  double bandwidth(int i, int j) const noexcept {
    return bandwidth_gbps[static_cast<std::size_t>(i) * devices.size() +
                          static_cast<std::size_t>(j)];
  }
  // Seconds to send `gb` gigabytes from i to j: A/1e3 + gb*8/B. Requires: i != j, valid topology.
  double transfer_s(int i, int j, double gb) const noexcept {
    return latency(i, j) / 1e3 + gb * 8.0 / bandwidth(i, j);
  }
};

// The DT-FM workload: D_PP stages x D_DP data-parallel shards, one tasklet per device.
// Defaults: GPT-3 XL (1.3B), 24 layers / 3 per stage, 1e6-token batch / 1.25e5 per tasklet
// (ALGORITHMS.md §1.1 and the DT-FM code).
struct workload {
  int d_pp = 8;  // pipeline stages ("way")
  int d_dp = 8;  // data-parallel shards per stage ("partition_size")
  // Gradient per stage, fp32: 1.3e9 params * 4 B * 3/24 layers = 0.65 GB.
  double c_dp_gb = 1.3e9 * 4.0 * 3.0 / 24.0 / 1e9;
  // Activation per tasklet per direction, fp16: 2024*2048*2 B * (1.25e5/2048) / 2^30 = 0.4712 GB.
  // "2024" is the code's constant (almost certainly a typo for seq = 2048); kept for parity.
  double c_pp_gb = 2024.0 * 2048.0 * 2.0 * (1.25e5 / 2048.0) / 1073741824.0;
};

// The GPT-3 XL workload of §1.1 (D_PP = D_DP = 8, c_dp = 0.65 GB, c_pp = 0.4712 GB).
// Ensures: equal to workload{}.
inline workload gpt3_xl_workload() {
  return workload{};
}

// Checks a topology: matrix shapes, finiteness, signs.
// Requires: nothing. Ensures: ok() iff the topology satisfies the requirements of `topology`;
// otherwise errc::invalid_argument with a message naming the field and the entry.
// Cost: O(N^2).
inline status validate(const topology& t) {
  const std::size_t n = t.devices.size();
  if (n == 0) return {errc::invalid_argument, "topology: no devices (need at least 1)"};
  auto check = [&](const std::vector<double>& m, const char* field, bool positive) -> status {
    if (m.size() != n * n)
      return {errc::invalid_argument, std::string(field) + ": has " + std::to_string(m.size()) +
                                          " entries, expected N*N = " + std::to_string(n * n) +
                                          " for N = " + std::to_string(n) + " devices"};
    for (std::size_t i = 0; i < n; ++i)
      for (std::size_t j = 0; j < n; ++j) {
        double v = m[i * n + j];
        std::string at = std::string(field) + "[" + std::to_string(i) + "][" + std::to_string(j) +
                         "] = " + std::to_string(v);
        if (!std::isfinite(v)) return {errc::invalid_argument, at + ": must be finite"};
        if (v < 0) return {errc::invalid_argument, at + ": must be >= 0 (negative value)"};
        if (positive && i != j && v <= 0)
          return {errc::invalid_argument, at + ": must be > 0 between distinct devices"};
      }
    return {};
  };
  if (auto s = check(t.latency_ms, "latency_ms", false); !s) return s;
  if (auto s = check(t.bandwidth_gbps, "bandwidth_gbps", true); !s) return s;
  return {};
}

// Checks that a workload fits a topology: N == d_pp * d_dp and positive payloads.
// Ensures: ok() iff d_pp >= 1, d_dp >= 1, d_pp*d_dp == N, payloads finite and >= 0, and
// d_pp <= 20 (the Held-Karp table is d_pp * 2^d_pp). Otherwise errc::invalid_argument naming
// the field. Cost: O(1).
inline status validate(const workload& w, int n_devices) {
  if (w.d_pp < 1 || w.d_pp > 20)
    return {errc::invalid_argument,
            "workload.d_pp = " + std::to_string(w.d_pp) + ": must be in [1, 20]"};
  if (w.d_dp < 1)
    return {errc::invalid_argument, "workload.d_dp = " + std::to_string(w.d_dp) + ": must be >= 1"};
  if (static_cast<long long>(w.d_pp) * w.d_dp != n_devices)
    return {errc::invalid_argument, "workload: d_pp * d_dp = " + std::to_string(w.d_pp) + " * " +
                                        std::to_string(w.d_dp) + " must equal the number of " +
                                        "devices N = " + std::to_string(n_devices)};
  if (!std::isfinite(w.c_dp_gb) || w.c_dp_gb < 0)
    return {errc::invalid_argument, "workload.c_dp_gb: must be finite and >= 0"};
  if (!std::isfinite(w.c_pp_gb) || w.c_pp_gb < 0)
    return {errc::invalid_argument, "workload.c_pp_gb: must be finite and >= 0"};
  return {};
}

// Builds a topology from sites: `counts[s]` devices at site s, `intra_*[s]` inside site s,
// `inter_*` (S,S) between sites (diagonal ignored). Device i gets name "<site>/<k>".
// Requires: all vectors sized consistently (S sites). Ensures: a topology with
// N = sum(counts) devices, sites laid out contiguously in order. Cost: O(N^2).
inline topology topology_from_sites(const std::vector<std::string>& site_names,
                                    const std::vector<int>& counts,
                                    const std::vector<double>& intra_latency_ms,
                                    const std::vector<double>& intra_bandwidth_gbps,
                                    const std::vector<double>& inter_latency_ms,
                                    const std::vector<double>& inter_bandwidth_gbps,
                                    double compute_tflops = 0, double memory_gb = 0) {
  topology t;
  std::vector<int> site_of;
  const std::size_t s_count = site_names.size();
  for (std::size_t s = 0; s < s_count; ++s)
    for (int k = 0; k < counts[s]; ++k) {
      t.devices.push_back(
          {site_names[s] + "/" + std::to_string(k), site_names[s], compute_tflops, memory_gb});
      site_of.push_back(static_cast<int>(s));
    }
  const std::size_t n = t.devices.size();
  t.latency_ms.assign(n * n, 0.0);
  t.bandwidth_gbps.assign(n * n, 0.0);
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t j = 0; j < n; ++j) {
      auto a = static_cast<std::size_t>(site_of[i]);
      auto b = static_cast<std::size_t>(site_of[j]);
      if (a == b) {
        t.latency_ms[i * n + j] = intra_latency_ms[a];
        t.bandwidth_gbps[i * n + j] = intra_bandwidth_gbps[a];
      } else {
        t.latency_ms[i * n + j] = inter_latency_ms[a * s_count + b];
        t.bandwidth_gbps[i * n + j] = inter_bandwidth_gbps[a * s_count + b];
      }
    }
  return t;
}

}  // namespace paco::place
