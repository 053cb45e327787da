#pragma once
// The receive path of asio_tcp (I/O thread): a link reads a frame header, then its payload
// straight into a posted recv of that tag or, when none is posted, into a buffer of unexpected
// messages bounded per peer (beyond the bound the link parks: TCP pushes back on the sender).
// Payloads are checksummed piece by piece while in cache; large ones on plain TCP are read
// with SO_RCVLOWAT batching, small ones and TLS with asio's composed read.

#include <boost/asio/buffer.hpp>
#include <boost/asio/post.hpp>

#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>

#include "paco/core/error.hpp"
#include "paco/net/crc32c.hpp"
#include "paco/net/detail/tcp_link.hpp"
#include "paco/net/wire.hpp"

namespace paco::net::detail {

// The I/O thread's steps, in the order they call each other.
inline void read_header(tcp_core& core, tcp_link& L);
inline void on_header(tcp_core& core, tcp_link& L, const boost::system::error_code& e);
inline void dispatch(tcp_core& core, tcp_link& L);
inline void read_payload(tcp_core& core, tcp_link& L);
inline void read_payload_stream(tcp_core& core, tcp_link& L);
inline void read_payload_lowat(tcp_core& core, tcp_link& L);
inline void set_rcvlowat(tcp_link& L, int v);
inline void payload_bytes(tcp_link& L, std::size_t k);
inline void payload_error(tcp_core& core, tcp_link& L, const boost::system::error_code& e);
inline void finish_payload(tcp_core& core, tcp_link& L);

inline void read_header(tcp_core& core, tcp_link& L) {
  L.stream.async_read(
      asio::buffer(&L.rh, sizeof L.rh),
      [&core, &L](const boost::system::error_code& e, std::size_t) { on_header(core, L, e); });
}

inline void on_header(tcp_core& core, tcp_link& L, const boost::system::error_code& e) {
  std::unique_lock lk(core.mu);
  if (e) return core.socket_error(L, e);
  L.last_rx = clock::now();
  if (auto ec = wire::check_header(L.rh, core.lim))
    return core.fail_link(
        L, ec, "bad frame header from rank " + std::to_string(L.peer) + ": " + ec.message());
  switch (static_cast<wire::kind>(L.rh.kind)) {
    case wire::kind::heartbeat: lk.unlock(); return read_header(core, L);
    case wire::kind::bye:
      return core.fail_link(L, errc::peer_lost,
                            "rank " + std::to_string(L.peer) + " closed the connection");
    case wire::kind::data: return dispatch(core, L);
    default:
      return core.fail_link(L, errc::protocol,
                            "unexpected frame kind " + std::to_string(L.rh.kind) + " from rank " +
                                std::to_string(L.peer));
  }
}

// Requires: mu held; a data header in L.rh.
inline void dispatch(tcp_core& core, tcp_link& L) {
  const std::size_t len = L.rh.length;
  auto it =
      std::find_if(L.posted.begin(), L.posted.end(), [&](auto& op) { return op->tag == L.rh.tag; });
  L.rop = nullptr;
  L.rdrop = false;
  if (it != L.posted.end()) {
    auto op = *it;
    L.posted.erase(it);
    if (op->len != len) {
      core.complete(*op, errc::mismatch);
      L.rdrop = true;
      L.ubuf = std::make_unique_for_overwrite<std::byte[]>(len ? len : 1);
      L.rptr = L.ubuf.get();
    } else {
      op->state = tcp_op::state_t::active;
      L.rop = op;
      L.rptr = op->buf;
    }
  } else {
    if (L.unexpected_bytes > 0 && L.unexpected_bytes + len > core.o.max_unexpected_bytes) {
      L.parked = true;  // resumed by the next recv from this peer
      return;
    }
    L.ubuf = std::make_unique_for_overwrite<std::byte[]>(len ? len : 1);
    L.rptr = L.ubuf.get();
  }
  L.rlen = len;
  L.rdone = 0;
  L.rcrc = 0;
  asio::post(core.io, [&core, &L] { read_payload(core, L); });
}

inline void read_payload(tcp_core& core, tcp_link& L) {
  if (L.rdone == L.rlen) return finish_payload(core, L);
  if (L.stream.is_tls() || L.rlen < tcp_core::lowat_bytes) return read_payload_stream(core, L);
  read_payload_lowat(core, L);
}

// Reads the payload with asio's composed read, one piece at a time (TLS, small frames).
inline void read_payload_stream(tcp_core& core, tcp_link& L) {
  std::size_t n = std::min(tcp_core::piece, L.rlen - L.rdone);
  L.stream.async_read(asio::buffer(L.rptr + L.rdone, n),
                      [&core, &L](const boost::system::error_code& e, std::size_t k) {
                        if (e) return payload_error(core, L, e);
                        payload_bytes(L, k);
                        read_payload(core, L);
                      });
}

// Plain TCP, large payload: non-blocking recv until the socket is empty, then wait for
// readiness with SO_RCVLOWAT = min(rest, lowat_bytes) (so the wait ends by the payload's end).
inline void read_payload_lowat(tcp_core& core, tcp_link& L) {
  const int fd = L.socket().native_handle();
  while (L.rdone < L.rlen) {
    std::size_t n = std::min(tcp_core::piece, L.rlen - L.rdone);
    ssize_t k = ::recv(fd, L.rptr + L.rdone, n, MSG_DONTWAIT);
    if (k > 0) {
      payload_bytes(L, static_cast<std::size_t>(k));
      continue;
    }
    if (k < 0 && errno == EINTR) continue;
    if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      set_rcvlowat(L, static_cast<int>(std::min(tcp_core::lowat_bytes, L.rlen - L.rdone)));
      L.socket().async_wait(asio::ip::tcp::socket::wait_read,
                            [&core, &L](const boost::system::error_code& e) {
                              if (e) return payload_error(core, L, e);
                              read_payload_lowat(core, L);
                            });
      return;
    }
    auto e = k == 0 ? boost::system::error_code(asio::error::eof)
                    : boost::system::error_code(errno, boost::system::system_category());
    return payload_error(core, L, e);
  }
  set_rcvlowat(L, 1);  // headers are read as they come
  finish_payload(core, L);
}

