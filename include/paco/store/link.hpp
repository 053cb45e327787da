#pragma once
// link: how the two sides of the store service (server.hpp, client.hpp) reach
// each other: a worker_link is a transport and the peer's rank in it; a store_layout says which
// store rank owns each module.

#include <cstddef>
#include <vector>

namespace paco::store {

// Which store rank owns module m: store_ranks[m % store_ranks.size()].
struct store_layout {
  std::vector<int> store_ranks;
  int owner(int m) const { return store_ranks[std::size_t(m) % store_ranks.size()]; }
};

// Where a peer is reached: a transport and the peer's rank in it. A store reaches its workers
// through one world for everyone (link{&t, w}), or one two-rank link per worker (a star:
// link{&t_w, 1}) so that a worker that restarts can reconnect without disturbing the others
// (server::attach); a client reaches each store the same way.
template <class T>
struct worker_link {
  T* t = nullptr;
  int peer = 0;
};

}  // namespace paco::store
