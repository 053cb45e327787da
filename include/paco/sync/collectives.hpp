#pragma once
// paco/sync collectives: allreduce_ring, reduce_scatter, all_gather, broadcast, barrier over any
// net::Transport. Each exposes cost(bytes, p) -> wire_cost {steps, bytes this rank sends}.
#include "paco/sync/all_gather.hpp"
#include "paco/sync/allreduce_ring.hpp"
#include "paco/sync/barrier.hpp"
#include "paco/sync/broadcast.hpp"
#include "paco/sync/options.hpp"
#include "paco/sync/reduce_scatter.hpp"
