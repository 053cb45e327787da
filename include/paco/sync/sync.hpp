#pragma once
// paco/sync: collectives over any net::Transport; the module-store protocol (in-process store,
// store service and client); path workers and DiLoCo over an all-reduce.
#include "paco/sync/collectives.hpp"
#include "paco/sync/compression.hpp"
#include "paco/sync/concepts.hpp"
#include "paco/sync/diloco_allreduce.hpp"
#include "paco/sync/dipaco_local.hpp"
#include "paco/sync/local_store.hpp"
#include "paco/sync/path_worker.hpp"
#include "paco/sync/store_service.hpp"
