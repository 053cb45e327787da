#pragma once
// The send path of asio_tcp: a link's queue written by the I/O thread (header and payload
// gathered in one write), the inline send that writes from the caller's thread while the link
// is idle, and the shaper (token bucket of rate and burst, added one-way latency) that writes
// in bursts when the link is shaped (tcp_options::shaper, or peer_shapers for its peer).

#include <boost/asio/buffer.hpp>
#include <boost/asio/post.hpp>

#include <sys/socket.h>
#include <sys/uio.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <mutex>
#include <string>

#include "paco/core/error.hpp"
#include "paco/net/detail/tcp_link.hpp"

namespace paco::net::detail {

// start_write's continuations (below).
inline void on_written(tcp_core& core, tcp_link& L, const boost::system::error_code& e);
inline void shaped_write(tcp_core& core, tcp_link& L);

// ---- I/O thread ----
inline void start_write(tcp_core& core, tcp_link& L) {
  std::unique_lock lk(core.mu);
  if (L.failed || L.sendq.empty()) {
    L.writing = false;
    return;
  }
  auto op = L.sendq.front();
  L.sendq.pop_front();
  op->state = tcp_op::state_t::active;
  L.wop = op;
  L.woff = 0;
  lk.unlock();
  if (L.shaper.rate_bytes_per_s > 0 || L.shaper.latency.count() > 0) {
    shaped_write(core, L);
    return;
  }
  std::array<asio::const_buffer, 2> bufs{asio::buffer(&op->hdr, sizeof op->hdr),
                                         asio::buffer(op->buf, op->len)};
  L.stream.async_write(bufs, [&core, &L](const boost::system::error_code& e, std::size_t) {
    on_written(core, L, e);
  });
}

inline void on_written(tcp_core& core, tcp_link& L, const boost::system::error_code& e) {
  {
    std::lock_guard lk(core.mu);
    auto op = std::move(L.wop);
    L.last_tx = clock::now();
    if (e) {
      core.socket_error(L, e);
      if (op) core.complete(*op, L.err);
    } else if (op) {
      core.complete(*op, {});
    }
  }
  start_write(core, L);
}

// Writes the rest of L.wop from L.woff (after a partial inline write).
inline void continue_write(tcp_core& core, tcp_link& L) {
  auto& op = *L.wop;
  std::array<asio::const_buffer, 2> bufs;
  std::size_t nb = 0, off = L.woff;
  if (off < sizeof op.hdr)
    bufs[nb++] =
        asio::buffer(reinterpret_cast<const std::byte*>(&op.hdr) + off, sizeof op.hdr - off);
  std::size_t poff = off > sizeof op.hdr ? off - sizeof op.hdr : 0;
  if (op.len > poff) bufs[nb++] = asio::buffer(op.buf + poff, op.len - poff);
  auto done = [&core, &L](const boost::system::error_code& e, std::size_t) {
    on_written(core, L, e);
  };
  if (nb == 1)
    L.stream.async_write(asio::buffer(bufs[0]), done);
  else
    L.stream.async_write(bufs, done);
}

// ---- caller's thread ----
// Has the I/O thread write L's queue unless it already does. Requires: mu held.
inline void schedule_write(tcp_core& core, tcp_link& L) {
  if (!L.writing) {
    L.writing = true;
    asio::post(core.io, [&core, &L] { start_write(core, L); });
  }
}

// Tries to write op now from the calling thread (no hand-off to the I/O thread when the
// socket has room). Requires: lk holds mu; L idle (not writing, empty queue); no shaper, no TLS.
inline void write_inline(tcp_core& core, std::unique_lock<std::mutex>& lk, tcp_link& L,
                         const op_ptr& op) {
  L.writing = true;
  L.inline_active = true;
  op->state = tcp_op::state_t::active;
  L.wop = op;
  L.woff = 0;
  int fd = L.socket().native_handle();
  lk.unlock();
  const std::size_t total = sizeof op->hdr + op->len;
  std::size_t sent = 0;
  int err = 0;
  while (sent < total) {
    iovec iov[2];
    int n = 0;
    if (sent < sizeof op->hdr)
      iov[n++] = {reinterpret_cast<std::byte*>(&op->hdr) + sent, sizeof op->hdr - sent};
    std::size_t poff = sent > sizeof op->hdr ? sent - sizeof op->hdr : 0;
    if (op->len > poff) iov[n++] = {op->buf + poff, op->len - poff};
    msghdr m{};
    m.msg_iov = iov;
    m.msg_iovlen = static_cast<decltype(m.msg_iovlen)>(n);
    ssize_t k = ::sendmsg(fd, &m, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (k > 0) {
      sent += static_cast<std::size_t>(k);
    } else if (k < 0 && errno == EINTR) {
      continue;
    } else {
      if (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK) err = errno;
      break;
    }
  }
  lk.lock();
  L.inline_active = false;
  if (L.close_pending) {
    L.close_pending = false;
    asio::post(core.io, [&L] {
      boost::system::error_code ig;
      L.socket().close(ig);
    });
  }
  if (sent < total &&
      (err || L.failed)) {  // a frame fully sent counts even if the link failed since
    L.wop = nullptr;
    L.writing = false;
    if (!L.failed)
      asio::post(core.io, [&core, &L, err] {
        std::lock_guard g(core.mu);
        core.fail_link(L, errc::peer_lost,
                       "rank " + std::to_string(L.peer) + " connection: " + std::strerror(err));
      });
    core.complete(*op, L.failed ? L.err : make_error_code(errc::peer_lost));
    return;
  }
  if (sent == total) {
    L.wop = nullptr;
    L.last_tx = clock::now();
    core.complete(*op, {});
    L.writing = false;
    if (!L.sendq.empty() && !L.failed) schedule_write(core, L);
    return;
  }
  L.woff = sent;  // the I/O thread writes the rest, then goes on with the queue
  asio::post(core.io, [&core, &L] { continue_write(core, L); });
}

// ---- shaper (I/O thread) ----
inline void shaped_write(tcp_core& core, tcp_link& L) {
  auto& op = *L.wop;
  auto now = clock::now();
  if (L.woff == 0 && now < op.ready_at) {  // added latency
    L.shape_timer.expires_at(op.ready_at);
    L.shape_timer.async_wait([&core, &L](const boost::system::error_code& e) {
      if (e) return on_written(core, L, e);
      L.woff = 0;
      L.wop->ready_at = {};
      shaped_write(core, L);
    });
    return;
  }
  const std::size_t total = sizeof op.hdr + op.len;
  std::size_t n = std::min(total - L.woff, L.shaper.burst_bytes);
  double rate = L.shaper.rate_bytes_per_s;
  if (rate > 0) {
    double burst = static_cast<double>(L.shaper.burst_bytes);
    L.tokens =
        std::min(burst, L.tokens + rate * std::chrono::duration<double>(now - L.tok_t).count());
    L.tok_t = now;
    // The bucket may go into debt by one write: a write starts once the balance is
    // non-negative, so a timer that fires late is credited (the balance keeps what accrued
    // while it slept, up to the depth) instead of the late time being lost. Long-run rate:
    // exactly `rate`; largest burst: two writes.
    if (L.tokens < 0) {
      auto wait = std::chrono::duration<double>(-L.tokens / rate);
      L.shape_timer.expires_after(std::chrono::ceil<clock::duration>(wait));
      L.shape_timer.async_wait([&core, &L](const boost::system::error_code& e) {
        if (e) return on_written(core, L, e);
        shaped_write(core, L);
      });
      return;
    }
    L.tokens -= static_cast<double>(n);
  }
  std::array<asio::const_buffer, 2> bufs;
  std::size_t nb = 0, off = L.woff, left = n;
  if (off < sizeof op.hdr) {
    std::size_t k = std::min(left, sizeof op.hdr - off);
    bufs[nb++] = asio::buffer(reinterpret_cast<const std::byte*>(&op.hdr) + off, k);
    left -= k;
    off = sizeof op.hdr;
  }
  if (left) bufs[nb++] = asio::buffer(op.buf + (off - sizeof op.hdr), left);
  auto done = [&core, &L, n, total](const boost::system::error_code& e, std::size_t) {
    if (e) return on_written(core, L, e);
    L.woff += n;
    if (L.woff == total) return on_written(core, L, e);
    shaped_write(core, L);
  };
  if (nb == 1)
    L.stream.async_write(asio::buffer(bufs[0]), done);
  else
    L.stream.async_write(bufs, done);
}

}  // namespace paco::net::detail
