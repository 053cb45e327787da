#pragma once
// Liveness of asio_tcp's links (I/O thread): every heartbeat_interval, a link silent for
// peer_timeout is failed (peer_lost) unless it is parked (then the silence is ours), and an
// idle link sends a heartbeat frame so that its peer does not fail it in turn.

#include <mutex>
#include <string>

#include "paco/core/error.hpp"
#include "paco/net/detail/tcp_link.hpp"
#include "paco/net/detail/tcp_send.hpp"
#include "paco/net/wire.hpp"

namespace paco::net::detail {

// Arms the heartbeat timer; it re-arms itself until the core is stopping.
inline void heartbeat(tcp_core& core) {
  core.hb.expires_after(core.o.heartbeat_interval);
  core.hb.async_wait([&core](const boost::system::error_code& e) {
    if (e) return;
    std::lock_guard lk(core.mu);
    if (core.stopping) return;
    auto now = clock::now();
    for (auto& Lp : core.links) {
      if (!Lp || Lp->failed) continue;
      auto& L = *Lp;
      if (!L.parked && now - L.last_rx > core.o.peer_timeout) {
        core.fail_link(L, errc::peer_lost,
                       "no frame from rank " + std::to_string(L.peer) + " for " +
                           std::to_string(core.o.peer_timeout.count()) + " ms");
        continue;
      }
      if (!L.writing && now - L.last_tx >= core.o.heartbeat_interval) {
        auto op = std::make_shared<tcp_op>();
        op->is_send = true;
        op->peer = L.peer;
        op->hdr = wire::make_header(wire::kind::heartbeat, 0, {});
        L.sendq.push_back(op);
        schedule_write(core, L);
      }
    }
    heartbeat(core);
  });
}

}  // namespace paco::net::detail
