#pragma once
// scaled: a DT-FM scenario shrunk to what one machine can run (LOCAL_PARALLELISM.md §7.4), so
// that a placement can be executed on emulated links and its time set against the cost model's.
// A subset of the scenario's devices (whole sites, a few devices each), and every transfer scaled
// to take s times its modelled time:
//
//   bytes_emu = c_GB · 1e9 · f        rate_emu = B_Gbps · 1e9 · f / (8 s)  bytes/s
//   α_emu     = s · α
//
// so c GB from i to j, modelled at A/1e3 + 8c/B seconds, takes s · (A/1e3 + 8c/B) on the
// emulated link (a sender-side α–β shaper: paco's per-peer shaper in asio_tcp). The cost model
// of the subset, times s, is then the prediction of an emulated iteration.
//
//   auto sc = place::make_scaled_scenario("world8").value_or_throw();   // 4 cities × 2
//   sc.link(0, 4);  // {latency_s, rate_bytes_per_s} of Oregon/0 → Tokyo/0, emulated

#include <cmath>
#include <cstddef>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "paco/core/error.hpp"
#include "paco/place/scenarios.hpp"
#include "paco/place/topology.hpp"

namespace paco::place {

// s: emulated time / modelled time; f: emulated bytes / modelled bytes.
struct emulation_scale {
  double s = 0.1;
  double f = 1.0 / 1024;
};

// One emulated link: what a sender-side shaper holds and paces.
struct emulated_link {
  double latency_s = 0;         // α_emu, added once per message
  double rate_bytes_per_s = 0;  // token-bucket rate
};

struct scaled_scenario {
  std::string name;
  topology net;   // the subset, in the scenario's units (ms, Gbit/s)
  workload load;  // d_pp × d_dp = N; payloads in modelled GB
  emulation_scale scale;

  int size() const noexcept { return net.size(); }
  // The emulated link from device i to device j. Requires: i != j, both < size().
  emulated_link link(int i, int j) const noexcept {
    return {scale.s * net.latency(i, j) / 1e3, net.bandwidth(i, j) * 1e9 * scale.f / (8 * scale.s)};
  }
  // Emulated payloads: one activation (c_pp) and one stage's gradient (c_dp), in bytes.
  std::size_t pp_bytes() const noexcept {
    return std::size_t(std::llround(load.c_pp_gb * 1e9 * scale.f));
  }
  std::size_t dp_bytes() const noexcept {
    return std::size_t(std::llround(load.c_dp_gb * 1e9 * scale.f));
  }
};

// The devices `keep` of t (in that order), with their names and sites.
// Requires (checked): every index in [0, t.size()), none twice; at least 2.
inline result<topology> subset(const topology& t, std::span<const int> keep) {
  const int n = int(keep.size());
  if (n < 2) return error(errc::invalid_argument, "subset: keep at least 2 devices");
  std::vector<char> seen(std::size_t(t.size()), 0);
  for (int d : keep) {
    if (d < 0 || d >= t.size())
      return error(errc::invalid_argument, "subset: device " + std::to_string(d) +
                                               " is not in 0.." + std::to_string(t.size() - 1));
    if (seen[std::size_t(d)]++)
      return error(errc::invalid_argument, "subset: device " + std::to_string(d) + " twice");
  }
  topology s;
  s.latency_ms.assign(std::size_t(n) * n, 0.0);
  s.bandwidth_gbps.assign(std::size_t(n) * n, 0.0);
  for (int i = 0; i < n; ++i) {
    s.devices.push_back(t.devices[std::size_t(keep[std::size_t(i)])]);
    for (int j = 0; j < n; ++j) {
      s.latency_ms[std::size_t(i) * n + j] = t.latency(keep[std::size_t(i)], keep[std::size_t(j)]);
      s.bandwidth_gbps[std::size_t(i) * n + j] =
          t.bandwidth(keep[std::size_t(i)], keep[std::size_t(j)]);
    }
  }
  return s;
}

// The small scenarios this machine runs: 2 devices of each of four sites of a 64-device
// scenario, sites in the order given.
//   world8      world's Oregon, Virginia, Tokyo and Frankfurt, 2 devices each (§7.4's example)
//   regional8   regional's Virginia, Oregon, California and Ohio, 2 devices each
// d_pp × d_dp must be 8 (default 4 × 2); payloads are §1.1's (GPT-3 XL: c_pp 0.4712 GB, c_dp
// 0.65 GB). Errors: not_found naming the accepted names; invalid_argument for the degrees or
// the scale (s, f in (0, 1]).
inline const std::vector<std::string>& scaled_scenario_names() {
  static const std::vector<std::string> names = {"world8", "regional8"};
  return names;
}
inline result<scaled_scenario> make_scaled_scenario(std::string_view name, emulation_scale sc = {},
                                                    int d_pp = 4, int d_dp = 2) {
  if (!(sc.s > 0 && sc.s <= 1) || !(sc.f > 0 && sc.f <= 1))
    return error(errc::invalid_argument, "emulation scale: s and f must be in (0, 1]");
  std::string base;
  std::vector<std::string> sites;
  if (name == "world8") {
    base = "world";
    sites = {"Oregon", "Virginia", "Tokyo", "Frankfurt"};
  } else if (name == "regional8") {
    base = "regional";
    sites = {"Virginia", "Oregon", "California", "Ohio"};
  } else {
    std::string list;
    for (const auto& s : scaled_scenario_names()) list += (list.empty() ? "" : ", ") + s;
    return error(errc::not_found,
                 "unknown scaled scenario '" + std::string(name) + "' (accepted: " + list + ")");
  }
  auto full = make_scenario(base);
  if (!full) return full.error();
  std::vector<int> keep;
  for (const auto& site : sites) {
    int taken = 0;
    for (int d = 0; d < full->size() && taken < 2; ++d)
      if (full->devices[std::size_t(d)].site == site) keep.push_back(d), ++taken;
    if (taken < 2)
      return error(errc::invalid_argument, base + " has fewer than 2 devices at " + site);
  }
  auto net = subset(*full, keep);
  if (!net) return net.error();
  workload w;
  w.d_pp = d_pp;
  w.d_dp = d_dp;
  if (auto s = validate(w, net->size()); !s) return s.error();
  return scaled_scenario{std::string(name), std::move(*net), w, sc};
}

}  // namespace paco::place
