#pragma once
// scenarios: the five simulated 64-GPU networks of DT-FM (ALGORITHMS.md §1.5, exact numbers of
// the official code's scheduler/heuristic_evolutionary_solver/config.py), plus the homogeneous
// tc case. Delay in ms, bandwidth in "Gbps" as labelled in the code.
//
//   name          paper case  layout
//   datacenter    Case 1      8 instances x 8 GPUs; 100 inside an instance, 3.125 across; 0 ms
//   spot          Case 2      8 instances x 4 GPUs + 32 single GPUs; 100 inside, 1.25 else; 0 ms
//   universities  Case 3      0-31 Ohio, 32-63 Virginia; 5 Gbps / 1 ms inside, 1.12 / 11 across
//   regional      Case 4      16 each Virginia, Oregon, California, Ohio; 2 Gbps / 5 ms inside
//   world         Case 5      8 each Oregon .. Ireland; 2 Gbps / 5 ms inside a city
//   homogeneous   (tc case 5) all pairs 50 ms, 1 Gbps (not one of the five)

#include <algorithm>
#include <array>
#include <string>
#include <string_view>
#include <vector>

#include "paco/core/error.hpp"
#include "paco/place/topology.hpp"

namespace paco::place {

// A measured link between two AWS regions (delay_bandwidth_dict of the DT-FM code).
struct region_link {
  std::string_view a, b;
  double latency_ms;
  double bandwidth_gbps;
};

// The 45 measured region pairs of the DT-FM code (Singapore and Sydney unused by `world`).
// Ensures: each unordered pair appears once. Cost: O(1).
inline const std::array<region_link, 45>& aws_region_links() {
  static const std::array<region_link, 45> links = {{
      {"Oregon", "Virginia", 67, 0.79},      {"Oregon", "Ohio", 49, 1.10},
      {"Oregon", "Tokyo", 96, 0.523},        {"Oregon", "Seoul", 124, 0.46},
      {"Oregon", "Singapore", 163, 0.341},   {"Oregon", "Sydney", 139, 0.36},
      {"Oregon", "London", 136, 0.42},       {"Oregon", "Frankfurt", 143, 0.404},
      {"Oregon", "Ireland", 124, 0.482},     {"Virginia", "Ohio", 11, 1.12},
      {"Virginia", "Tokyo", 143, 0.524},     {"Virginia", "Seoul", 172, 0.500},
      {"Virginia", "Singapore", 230, 0.364}, {"Virginia", "Sydney", 197, 0.383},
      {"Virginia", "London", 76, 1.16},      {"Virginia", "Frankfurt", 90, 1.02},
      {"Virginia", "Ireland", 67, 1.05},     {"Ohio", "Tokyo", 130, 0.694},
      {"Ohio", "Seoul", 159, 0.529},         {"Ohio", "Singapore", 197, 0.452},
      {"Ohio", "Sydney", 185, 0.484},        {"Ohio", "London", 86, 1.05},
      {"Ohio", "Frankfurt", 99, 0.799},      {"Ohio", "Ireland", 77, 1.14},
      {"Tokyo", "Seoul", 34, 1.10},          {"Tokyo", "Singapore", 73, 1.01},
      {"Tokyo", "Sydney", 100, 0.761},       {"Tokyo", "London", 210, 0.366},
      {"Tokyo", "Frankfurt", 223, 0.36},     {"Tokyo", "Ireland", 199, 0.465},
      {"Seoul", "Singapore", 74, 1.14},      {"Seoul", "Sydney", 148, 0.58},
      {"Seoul", "London", 238, 0.342},       {"Seoul", "Frankfurt", 235, 0.358},
      {"Seoul", "Ireland", 228, 0.335},      {"Singapore", "Sydney", 92, 0.816},
      {"Singapore", "London", 169, 0.500},   {"Singapore", "Frankfurt", 155, 0.535},
      {"Singapore", "Ireland", 179, 0.492},  {"Sydney", "London", 262, 0.326},
      {"Sydney", "Frankfurt", 265, 0.328},   {"Sydney", "Ireland", 254, 0.344},
      {"London", "Frankfurt", 14, 1.14},     {"London", "Ireland", 12, 1.09},
      {"Frankfurt", "Ireland", 24, 1.08},
  }};
  return links;
}

// The measured link between two distinct regions, in either order.
// Ensures: not_found naming the pair if it is not in aws_region_links(). Cost: O(45).
inline result<region_link> find_region_link(std::string_view a, std::string_view b) {
  for (const auto& l : aws_region_links())
    if ((l.a == a && l.b == b) || (l.a == b && l.b == a)) return l;
  return {errc::not_found,
          "no measured link between regions '" + std::string(a) + "' and '" + std::string(b) + "'"};
}

// The names accepted by make_scenario, the five DT-FM cases first.
inline const std::vector<std::string>& scenario_names() {
  static const std::vector<std::string> names = {"datacenter", "spot",  "universities",
                                                 "regional",   "world", "homogeneous"};
  return names;
}

namespace detail {

// V100 (p3.16xlarge): 125 TFLOPS fp16 tensor peak, 16 GB.
inline constexpr double v100_tflops = 125.0;
inline constexpr double v100_memory_gb = 16.0;

// Uniform (N,N) matrices, then `site`-named devices.
inline topology uniform_topology(int n, double latency_ms, double bandwidth_gbps) {
  topology t;
  t.devices.resize(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i)
    t.devices[static_cast<std::size_t>(i)] = {"gpu" + std::to_string(i), "", v100_tflops,
                                              v100_memory_gb};
  t.latency_ms.assign(static_cast<std::size_t>(n) * n, latency_ms);
  t.bandwidth_gbps.assign(static_cast<std::size_t>(n) * n, bandwidth_gbps);
  return t;
}

inline void name_by_site(topology& t, const std::vector<std::string>& sites) {
  std::vector<int> seen;
  std::vector<std::string> keys;
  for (std::size_t i = 0; i < t.devices.size(); ++i) {
    std::size_t k = 0;
    while (k < keys.size() && keys[k] != sites[i]) ++k;
    if (k == keys.size()) {
      keys.push_back(sites[i]);
      seen.push_back(0);
    }
    t.devices[i].site = sites[i];
    t.devices[i].name = sites[i] + "/" + std::to_string(seen[k]++);
  }
}

// simulate_0_datacenter: 3.125 everywhere + 96.875 on 8x8 diagonal blocks; delay 0.
inline topology datacenter(int n = 64) {
  topology t = uniform_topology(n, 0.0, 3.125);
  const int per = std::min(n / 2, 8);
  std::vector<std::string> sites;
  for (int i = 0; i < n; ++i) sites.push_back("instance_" + std::to_string(i / per));
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < n; ++j)
      if (i / per == j / per) t.bandwidth_gbps[static_cast<std::size_t>(i) * n + j] += 96.875;
  name_by_site(t, sites);
  return t;
}

// simulate_1_datacenter_spot_gpu, group = (8, 4): 1.25 everywhere + 98.75 on the first 8
// diagonal 4x4 blocks; the other 32 GPUs are standalone; delay 0.
inline topology spot(int n = 64, int instances = 8, int per = 4) {
  topology t = uniform_topology(n, 0.0, 1.25);
  std::vector<std::string> sites;
  for (int i = 0; i < n; ++i)
    sites.push_back(i / per < instances ? "spot_instance_" + std::to_string(i / per)
                                        : "standalone_" + std::to_string(i));
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < n; ++j)
      if (i / per == j / per && i / per < instances)
        t.bandwidth_gbps[static_cast<std::size_t>(i) * n + j] += 98.75;
  name_by_site(t, sites);
  return t;
}

