#pragma once
// paco/place: heterogeneity-aware placement (DT-FM, ALGORITHMS.md §1) and its relatives.
//
//   topology.hpp          devices, latency/bandwidth matrices, the DT-FM workload
//   scenarios.hpp         the five 64-GPU DT-FM networks (+ homogeneous), AWS region links
//   topology_file.hpp     TOML / JSON loaders (needs toml++ and nlohmann/json)
//   matching.hpp          bottleneck perfect matching (threshold search + Hopcroft-Karp)
//   tsp.hpp               Held-Karp open-loop TSP (all starts) and closed tours
//   cost.hpp              COST = COST_DP + 2 PP, and the pipelines derived from it
//   gcma.hpp              the GCMA hybrid genetic algorithm with cyclic-partitioning search
//   baselines.hpp         random (5000 samples) and rank-order (Megatron-style) placements
//   ring_order.hpp        bandwidth-aware ring order for ring all-reduce (PCCL-style TSP)
//   module_placement.hpp  DiPaCo module shards on store hosts, minimising the round's path

#include "paco/place/baselines.hpp"
#include "paco/place/cost.hpp"
#include "paco/place/gcma.hpp"
#include "paco/place/matching.hpp"
#include "paco/place/measured_ring.hpp"
#include "paco/place/module_placement.hpp"
#include "paco/place/ring_order.hpp"
#include "paco/place/scenarios.hpp"
#include "paco/place/topology.hpp"
#include "paco/place/tsp.hpp"

#if __has_include(<toml++/toml.h>) && __has_include(<nlohmann/json.hpp>)
#include "paco/place/topology_file.hpp"
#endif