// Linux grows a socket's receive buffer to hold a larger SO_RCVLOWAT and then clamps the TCP
// window to that low-water mark (tcp_set_rcvlowat): on a long link, with the buffer still small
// from autotuning, a 256 KiB mark would cap the window at 256 KiB per round trip for good
// (measured by bench/run wan: 0.06 of a 200 Mbit/s, 200 ms link on two streams). So the mark
// stays within a quarter of the buffer the socket has now, which needs no growth and no clamp;
// autotuning raises the buffer, and with it the mark, as the data flows.
inline void set_rcvlowat(tcp_link& L, int v) {
  const int fd = L.socket().native_handle();
  if (v > 1) {
    int rcvbuf = 0;
    socklen_t n = sizeof rcvbuf;
    if (::getsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, &n) == 0)
      v = std::max(1, std::min(v, rcvbuf / 4));
  }
  if (L.rcvlowat == v) return;
  ::setsockopt(fd, SOL_SOCKET, SO_RCVLOWAT, &v, sizeof v);
  L.rcvlowat = v;
}

// k payload bytes arrived at L.rptr + L.rdone: checksum them while they are in cache (unless
// the recv they land in checks them itself).
inline void payload_bytes(tcp_link& L, std::size_t k) {
  if ((L.rh.flags & wire::flag_payload_crc) && !(L.rop && L.rop->caller_checks))
    L.rcrc = crc32c(L.rcrc, {L.rptr + L.rdone, k});
  L.rdone += k;
  L.last_rx = clock::now();
}

inline void payload_error(tcp_core& core, tcp_link& L, const boost::system::error_code& e) {
  std::lock_guard lk(core.mu);
  core.socket_error(L, e);
  if (L.rop) core.complete(*L.rop, L.err);
  L.rop = nullptr;
}

inline void finish_payload(tcp_core& core, tcp_link& L) {
  {
    std::unique_lock lk(core.mu);
    std::error_code ec;
    const bool checked = (L.rh.flags & wire::flag_payload_crc) != 0;
    const bool by_caller = L.rop && L.rop->caller_checks;
    if (checked && !by_caller && L.rcrc != L.rh.payload_crc) ec = errc::corrupt;
    if (L.rop) {  // the common case: read straight into a posted recv
      L.rop->has_crc = checked && !ec;
      L.rop->crc = by_caller ? L.rh.payload_crc : L.rcrc;
      const bool wake = L.rop->waiters > 0;
      core.complete(*L.rop, ec, false);
      L.rop = nullptr;
      const bool failed = L.failed;
      lk.unlock();
      if (wake) core.cv.notify_all();
      if (failed) return;
      return read_header(core, L);
    }
    if (!L.rdrop) {
      // A recv may have been posted while this message was being read.
      auto it = std::find_if(L.posted.begin(), L.posted.end(),
                             [&](auto& op) { return op->tag == L.rh.tag; });
      if (it != L.posted.end()) {
        auto op = *it;
        L.posted.erase(it);
        if (!ec && op->len != L.rlen) ec = errc::mismatch;
        if (!ec && L.rlen) std::memcpy(op->buf, L.ubuf.get(), L.rlen);
        op->has_crc = checked && !ec;
        op->crc = L.rcrc;
        core.complete(*op, ec);
      } else {
        L.unexpected_bytes += L.rlen;
        L.unexpected.push_back({L.rh.tag, std::move(L.ubuf), L.rlen, ec, checked && !ec, L.rcrc});
      }
    }
    L.ubuf.reset();
    if (L.failed) return;
  }
  read_header(core, L);
}

// ---- caller's thread ----
// Requires: mu held. A recv or room appeared: a parked link reads on.
inline void unpark(tcp_core& core, tcp_link& L) {
  if (L.parked) {
    L.parked = false;
    asio::post(core.io, [&core, &L] {
      std::lock_guard lk(core.mu);
      if (!L.failed) dispatch(core, L);
    });
  }
}

}  // namespace paco::net::detail
