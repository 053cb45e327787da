#pragma once
// paco/collectives: allreduce_ring, reduce_scatter, all_gather, broadcast, barrier over any
// net::Transport. Each exposes cost(bytes, p) -> wire_cost {steps, bytes this rank sends}.
// agree / agree_ok: every rank checks that the group holds the same fingerprint, or status.
#include "paco/collectives/agree.hpp"
#include "paco/collectives/all_gather.hpp"
#include "paco/collectives/allreduce_ring.hpp"
#include "paco/collectives/barrier.hpp"
#include "paco/collectives/broadcast.hpp"
#include "paco/collectives/options.hpp"
#include "paco/collectives/reduce_scatter.hpp"
