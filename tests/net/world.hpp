#pragma once
// Test worlds: p ranks of one transport type, each run on its own thread. Used by the
// conformance suite (tests/net) and the collective tests (tests/collectives).

#include <functional>
#include <thread>
#include <vector>

#include "paco/net/inproc.hpp"

namespace paco::testing {

// Runs f(transport&) on p threads, one per rank of an inproc world.
struct inproc_world {
  using transport = net::inproc;
  static constexpr const char* name = "inproc";
  template <class F>
  static void run(int p, F f) {
    auto w = net::inproc::world(p);
    std::vector<std::thread> th;
    for (int r = 0; r < p; ++r) th.emplace_back([&, r] { f(w[static_cast<std::size_t>(r)]); });
    for (auto& t : th) t.join();
  }
  // Simulates the crash of a rank.
  static void kill(transport& t) { t.close(); }
};

}  // namespace paco::testing