// simulate_2_multi_universities: delay 1 (diagonal included), bandwidth 5; across: 11 ms, 1.12.
inline topology universities(int n = 64) {
  topology t = uniform_topology(n, 1.0, 5.0);
  const int split = n / 2;
  std::vector<std::string> sites;
  for (int i = 0; i < n; ++i) sites.push_back(i < split ? "Ohio" : "Virginia");
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < n; ++j)
      if ((i < split) != (j < split)) {
        t.latency_ms[static_cast<std::size_t>(i) * n + j] = 11.0;
        t.bandwidth_gbps[static_cast<std::size_t>(i) * n + j] = 1.12;
      }
  name_by_site(t, sites);
  return t;
}

// Regions laid out in equal contiguous blocks; 5 ms / 2 Gbps inside a region (and on the
// diagonal), the measured `links` across.
inline topology regions(int n, const std::vector<std::string>& names,
                        const std::vector<region_link>& links) {
  topology t = uniform_topology(n, 5.0, 2.0);
  const int per = n / static_cast<int>(names.size());
  std::vector<std::string> sites;
  for (int i = 0; i < n; ++i) sites.push_back(names[static_cast<std::size_t>(i / per)]);
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < n; ++j) {
      if (sites[i] == sites[j]) continue;
      for (const auto& l : links)
        if ((l.a == sites[i] && l.b == sites[j]) || (l.a == sites[j] && l.b == sites[i])) {
          t.latency_ms[static_cast<std::size_t>(i) * n + j] = l.latency_ms;
          t.bandwidth_gbps[static_cast<std::size_t>(i) * n + j] = l.bandwidth_gbps;
        }
    }
  name_by_site(t, sites);
  return t;
}

// simulate_3_regional_geo_distributed: 0-15 Virginia, 16-31 Oregon, 32-47 California, 48-63 Ohio.
inline topology regional(int n = 64) {
  return regions(n, {"Virginia", "Oregon", "California", "Ohio"},
                 {{"Virginia", "Oregon", 67, 1.15},
                  {"Virginia", "California", 59, 1.05},
                  {"Virginia", "Ohio", 11, 1.12},
                  {"Oregon", "California", 12, 1.25},
                  {"Oregon", "Ohio", 49, 1.10},
                  {"California", "Ohio", 52, 1.02}});
}

// simulate_4_worldwide_geo_distributed: 8 GPUs per city in this order.
inline topology world(int n = 64) {
  const std::vector<std::string> cities = {"Oregon", "Virginia", "Ohio",      "Tokyo",
                                           "Seoul",  "London",   "Frankfurt", "Ireland"};
  const auto& all = aws_region_links();
  return regions(n, cities, std::vector<region_link>(all.begin(), all.end()));
}

}  // namespace detail

// One of the built-in scenarios (see the table at the top), 64 devices each.
// Requires: name in scenario_names(). Ensures: a valid 64-device topology; not_found naming the
// accepted names otherwise. Cost: O(N^2).
inline result<topology> make_scenario(std::string_view name) {
  if (name == "datacenter") return detail::datacenter();
  if (name == "spot") return detail::spot();
  if (name == "universities") return detail::universities();
  if (name == "regional") return detail::regional();
  if (name == "world") return detail::world();
  if (name == "homogeneous") {
    topology t = detail::uniform_topology(64, 50.0, 1.0);
    detail::name_by_site(t, std::vector<std::string>(64, "tc"));
    return t;
  }
  std::string list;
  for (const auto& s : scenario_names()) list += (list.empty() ? "" : ", ") + s;
  return {errc::not_found, "unknown scenario '" + std::string(name) + "' (accepted: " + list + ")"};
}

}  // namespace paco::place
