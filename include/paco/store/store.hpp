#pragma once
// paco/store: the module store that holds DiPaCo's grid of modules, in one process or as a
// service over any Transport (inproc threads, Asio TCP, MPI).
//   module_store.hpp  one store's modules: rounds, the weighted mean of pushes, the outer step
//   store_file.hpp    its checkpoint (modules, outer state, the plan's layout)
//   concepts.hpp      ModuleStore / EncodedModuleStore: what a path worker asks of a store
//   local_store.hpp   a module_store shared by the threads of one process
//   server.hpp        store ranks: serve their modules, decode encoded pushes, close rounds
//   client.hpp        worker ranks: the ModuleStore interface over a Transport
//   metered.hpp       a store that records each push's time and bytes (peak rate on the wire)
//   link.hpp          worker_link (a transport and a peer rank), store_layout (module → store)
//   wire.hpp          the packed little-endian requests and replies between them
//   compression.hpp   how workers encode their pushes; the codecs stores decode them with
#include "paco/store/client.hpp"
#include "paco/store/compression.hpp"
#include "paco/store/concepts.hpp"
#include "paco/store/link.hpp"
#include "paco/store/local_store.hpp"
#include "paco/store/metered.hpp"
#include "paco/store/module_store.hpp"
#include "paco/store/server.hpp"
#include "paco/store/store_file.hpp"
#include "paco/store/wire.hpp"
