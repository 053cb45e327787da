#pragma once
// Archetypes: the smallest types that model each paco concept, compiled in the tests so that a
// concept never asks more of its models than documented. Each folder adds its own section.

#include <cstddef>
#include <span>
#include <system_error>

#include "paco/net/concepts.hpp"

namespace paco::testing {

// ---- net: Transport -------------------------------------------------------------------------

// A request that is always complete. Models net::Request and nothing more.
struct request_archetype {
  request_archetype() = default;
  request_archetype(request_archetype&&) = default;
  request_archetype& operator=(request_archetype&&) = default;
  std::error_code wait() { return {}; }
  bool test() { return true; }
  void cancel() {}
};

// A transport of one rank that never moves a byte. Models net::Transport and nothing more.
struct transport_archetype {
  using request = request_archetype;
  int rank() const { return 0; }
  int size() const { return 1; }
  request send(int, net::tag_t, std::span<const std::byte>, net::deadline) { return {}; }
  request recv(int, net::tag_t, std::span<std::byte>, net::deadline) { return {}; }
  void cancel_all() {}
};

static_assert(net::Request<request_archetype>);
static_assert(net::Transport<transport_archetype>);

}  // namespace paco::testing
