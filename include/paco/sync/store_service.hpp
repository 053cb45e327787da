#pragma once
// store_service: the module store as a service over any Transport (inproc threads, Asio TCP,
// MPI). Store ranks own modules (module m lives on store rank owner(m)); worker ranks pull their
// path's modules, push pseudo-gradients and wait for rounds to close.
//   store_server.hpp   the store side: serves its modules, decodes encoded pushes, closes rounds
//   store_client.hpp   the worker side: the ModuleStore interface of path_worker
//   store_link.hpp     worker_link (a transport and a peer rank), store_layout (module → store)
//   store_wire.hpp     the packed little-endian requests and replies between them

#include "paco/sync/local_store.hpp"
#include "paco/sync/store_client.hpp"
#include "paco/sync/store_link.hpp"
#include "paco/sync/store_server.hpp"
#include "paco/sync/store_wire.hpp"
