#pragma once
// asio_tcp: a Transport over TCP with Boost.Asio. One connection per pair of ranks; frames of
// wire.hpp (magic, version, kind, tag, length, CRC-32C of header and payload); a token (HMAC)
// handshake; heartbeats and failure detection; bounded send queues and bounded buffering of
// unexpected messages (TCP flow control pushes back on a fast sender); an optional per-link
// shaper (token-bucket rate and added one-way latency) for WAN experiments.
//
// Rendezvous: either `peers` lists every rank's "host:port" (rank r listens on peers[r]), or
// `coordinator` names rank 0's "host:port": the other ranks listen on an OS-chosen port of
// `listen_host`, tell rank 0, and rank 0 sends everyone the table. Rank r connects to every
// rank below it (retrying with exponential backoff until connect_timeout) and accepts the ranks
// above it. Connections that fail the handshake (wrong token, group size or epoch) are
// refused and the rendezvous goes on waiting for the right peer.
//
// Threads: one I/O thread per transport runs Asio; callers' send/recv/wait run on any thread.
// Zero-copy: sends write from the caller's buffer (header + payload gathered), from the
// caller's thread when the link is idle (the rest by the I/O thread); a recv posted before its
// message arrives is read straight into the caller's buffer.
//
// TLS (tcp_options.tls, builds with PACO_WITH_TLS): every connection, the rendezvous' included,
// is a TLS 1.3 stream (boost::asio::ssl::stream over the socket) with mutual certificates from
// one group CA; a peer whose certificate does not chain to it is refused (errc::auth, with
// OpenSSL's reason). The token handshake still runs inside TLS. Sends then go through the I/O
// thread (no sendmsg from the caller's thread; small frames leave as one TLS record) and bytes
// are encrypted and decrypted there; without TLS the data path is unchanged.

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>

#include <sys/socket.h>
#include <sys/uio.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "paco/core/error.hpp"
#include "paco/net/concepts.hpp"
#include "paco/net/detail/rendezvous.hpp"
#include "paco/net/tls_options.hpp"
#include "paco/net/wire.hpp"
#if PACO_WITH_TLS
#include "paco/net/detail/tls.hpp"
#endif

namespace paco::net {

// A per-link traffic shaper. Defaults: off.
struct shaper_options {
  double rate_bytes_per_s = 0;           // token-bucket rate; 0 = unlimited
  std::size_t burst_bytes = 64 * 1024;   // bucket depth and largest single write (a late timer
                                         // is credited up to this much)
  std::chrono::microseconds latency{0};  // added one-way latency per frame
};

// Configuration of one rank's asio_tcp endpoint. Names and ranges are checked by connect().
struct tcp_options {
  int rank = 0;                           // 0 <= rank < size
  int size = 1;                           // number of ranks; 1 only with allow_single
  std::vector<std::string> peers;         // "host:port" of every rank (size entries), or empty
  std::string coordinator;                // "host:port" of rank 0 when peers is empty
  std::string listen_host = "127.0.0.1";  // coordinator mode: interface ranks > 0 listen on
  std::string token;                      // shared secret of the group (non-empty)
  std::uint64_t epoch = 0;                // group generation; ranks of other epochs are refused
  bool allow_single = false;              // a world of size 1 is refused unless this is set
  // Elastic group (coordinator mode only): when > 0, `size` is the largest group and `rank` a
  // stable member id in 0..size-1 (0 is the coordinator). Rank 0 admits the members that
  // arrive within join_window (or until all size have) and numbers them by id; rank() and
  // size() are then the assigned ones. This is how survivors (and rejoining members) form the
  // next group after a failure: every member calls connect() with epoch + 1.
  std::chrono::milliseconds join_window{0};
  std::chrono::milliseconds connect_timeout{20000};    // whole rendezvous
  std::chrono::milliseconds heartbeat_interval{200};   // idle links send a heartbeat this often
  std::chrono::milliseconds peer_timeout{3000};        // silence after which a peer is lost
  std::chrono::milliseconds linger{1000};              // close(): time to flush and say bye
  std::size_t max_frame_bytes = std::size_t(1) << 30;  // largest accepted message
  std::size_t max_unexpected_bytes = std::size_t(256) << 20;  // per peer, before pushing back
  std::size_t max_queued_sends = 1 << 16;  // per peer; a send beyond fails with too_large
  int socket_buffer_bytes = 0;             // SO_SNDBUF/SO_RCVBUF; 0 = kernel autotuning
  bool payload_crc = true;                 // CRC-32C of every payload (header CRC always)
  shaper_options shaper;                   // applied to every outgoing link
  tls_options tls;                         // TLS with mutual certificates; off by default
};

namespace detail {

namespace asio = boost::asio;

struct tcp_op {
  enum class state_t { queued, active, done };
  bool is_send = false;
  int peer = 0;
  tag_t tag = 0;
  std::byte* buf = nullptr;
  std::size_t len = 0;
  wire::frame_header hdr{};
  state_t state = state_t::queued;
  std::error_code ec;
  std::error_code override_ec;  // set when a caller abandoned the op mid-frame
  clock::time_point ready_at{};
  int waiters = 0;  // threads in wait_done on this op (complete() wakes only for them)
  // recv_unverified: the I/O thread leaves the payload CRC to the caller.
  bool caller_checks = false;
  // recv: the frame carried a payload CRC (and, unless caller_checks, it matched); crc is it.
  bool has_crc = false;
  std::uint32_t crc = 0;
};
using op_ptr = std::shared_ptr<tcp_op>;

struct tcp_link {
  explicit tcp_link(asio::io_context& io) : sock(io), shape_timer(io) {}
  int peer = 0;
  asio::ip::tcp::socket sock;  // the connection (unused when tls is set)
#if PACO_WITH_TLS
  std::unique_ptr<tls_stream> tls;  // the connection when TLS is on (owns its socket)
#endif
  // The TCP socket (under the TLS stream when there is one).
  asio::ip::tcp::socket& socket() {
#if PACO_WITH_TLS
    if (tls) return tls->next_layer();
#endif
    return sock;
  }
  bool failed = false;
  std::error_code err;
  std::string why;
  // send side
  std::deque<op_ptr> sendq;
  bool writing = false;  // a write is scheduled or in flight
  op_ptr wop;
  std::size_t woff = 0;        // bytes of header + payload of wop already written
  bool inline_active = false;  // a caller thread is in sendmsg on this socket
  bool close_pending = false;  // fail_link ran during an inline write: close afterwards
  double tokens = 0;
  clock::time_point tok_t{};
  asio::steady_timer shape_timer;
  clock::time_point last_tx{};
  // receive side
  wire::frame_header rh{};
  std::deque<op_ptr> posted;
  struct message {
    tag_t tag;
    std::unique_ptr<std::byte[]> bytes;
    std::size_t len;
    std::error_code ec;
    bool has_crc = false;
    std::uint32_t crc = 0;
  };
  std::deque<message> unexpected;
  std::size_t unexpected_bytes = 0;
  bool parked = false;  // header read, waiting for a recv or room to buffer
  op_ptr rop;           // recv being read into directly
  std::unique_ptr<std::byte[]> ubuf;
  std::byte* rptr = nullptr;
  std::size_t rlen = 0, rdone = 0;
  bool rdrop = false;
  std::uint32_t rcrc = 0;
  int rcvlowat = 1;  // the socket's SO_RCVLOWAT (plain TCP only)
  clock::time_point last_rx{};
};

// Shared state of one endpoint: I/O thread, links, the lock all queues live under.
struct tcp_core {
  tcp_options o;
  wire::limits lim;
#if PACO_WITH_TLS
  std::shared_ptr<ssl::context> tls_ctx;  // set when o.tls.enabled
#endif
  asio::io_context io{1};
  std::optional<asio::executor_work_guard<asio::io_context::executor_type>> work;
  std::thread th;
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::unique_ptr<tcp_link>> links;  // links[rank] is null
  asio::steady_timer hb{io};
  bool stopped = false;   // I/O thread joined
  bool stopping = false;  // shutdown begun: timers do not re-arm

  static constexpr std::size_t piece = std::size_t(1)
                                       << 20;  // read granularity (liveness, CRC in cache)
  // Payload reads on plain TCP wake the I/O thread only once this many bytes (or the rest of
  // the payload) are in the socket (SO_RCVLOWAT): one wake-up, one recv and one CRC pass per
  // batch instead of per arriving segment. Frames below it are read as they come.
  static constexpr std::size_t lowat_bytes = std::size_t(256) << 10;

  // Completion condition of the composed reads and writes: all bytes, in syscalls as large as
  // the socket takes (asio's transfer_all caps each at 64 KiB: 16 syscalls and wake-ups per MiB).
  struct transfer_all_unbounded {
    std::size_t operator()(const boost::system::error_code& e, std::size_t) const noexcept {
      return e ? 0 : std::size_t(1) << 30;
    }
  };

  // Writes / reads a whole buffer sequence on L's socket or TLS stream. Requires: I/O thread.
  template <class Buffers, class Handler>
  void async_write_link(tcp_link& L, const Buffers& b, Handler&& h) {
#if PACO_WITH_TLS
    if (L.tls) {
      asio::async_write(*L.tls, b, std::forward<Handler>(h));
      return;
    }
#endif
    asio::async_write(L.sock, b, transfer_all_unbounded{}, std::forward<Handler>(h));
  }
  template <class Buffers, class Handler>
  void async_read_link(tcp_link& L, const Buffers& b, Handler&& h) {
#if PACO_WITH_TLS
    if (L.tls) {
      asio::async_read(*L.tls, b, std::forward<Handler>(h));
      return;
    }
#endif
    asio::async_read(L.sock, b, transfer_all_unbounded{}, std::forward<Handler>(h));
  }

  // Requires: mu held. With notify false the caller notifies cv after releasing mu (a waiter
  // woken under mu would only block on it again: one more wake-up per message). Only an op
  // someone waits on wakes the waiters: completions nobody waits for (sends, recvs of later
  // chunks) cost no futex call and no spurious wake-up.
  void complete(tcp_op& op, std::error_code ec, bool notify = true) {
    if (op.state == tcp_op::state_t::done) return;
    op.state = tcp_op::state_t::done;
    op.ec = op.override_ec ? op.override_ec : ec;
    if (notify && op.waiters > 0) cv.notify_all();
  }

  // Blocks on cv until op is done or d passes; registered as op's waiter meanwhile.
  // Requires: lk holds mu. Ensures: true iff op is done.
  bool wait_done(std::unique_lock<std::mutex>& lk, tcp_op& op, deadline d) {
    ++op.waiters;
    const bool done = cv.wait_until(lk, d, [&] { return op.state == tcp_op::state_t::done; });
    --op.waiters;
    return done;
  }

  // Requires: mu held; I/O thread (closes the socket).
  void fail_link(tcp_link& L, std::error_code ec, std::string why) {
    if (!L.failed) {
      L.failed = true;
      L.err = ec;
      L.why = std::move(why);
      boost::system::error_code ig;
      if (L.inline_active) {  // a caller is in sendmsg on this descriptor: do not free it yet
        ::shutdown(L.sock.native_handle(), SHUT_RDWR);
        L.close_pending = true;
      } else {
        L.socket().close(ig);
      }
      L.shape_timer.cancel();
    }
    for (auto& op : L.sendq) complete(*op, L.err);
    L.sendq.clear();
    for (auto& op : L.posted) complete(*op, L.err);
    L.posted.clear();
    if (L.parked) L.parked = false;
    cv.notify_all();
  }

  void socket_error(tcp_link& L, const boost::system::error_code& e) {
    if (L.failed) return;
    fail_link(L, errc::peer_lost, "rank " + std::to_string(L.peer) + " connection: " + e.message());
  }

  // ---- send side (I/O thread) ----
  void start_write(tcp_link& L) {
    std::unique_lock lk(mu);
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
    if (o.shaper.rate_bytes_per_s > 0 || o.shaper.latency.count() > 0) {
      shaped_write(L);
      return;
    }
    std::array<asio::const_buffer, 2> bufs{asio::buffer(&op->hdr, sizeof op->hdr),
                                           asio::buffer(op->buf, op->len)};
    async_write_link(
        L, bufs, [this, &L](const boost::system::error_code& e, std::size_t) { on_written(L, e); });
  }

  void on_written(tcp_link& L, const boost::system::error_code& e) {
    {
      std::lock_guard lk(mu);
      auto op = std::move(L.wop);
      L.last_tx = clock::now();
      if (e) {
        socket_error(L, e);
        if (op) complete(*op, L.err);
      } else if (op) {
        complete(*op, {});
      }
    }
    start_write(L);
  }

  // Writes the rest of L.wop from L.woff (after a partial inline write).
  void continue_write(tcp_link& L) {
    auto& op = *L.wop;
    std::array<asio::const_buffer, 2> bufs;
    std::size_t nb = 0, off = L.woff;
    if (off < sizeof op.hdr)
      bufs[nb++] =
          asio::buffer(reinterpret_cast<const std::byte*>(&op.hdr) + off, sizeof op.hdr - off);
    std::size_t poff = off > sizeof op.hdr ? off - sizeof op.hdr : 0;
    if (op.len > poff) bufs[nb++] = asio::buffer(op.buf + poff, op.len - poff);
    auto done = [this, &L](const boost::system::error_code& e, std::size_t) { on_written(L, e); };
    if (nb == 1)
      async_write_link(L, asio::buffer(bufs[0]), done);
    else
      async_write_link(L, bufs, done);
  }

  // Tries to write op now from the calling thread (no hand-off to the I/O thread when the
  // socket has room). Requires: lk holds mu; L idle (not writing, empty queue); no shaper, no TLS.
  void write_inline(std::unique_lock<std::mutex>& lk, tcp_link& L, const op_ptr& op) {
    L.writing = true;
    L.inline_active = true;
    op->state = tcp_op::state_t::active;
    L.wop = op;
    L.woff = 0;
    int fd = L.sock.native_handle();
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
      asio::post(io, [this, &L] {
        boost::system::error_code ig;
        L.sock.close(ig);
      });
    }
    if (sent < total &&
        (err || L.failed)) {  // a frame fully sent counts even if the link failed since
      L.wop = nullptr;
      L.writing = false;
      if (!L.failed)
        asio::post(io, [this, &L, err] {
          std::lock_guard g(mu);
          fail_link(L, errc::peer_lost,
                    "rank " + std::to_string(L.peer) + " connection: " + std::strerror(err));
        });
      complete(*op, L.failed ? L.err : make_error_code(errc::peer_lost));
      return;
    }
    if (sent == total) {
      L.wop = nullptr;
      L.last_tx = clock::now();
      complete(*op, {});
      L.writing = false;
      if (!L.sendq.empty() && !L.failed) schedule_write(L);
      return;
    }
    L.woff = sent;  // the I/O thread writes the rest, then goes on with the queue
    asio::post(io, [this, &L] { continue_write(L); });
  }

  void shaped_write(tcp_link& L) {
    auto& op = *L.wop;
    auto now = clock::now();
    if (L.woff == 0 && now < op.ready_at) {  // added latency
      L.shape_timer.expires_at(op.ready_at);
      L.shape_timer.async_wait([this, &L](const boost::system::error_code& e) {
        if (e) return on_written(L, e);
        L.woff = 0;
        L.wop->ready_at = {};
        shaped_write(L);
      });
      return;
    }
    const std::size_t total = sizeof op.hdr + op.len;
    std::size_t n = std::min(total - L.woff, o.shaper.burst_bytes);
    double rate = o.shaper.rate_bytes_per_s;
    if (rate > 0) {
      double burst = static_cast<double>(o.shaper.burst_bytes);
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
        L.shape_timer.async_wait([this, &L](const boost::system::error_code& e) {
          if (e) return on_written(L, e);
          shaped_write(L);
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
    auto done = [this, &L, n, total](const boost::system::error_code& e, std::size_t) {
      if (e) return on_written(L, e);
      L.woff += n;
      if (L.woff == total) return on_written(L, e);
      shaped_write(L);
    };
    if (nb == 1)
      async_write_link(L, asio::buffer(bufs[0]), done);
    else
      async_write_link(L, bufs, done);
  }

  // ---- receive side (I/O thread) ----
  void read_header(tcp_link& L) {
    async_read_link(
        L, asio::buffer(&L.rh, sizeof L.rh),
        [this, &L](const boost::system::error_code& e, std::size_t) { on_header(L, e); });
  }

  void on_header(tcp_link& L, const boost::system::error_code& e) {
    std::unique_lock lk(mu);
    if (e) return socket_error(L, e);
    L.last_rx = clock::now();
    if (auto ec = wire::check_header(L.rh, lim))
      return fail_link(
          L, ec, "bad frame header from rank " + std::to_string(L.peer) + ": " + ec.message());
    switch (static_cast<wire::kind>(L.rh.kind)) {
      case wire::kind::heartbeat:
        lk.unlock();
        return read_header(L);
      case wire::kind::bye:
        return fail_link(L, errc::peer_lost,
                         "rank " + std::to_string(L.peer) + " closed the connection");
      case wire::kind::data:
        return dispatch(L);
      default:
        return fail_link(L, errc::protocol,
                         "unexpected frame kind " + std::to_string(L.rh.kind) + " from rank " +
                             std::to_string(L.peer));
    }
  }

  // Requires: mu held; a data header in L.rh.
  void dispatch(tcp_link& L) {
    const std::size_t len = L.rh.length;
    auto it = std::find_if(L.posted.begin(), L.posted.end(),
                           [&](auto& op) { return op->tag == L.rh.tag; });
    L.rop = nullptr;
    L.rdrop = false;
    if (it != L.posted.end()) {
      auto op = *it;
      L.posted.erase(it);
      if (op->len != len) {
        complete(*op, errc::mismatch);
        L.rdrop = true;
        L.ubuf = std::make_unique_for_overwrite<std::byte[]>(len ? len : 1);
        L.rptr = L.ubuf.get();
      } else {
        op->state = tcp_op::state_t::active;
        L.rop = op;
        L.rptr = op->buf;
      }
    } else {
      if (L.unexpected_bytes > 0 && L.unexpected_bytes + len > o.max_unexpected_bytes) {
        L.parked = true;  // resumed by the next recv from this peer
        return;
      }
      L.ubuf = std::make_unique_for_overwrite<std::byte[]>(len ? len : 1);
      L.rptr = L.ubuf.get();
    }
    L.rlen = len;
    L.rdone = 0;
    L.rcrc = 0;
    asio::post(io, [this, &L] { read_payload(L); });
  }

  void read_payload(tcp_link& L) {
    if (L.rdone == L.rlen) return finish_payload(L);
#if PACO_WITH_TLS
    if (L.tls) return read_payload_stream(L);
#endif
    if (L.rlen < lowat_bytes) return read_payload_stream(L);
    read_payload_lowat(L);
  }

  // Reads the payload with asio's composed read, one piece at a time (TLS, small frames).
  void read_payload_stream(tcp_link& L) {
    std::size_t n = std::min(piece, L.rlen - L.rdone);
    async_read_link(L, asio::buffer(L.rptr + L.rdone, n),
                    [this, &L](const boost::system::error_code& e, std::size_t k) {
                      if (e) return payload_error(L, e);
                      payload_bytes(L, k);
                      read_payload(L);
                    });
  }

  // Plain TCP, large payload: non-blocking recv until the socket is empty, then wait for
  // readiness with SO_RCVLOWAT = min(rest, lowat_bytes) (so the wait ends by the payload's end).
  void read_payload_lowat(tcp_link& L) {
    const int fd = L.sock.native_handle();
    while (L.rdone < L.rlen) {
      std::size_t n = std::min(piece, L.rlen - L.rdone);
      ssize_t k = ::recv(fd, L.rptr + L.rdone, n, MSG_DONTWAIT);
      if (k > 0) {
        payload_bytes(L, static_cast<std::size_t>(k));
        continue;
      }
      if (k < 0 && errno == EINTR) continue;
      if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        set_rcvlowat(L, static_cast<int>(std::min(lowat_bytes, L.rlen - L.rdone)));
        L.sock.async_wait(asio::ip::tcp::socket::wait_read,
                          [this, &L](const boost::system::error_code& e) {
                            if (e) return payload_error(L, e);
                            read_payload_lowat(L);
                          });
        return;
      }
      auto e = k == 0 ? boost::system::error_code(asio::error::eof)
                      : boost::system::error_code(errno, boost::system::system_category());
      return payload_error(L, e);
    }
    set_rcvlowat(L, 1);  // headers are read as they come
    finish_payload(L);
  }

  void set_rcvlowat(tcp_link& L, int v) {
    if (L.rcvlowat == v) return;
    ::setsockopt(L.sock.native_handle(), SOL_SOCKET, SO_RCVLOWAT, &v, sizeof v);
    L.rcvlowat = v;
  }

  // k payload bytes arrived at L.rptr + L.rdone: checksum them while they are in cache (unless
  // the recv they land in checks them itself).
  void payload_bytes(tcp_link& L, std::size_t k) {
    if ((L.rh.flags & wire::flag_payload_crc) && !(L.rop && L.rop->caller_checks))
      L.rcrc = crc32c(L.rcrc, {L.rptr + L.rdone, k});
    L.rdone += k;
    L.last_rx = clock::now();
  }

  void payload_error(tcp_link& L, const boost::system::error_code& e) {
    std::lock_guard lk(mu);
    socket_error(L, e);
    if (L.rop) complete(*L.rop, L.err);
    L.rop = nullptr;
  }

  void finish_payload(tcp_link& L) {
    {
      std::unique_lock lk(mu);
      std::error_code ec;
      const bool checked = (L.rh.flags & wire::flag_payload_crc) != 0;
      const bool by_caller = L.rop && L.rop->caller_checks;
      if (checked && !by_caller && L.rcrc != L.rh.payload_crc) ec = errc::corrupt;
      if (L.rop) {  // the common case: read straight into a posted recv
        L.rop->has_crc = checked && !ec;
        L.rop->crc = by_caller ? L.rh.payload_crc : L.rcrc;
        const bool wake = L.rop->waiters > 0;
        complete(*L.rop, ec, false);
        L.rop = nullptr;
        const bool failed = L.failed;
        lk.unlock();
        if (wake) cv.notify_all();
        if (failed) return;
        return read_header(L);
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
          complete(*op, ec);
        } else {
          L.unexpected_bytes += L.rlen;
          L.unexpected.push_back({L.rh.tag, std::move(L.ubuf), L.rlen, ec, checked && !ec, L.rcrc});
        }
      }
      L.ubuf.reset();
      if (L.failed) return;
    }
    read_header(L);
  }

  // ---- caller side ----
  void schedule_write(tcp_link& L) {  // Requires: mu held
    if (!L.writing) {
      L.writing = true;
      asio::post(io, [this, &L] { start_write(L); });
    }
  }

  // Requires: mu held. A recv or room appeared: a parked link reads on.
  void unpark(tcp_link& L) {
    if (L.parked) {
      L.parked = false;
      asio::post(io, [this, &L] {
        std::lock_guard lk(mu);
        if (!L.failed) dispatch(L);
      });
    }
  }

  // Abandons op (deadline or cancel). Requires: lk holds mu.
  void abandon(std::unique_lock<std::mutex>& lk, const op_ptr& op, std::error_code ec) {
    if (op->state == tcp_op::state_t::done) return;
    auto& L = *links[static_cast<std::size_t>(op->peer)];
    if (op->state == tcp_op::state_t::queued) {
      auto& q = op->is_send ? L.sendq : L.posted;
      auto it = std::find(q.begin(), q.end(), op);
      if (it != q.end()) q.erase(it);
      complete(*op, ec);
      return;
    }
    // Active: the I/O thread is moving bytes of this buffer. Drop the link, wait for the handler.
    op->override_ec = ec;
    std::string why = std::string(op->is_send ? "send to" : "recv from") + " rank " +
                      std::to_string(op->peer) + " abandoned mid-frame (" + ec.message() + ")";
    if (stopped) {
      complete(*op, ec);
      return;
    }
    asio::post(io, [this, &L, ec, why] {
      std::lock_guard g(mu);
      fail_link(L, ec, why);
    });
    wait_done(lk, *op, clock::now() + std::chrono::seconds(10));
    complete(*op, ec);
  }

  std::error_code wait(const op_ptr& op, deadline d) {
    std::unique_lock lk(mu);
    if (!wait_done(lk, *op, d)) abandon(lk, op, errc::timeout);
    return op->ec;
  }

  void heartbeat() {
    hb.expires_after(o.heartbeat_interval);
    hb.async_wait([this](const boost::system::error_code& e) {
      if (e) return;
      std::lock_guard lk(mu);
      if (stopping) return;
      auto now = clock::now();
      for (auto& Lp : links) {
        if (!Lp || Lp->failed) continue;
        auto& L = *Lp;
        if (!L.parked && now - L.last_rx > o.peer_timeout) {
          fail_link(L, errc::peer_lost,
                    "no frame from rank " + std::to_string(L.peer) + " for " +
                        std::to_string(o.peer_timeout.count()) + " ms");
          continue;
        }
        if (!L.writing && now - L.last_tx >= o.heartbeat_interval) {
          auto op = std::make_shared<tcp_op>();
          op->is_send = true;
          op->peer = L.peer;
          op->hdr = wire::make_header(wire::kind::heartbeat, 0, {});
          L.sendq.push_back(op);
          schedule_write(L);
        }
      }
      heartbeat();
    });
  }
};

// A connection of the rendezvous: a plain descriptor or, with TLS, the stream that owns it.
struct rv_conn {
  fd_owner fd;
#if PACO_WITH_TLS
  std::unique_ptr<tls_stream> tls;
#endif
  bool open() const {
#if PACO_WITH_TLS
    if (tls) return true;
#endif
    return fd.get() >= 0;
  }
  // Closes a refused connection after letting the peer read our last words.
  void refuse_close() {
    int s = fd.get();
#if PACO_WITH_TLS
    if (tls) s = tls->next_layer().native_handle();
#endif
    if (s >= 0) drain_before_close(s, std::chrono::milliseconds(200));
  }
};

}  // namespace detail

// One rank's TCP endpoint. Models Transport. Create with asio_tcp::connect(options).
class asio_tcp {
 public:
  // A pending operation. Destroying a pending request cancels it.
  class request {
   public:
    request() = default;
    request(request&&) noexcept = default;
    request& operator=(request&& o) noexcept {
      if (this != &o) {
        cancel();
        core_ = std::move(o.core_);
        op_ = std::move(o.op_);
        d_ = o.d_;
      }
      return *this;
    }
    ~request() { cancel(); }
    // Blocks until complete or the deadline (a frame abandoned mid-way drops that link).
    std::error_code wait() { return op_ ? core_->wait(op_, d_) : std::error_code{}; }
    bool test() {
      if (!op_) return true;
      std::lock_guard lk(core_->mu);
      return op_->state == detail::tcp_op::state_t::done;
    }
    // A completed recv's payload CRC-32C, when its frame carried one and it matched (for
    // send_with_crc: forwarding the bytes unchanged needs no second pass). Requires: wait()
    // returned {}. Ensures: nullopt for sends, frames without a CRC and failed recvs.
    std::optional<std::uint32_t> payload_crc() const {
      if (!op_ || op_->is_send || op_->caller_checks) return std::nullopt;
      return completed_crc();
    }
    // A completed recv_unverified's expected payload CRC-32C: the one its frame carried, which
    // the caller must compare with the bytes' before trusting them. Requires: wait() returned
    // {}. Ensures: nullopt when the frame carried no CRC (payload_crc off at the sender), for
    // other requests and for failed recvs.
    std::optional<std::uint32_t> expected_crc() const {
      if (!op_ || !op_->caller_checks) return std::nullopt;
      return completed_crc();
    }
    void cancel() {
      if (!op_ || !core_) return;
      std::unique_lock lk(core_->mu);
      core_->abandon(lk, op_, errc::cancelled);
    }

   private:
    friend class asio_tcp;
    std::optional<std::uint32_t> completed_crc() const {
      std::lock_guard lk(core_->mu);
      if (op_->state != detail::tcp_op::state_t::done || op_->ec || !op_->has_crc)
        return std::nullopt;
      return op_->crc;
    }
    request(std::shared_ptr<detail::tcp_core> c, detail::op_ptr op, deadline d)
        : core_(std::move(c)), op_(std::move(op)), d_(d) {}
    std::shared_ptr<detail::tcp_core> core_;
    detail::op_ptr op_;
    deadline d_{};
  };

  // Rendezvous with the other ranks (see file comment).
  // Requires: with o.tls.enabled, a build with PACO_WITH_TLS and the files of tls_options.
  // Ensures: a connected endpoint, or an error naming the field, file, address or peer at
  //   fault: invalid_argument (options; TLS files that are not PEM, a key not matching its
  //   certificate, a certificate not chaining to the CA), not_found / io (a TLS file cannot be
  //   read), unsupported (TLS asked of a build without it), timeout (a peer never came), auth
  //   (token; a certificate refused either way, with OpenSSL's reason), mismatch (size/epoch),
  //   version, io.
  static result<std::unique_ptr<asio_tcp>> connect(tcp_options o);

  // Checks TLS settings without connecting: the files connect() would load, read and matched
  // as connect() does (so a launcher can refuse a bad configuration before it starts anything).
  // Ensures: ok when tls.enabled is false or connect() would accept these files; else the error
  // connect() would give (not_found / io / invalid_argument naming the field and file;
  // unsupported in a build without TLS).
  static status check_tls(const tls_options& t) {
    if (!t.enabled) return {};
#if PACO_WITH_TLS
    auto c = detail::make_tls_context(t);
    if (!c) return c.error();
    return {};
#else
    return {errc::unsupported,
            "tcp_options.tls.enabled: this build has no TLS (configure paco with "
            "-DPACO_WITH_TLS=ON and OpenSSL)"};
#endif
  }

  ~asio_tcp() { close(); }
  asio_tcp(const asio_tcp&) = delete;
  asio_tcp& operator=(const asio_tcp&) = delete;

  int rank() const { return core_->o.rank; }
  int size() const { return core_->o.size; }
  const tcp_options& options() const { return core_->o; }

  // Queues `bytes` for peer. Requires: bytes alive until the request completes.
  // Cost: one CRC-32C pass on the calling thread (payload_crc), no copy.
  request send(int peer, tag_t tag, std::span<const std::byte> bytes, deadline d) {
    return queue_send(peer, tag, bytes, d, std::nullopt);
  }
  // send() of bytes whose CRC-32C is already known: a received payload forwarded unchanged
  // (the all-gather half of a ring), with the CRC its recv request verified.
  // Requires: crc == crc32c(0, bytes) (a wrong one makes the peer's recv fail with corrupt).
  // Cost: no pass over the bytes (with payload_crc off: as send()).
  request send_with_crc(int peer, tag_t tag, std::span<const std::byte> bytes, std::uint32_t crc,
                        deadline d) {
    return queue_send(peer, tag, bytes, d, crc);
  }

  // Posts a recv of the next message from peer with tag into bytes.
  request recv(int peer, tag_t tag, std::span<std::byte> bytes, deadline d) {
    return post_recv(peer, tag, bytes, d, false);
  }
  // recv() whose payload CRC-32C the caller checks, in a pass it makes over the bytes anyway
  // (the reduce-scatter half of a ring reduces them): the I/O thread makes no pass over them.
  // Requires: the caller compares crc32c(0, bytes) with the request's expected_crc() before
  //   trusting the bytes, and treats a difference as errc::corrupt.
  // Cost: a copy from the socket, no checksum pass.
  request recv_unverified(int peer, tag_t tag, std::span<std::byte> bytes, deadline d) {
    return post_recv(peer, tag, bytes, d, true);
  }

 private:
  request post_recv(int peer, tag_t tag, std::span<std::byte> bytes, deadline d,
                    bool caller_checks) {
    auto op = std::make_shared<detail::tcp_op>();
    op->caller_checks = caller_checks;
    op->peer = peer;
    op->tag = tag;
    op->buf = bytes.data();
    op->len = bytes.size();
    if (peer < 0 || peer >= size() || peer == rank()) {
      op->state = detail::tcp_op::state_t::done;
      op->ec = errc::invalid_argument;
      return request(core_, std::move(op), d);
    }
    std::lock_guard lk(core_->mu);
    auto& L = *core_->links[static_cast<std::size_t>(peer)];
    auto it = std::find_if(L.unexpected.begin(), L.unexpected.end(),
                           [&](auto& m) { return m.tag == tag; });
    if (it != L.unexpected.end()) {
      if (it->ec) {
        core_->complete(*op, it->ec);
      } else if (it->len != bytes.size()) {
        core_->complete(*op, errc::mismatch);
      } else {
        if (it->len) std::memcpy(bytes.data(), it->bytes.get(), it->len);
        op->has_crc = it->has_crc;
        op->crc = it->crc;
        core_->complete(*op, {});
      }
      L.unexpected_bytes -= it->len;
      L.unexpected.erase(it);
      core_->unpark(L);
    } else if (core_->stopped) {
      core_->complete(*op, errc::cancelled);
    } else if (L.failed) {
      core_->complete(*op, L.err);
    } else {
      L.posted.push_back(op);
      core_->unpark(L);
    }
    return request(core_, std::move(op), d);
  }

  request queue_send(int peer, tag_t tag, std::span<const std::byte> bytes, deadline d,
                     std::optional<std::uint32_t> crc) {
    auto op = std::make_shared<detail::tcp_op>();
    op->is_send = true;
    op->peer = peer;
    op->tag = tag;
    op->buf = const_cast<std::byte*>(bytes.data());
    op->len = bytes.size();
    if (peer < 0 || peer >= size() || peer == rank()) {
      op->state = detail::tcp_op::state_t::done;
      op->ec = errc::invalid_argument;
      return request(core_, std::move(op), d);
    }
    op->hdr = crc && core_->o.payload_crc
                  ? wire::make_data_header_with_crc(tag, bytes.size(), *crc)
                  : wire::make_header(wire::kind::data, tag, bytes, core_->o.payload_crc);
    op->ready_at = clock::now() + core_->o.shaper.latency;
    std::unique_lock lk(core_->mu);
    auto& L = *core_->links[static_cast<std::size_t>(peer)];
    if (core_->stopped) {
      core_->complete(*op, errc::cancelled);
    } else if (L.failed) {
      core_->complete(*op, L.err);
    } else if (bytes.size() > core_->o.max_frame_bytes) {
      core_->complete(*op, errc::too_large);
    } else if (L.sendq.size() >= core_->o.max_queued_sends) {
      core_->complete(*op, errc::too_large);
    } else if (!L.writing && L.sendq.empty() && inline_ok_) {
      core_->write_inline(lk, L, op);
    } else {
      L.sendq.push_back(op);
      core_->schedule_write(L);
    }
    lk.unlock();
    return request(core_, std::move(op), d);
  }

 public:
  // Ensures: every queued send and posted recv completes with errc::cancelled (operations
  // already moving bytes finish or drop their link).
  void cancel_all() {
    std::lock_guard lk(core_->mu);
    for (auto& Lp : core_->links) {
      if (!Lp) continue;
      for (auto& op : Lp->sendq) core_->complete(*op, errc::cancelled);
      Lp->sendq.clear();
      for (auto& op : Lp->posted) core_->complete(*op, errc::cancelled);
      Lp->posted.clear();
    }
  }

  // Is the link to peer up? Ensures: false once the peer was lost (closed, crashed, silent).
  bool alive(int peer) const {
    if (peer == rank()) return true;
    std::lock_guard lk(core_->mu);
    return !core_->links[static_cast<std::size_t>(peer)]->failed;
  }
  // Why the link to peer failed ("" while it is up).
  std::string failure(int peer) const {
    if (peer == rank()) return {};
    std::lock_guard lk(core_->mu);
    return core_->links[static_cast<std::size_t>(peer)]->why;
  }

  // Orderly close: flushes queued sends (up to options.linger), says bye, closes.
  // Ensures: pending operations complete with cancelled; idempotent.
  void close() {
    if (!core_) return;
    {
      std::unique_lock lk(core_->mu);
      if (core_->stopped) return;
      for (auto& Lp : core_->links) {
        if (!Lp || Lp->failed) continue;
        auto op = std::make_shared<detail::tcp_op>();
        op->is_send = true;
        op->peer = Lp->peer;
        op->hdr = wire::make_header(wire::kind::bye, 0, {});
        Lp->sendq.push_back(op);
        core_->schedule_write(*Lp);
      }
      // Wait for sends to drain and for the peers' bye (they close after reading ours).
      core_->cv.wait_until(lk, clock::now() + core_->o.linger, [&] {
        for (auto& Lp : core_->links)
          if (Lp && !Lp->failed) return false;
        return true;
      });
    }
    shutdown();
  }

  // Closes every link at once, as a crash would (for tests). Ensures: peers see peer_lost.
  void abort() { shutdown(); }

 private:
  explicit asio_tcp(std::shared_ptr<detail::tcp_core> c)
      : core_(std::move(c)),
        inline_ok_(core_->o.shaper.rate_bytes_per_s <= 0 && core_->o.shaper.latency.count() <= 0 &&
                   !core_->o.tls.enabled) {}

  void shutdown() {
    {
      std::lock_guard lk(core_->mu);
      if (core_->stopped || core_->stopping) return;
      core_->stopping = true;
    }
    boost::asio::post(core_->io, [c = core_.get()] {
      std::lock_guard lk(c->mu);
      c->hb.cancel();
      for (auto& Lp : c->links)
        if (Lp) c->fail_link(*Lp, errc::cancelled, "closed");
    });
    core_->work.reset();
    if (core_->th.joinable()) core_->th.join();
    std::lock_guard lk(core_->mu);
    core_->stopped = true;
    for (auto& Lp : core_->links) {
      if (!Lp) continue;
      if (Lp->wop) core_->complete(*Lp->wop, errc::cancelled);
      if (Lp->rop) core_->complete(*Lp->rop, errc::cancelled);
      for (auto& op : Lp->sendq) core_->complete(*op, errc::cancelled);
      for (auto& op : Lp->posted) core_->complete(*op, errc::cancelled);
      Lp->sendq.clear();
      Lp->posted.clear();
    }
  }

  std::shared_ptr<detail::tcp_core> core_;
  bool inline_ok_ = true;  // sends may be written from the caller's thread (no shaper, no TLS)
};

inline result<std::unique_ptr<asio_tcp>> asio_tcp::connect(tcp_options o) {
  using namespace detail;
  auto bad = [](std::string m) -> result<std::unique_ptr<asio_tcp>> {
    return {errc::invalid_argument, "tcp_options." + m};
  };
  if (o.size < 1) return bad("size: must be >= 1, got " + std::to_string(o.size));
  if (o.rank < 0 || o.rank >= o.size)
    return bad("rank: must be in 0.." + std::to_string(o.size - 1) + ", got " +
               std::to_string(o.rank));
  if (o.size == 1 && !o.allow_single)
    return bad(
        "size: a multi-rank transport with world size 1 was asked for (a common launch "
        "mistake); set allow_single = true if a single rank is intended");
  if (o.token.empty()) return bad("token: must be non-empty (shared secret of the group)");
  if (!o.peers.empty() && o.peers.size() != static_cast<std::size_t>(o.size))
    return bad("peers: has " + std::to_string(o.peers.size()) + " entries, size is " +
               std::to_string(o.size));
  if (o.peers.empty() && o.coordinator.empty())
    return bad("peers / coordinator: one must be given");
  if (o.heartbeat_interval.count() <= 0 || o.peer_timeout <= o.heartbeat_interval)
    return bad("peer_timeout: must exceed heartbeat_interval (> 0)");
  if (o.shaper.burst_bytes == 0) return bad("shaper.burst_bytes: must be >= 1");
  if (o.join_window.count() > 0 && !o.peers.empty())
    return bad("join_window: elastic groups need the coordinator rendezvous (peers empty)");
  const bool elastic = o.join_window.count() > 0;
  if (elastic && o.size == 1 && !o.allow_single) o.allow_single = true;  // checked after admission

  // The endpoint's core comes first: with TLS the rendezvous' streams live on its io_context
  // (run on this thread until the I/O thread starts) and become the links.
  auto core = std::make_shared<tcp_core>();
#if PACO_WITH_TLS
  if (o.tls.enabled) {
    auto c = make_tls_context(o.tls);
    if (!c) return c.error();
    core->tls_ctx = std::move(c.value());
  }
#else
  if (o.tls.enabled)
    return paco::error{errc::unsupported,
                       "tcp_options.tls.enabled: this build has no TLS (configure paco with "
                       "-DPACO_WITH_TLS=ON and OpenSSL)"};
#endif

  deadline d = clock::now() + o.connect_timeout;
  int p = o.size, me = o.rank;
  std::vector<rv_conn> conns(static_cast<std::size_t>(p));
  std::vector<sockaddr_in> addr(static_cast<std::size_t>(p));

  // Runs f(channel) over c (its descriptor, or its TLS stream); a TLS failure's text in why.
  auto over = [&](rv_conn& c, std::string& why, auto&& f) {
#if PACO_WITH_TLS
    if (c.tls) {
      tls_channel ch{core->io, *c.tls, {}};
      auto r = f(ch);
      why = std::move(ch.why);
      return r;
    }
#endif
    fd_channel ch{c.fd.get()};
    return f(ch);
  };
  auto with = [](std::string m, const std::string& why) {
    return why.empty() ? m : m + " [" + why + "]";
  };
  // A connected descriptor as a connection; with TLS after the TLS handshake (as client when
  // we connected) by the deadline.
  auto open = [&](fd_owner fd, bool client, std::string& why) -> result<rv_conn> {
    rv_conn c;
#if PACO_WITH_TLS
    if (core->tls_ctx) {
      if (!client && greets_without_tls(fd.get(), d)) {  // refuse it in its own words
        fd_channel ch{fd.get()};
        wire::frame_header h;
        std::vector<std::byte> pl;
        if (!read_frame(ch, h, pl, sizeof(wire::hello_body), d))
          send_frame(ch, wire::kind::refuse, {}, d, static_cast<std::uint32_t>(errc::auth));
        drain_before_close(fd.get(), std::chrono::milliseconds(200));
        why = "the peer does not use TLS";
        return paco::error{errc::auth, "TLS handshake"};
      }
      auto s = tls_wrap(core->io, *core->tls_ctx, fd.release(), o.tls.peer_name);
      if (!s) return s.error();
      c.tls = std::move(s.value());
      tls_channel ch{core->io, *c.tls, {}};
      if (auto ec = ch.handshake(client ? ssl::stream_base::client : ssl::stream_base::server, d)) {
        why = std::move(ch.why);
        if (!client) c.refuse_close();  // let the client read our alert
        return paco::error{ec, "TLS handshake"};
      }
      return c;
    }
#endif
    (void)client;
    (void)why;
    c.fd = std::move(fd);
    return c;
  };

  // Our listening socket.
  sockaddr_in la{};
  if (!o.peers.empty()) {
    auto a = resolve_ipv4(o.peers[static_cast<std::size_t>(me)]);
    if (!a) return a.error();
    la = a.value();
    for (int r = 0; r < p; ++r) {
      auto ar = resolve_ipv4(o.peers[static_cast<std::size_t>(r)]);
      if (!ar) return ar.error();
      addr[static_cast<std::size_t>(r)] = ar.value();
    }
  } else {
    auto c = resolve_ipv4(o.coordinator);
    if (!c) return c.error();
    addr[0] = c.value();
    if (me == 0) {
      la = c.value();
    } else {
      auto l = resolve_ipv4(o.listen_host + ":0");
      if (!l) return l.error();
      la = l.value();
    }
  }
  std::uint16_t port = 0;
  fd_owner listener;
  if (me < p - 1 || (o.peers.empty() && me == 0)) {
    auto l = listen_on(la, p + 8, o.socket_buffer_bytes, port);
    if (!l) return l.error();
    listener = std::move(l.value());
  }
  auto hello = wire::make_hello(me, p, o.epoch, port);

  auto connect_to = [&](int r) -> status {
    auto& a = addr[static_cast<std::size_t>(r)];
    const std::string who = "asio_tcp rank " + std::to_string(me) + " -> rank " +
                            std::to_string(r) + " at " + to_string(a) + ": ";
    while (true) {
      auto s = connect_retry(a, o.socket_buffer_bytes, d);
      if (!s)
        return paco::error{s.error().code,
                           "asio_tcp rank " + std::to_string(me) + ": " + s.error().message};
      std::string why;
      auto c = open(std::move(s.value()), true, why);
      result<wire::hello_body> h =
          c ? over(c.value(), why,
                   [&](auto& ch) { return client_handshake(ch, hello, r, o.token, d); })
            : result<wire::hello_body>(c.error());
      if (h) {
        conns[static_cast<std::size_t>(r)] = std::move(c.value());
        return {};
      }
      // A peer that is not up yet may reset us: retry; anything it said is final.
      if (h.error().code != errc::peer_lost || clock::now() >= d)
        return paco::error{h.error().code, who + with(h.error().message, why)};
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  };
  // Accepts until every rank in `want` is connected; refused connections do not count.
  auto accept_from = [&](std::vector<int> want, std::vector<std::uint16_t>* ports) -> status {
    std::size_t got = 0;
    std::string last;
    while (got < want.size()) {
      sockaddr_in pa{};
      auto s = accept_until(listener.get(), d, pa);
      if (!s)
        return paco::error{s.error().code, "asio_tcp rank " + std::to_string(me) + ": " +
                                               std::to_string(want.size() - got) +
                                               " peer(s) never arrived" +
                                               (last.empty() ? "" : "; last refused: " + last)};
      std::string why;
      auto c = open(std::move(s.value()), false, why);
      result<wire::hello_body> h =
          c ? over(c.value(), why,
                   [&](auto& ch) { return server_handshake(ch, hello, o.token, d); })
            : result<wire::hello_body>(c.error());
      if (!h) {
        last = to_string(pa) + ": " + with(h.error().message, why);
        if (c) c.value().refuse_close();
        continue;
      }
      int r = static_cast<int>(h.value().rank);
      if (std::find(want.begin(), want.end(), r) == want.end() ||
          conns[static_cast<std::size_t>(r)].open()) {
        last = "unexpected or duplicate rank " + std::to_string(r);
        c.value().refuse_close();
        continue;
      }
      conns[static_cast<std::size_t>(r)] = std::move(c.value());
      addr[static_cast<std::size_t>(r)] = pa;
      if (ports) (*ports)[static_cast<std::size_t>(r)] = h.value().listen_port;
      ++got;
    }
    return {};
  };

  if (o.peers.empty()) {  // coordinator rendezvous: rank 0 collects and sends the table
    if (me == 0) {
      std::vector<int> all;
      for (int r = 1; r < p; ++r) all.push_back(r);
      std::vector<std::uint16_t> ports(static_cast<std::size_t>(p));
      if (elastic) {  // admit whoever arrives within the window
        auto window_end = std::min(d, clock::now() + o.join_window);
        auto saved = d;
        d = window_end;
        auto st = accept_from(all, &ports);
        d = saved;
        if (!st && st.error().code != errc::timeout) return st.error();
      } else if (auto st = accept_from(all, &ports); !st) {
        return st.error();
      }
      // Members by id; the table's header carries the group size, entry.reserved the id.
      std::vector<int> members{0};
      for (int r = 1; r < p; ++r)
        if (conns[static_cast<std::size_t>(r)].open()) members.push_back(r);
      const int q = static_cast<int>(members.size());
      if (q == 1 && p > 1 && !o.allow_single)
        return paco::error{errc::timeout,
                           "asio_tcp coordinator: no member joined within join_window"};
      std::vector<wire::table_entry> table(static_cast<std::size_t>(q));
      for (int k = 0; k < q; ++k) {
        auto id = static_cast<std::size_t>(members[static_cast<std::size_t>(k)]);
        if (k > 0) {
          table[static_cast<std::size_t>(k)].ipv4 = ntohl(addr[id].sin_addr.s_addr);
          table[static_cast<std::size_t>(k)].port = ports[id];
        }
        table[static_cast<std::size_t>(k)].reserved = static_cast<std::uint16_t>(id);
      }
      auto tb = std::as_bytes(std::span(table));
      std::vector<rv_conn> renumbered(static_cast<std::size_t>(q));
      for (int k = 1; k < q; ++k) {
        auto id = static_cast<std::size_t>(members[static_cast<std::size_t>(k)]);
        std::string why;
        if (auto ec = over(conns[id], why, [&](auto& ch) {
              return send_frame(ch, wire::kind::table, tb, d, static_cast<std::uint32_t>(q));
            }))
          return paco::error{
              ec,
              with("asio_tcp coordinator: sending the table to rank " + std::to_string(id), why)};
        renumbered[static_cast<std::size_t>(k)] = std::move(conns[id]);
      }
      conns = std::move(renumbered);
      o.size = q;
      p = q;
      listener.reset();
    } else {
      if (auto st = connect_to(0); !st) return st.error();
      wire::frame_header h;
      std::vector<std::byte> pl;
      std::string why;
      if (auto ec = over(conns[0], why, [&](auto& ch) {
            return read_frame(ch, h, pl, sizeof(wire::table_entry) * static_cast<std::size_t>(p),
                              d);
          }))
        return paco::error{
            ec,
            with("asio_tcp rank " + std::to_string(me) + ": reading the coordinator's table", why)};
      const std::size_t q = h.aux;  // the group size the coordinator decided
      if (h.kind != static_cast<std::uint8_t>(wire::kind::table) || q < 2 ||
          q > static_cast<std::size_t>(p) || pl.size() != sizeof(wire::table_entry) * q)
        return paco::error{errc::protocol, "asio_tcp: coordinator sent no valid table"};
      int new_rank = -1;
      for (std::size_t k = 0; k < q; ++k) {
        wire::table_entry e;
        std::memcpy(&e, pl.data() + sizeof e * k, sizeof e);
        if (e.reserved == static_cast<std::uint16_t>(me)) new_rank = static_cast<int>(k);
        if (k == 0) continue;
        addr[k].sin_family = AF_INET;
        addr[k].sin_addr.s_addr = htonl(e.ipv4);
        addr[k].sin_port = htons(e.port);
      }
      if (new_rank < 1)
        return paco::error{errc::protocol, "asio_tcp: coordinator's table lacks this member"};
      if (static_cast<int>(q) != p || new_rank != me) {  // elastic: renumbered
        auto c0 = std::move(conns[0]);
        conns.clear();
        conns.resize(q);
        conns[0] = std::move(c0);
        me = new_rank;
        p = static_cast<int>(q);
        o.rank = me;
        o.size = p;
        hello = wire::make_hello(me, p, o.epoch, port);
      }
      for (int r = 1; r < me; ++r)
        if (auto st = connect_to(r); !st) return st.error();
      std::vector<int> above;
      for (int r = me + 1; r < p; ++r) above.push_back(r);
      if (auto st = accept_from(above, nullptr); !st) return st.error();
    }
  } else {
    for (int r = 0; r < me; ++r)
      if (auto st = connect_to(r); !st) return st.error();
    std::vector<int> above;
    for (int r = me + 1; r < p; ++r) above.push_back(r);
    if (auto st = accept_from(above, nullptr); !st) return st.error();
  }
  listener.reset();

  core->o = std::move(o);
  core->lim.max_payload = core->o.max_frame_bytes;
  core->links.resize(static_cast<std::size_t>(p));
  auto now = clock::now();
  for (int r = 0; r < p; ++r) {
    if (r == me) continue;
    auto L = std::make_unique<tcp_link>(core->io);
    L->peer = r;
    auto& c = conns[static_cast<std::size_t>(r)];
#if PACO_WITH_TLS
    if (c.tls) {
      L->tls = std::move(c.tls);
      tune_socket(L->tls->next_layer().native_handle(), core->o.socket_buffer_bytes);
    }
#endif
    if (c.fd.get() >= 0) {
      int fd = c.fd.release();
      tune_socket(fd, core->o.socket_buffer_bytes);
      boost::system::error_code ec;
      L->sock.assign(boost::asio::ip::tcp::v4(), fd, ec);
      if (ec) {
        ::close(fd);
        return paco::error{errc::io, "asio_tcp: adopting socket: " + ec.message()};
      }
    }
    L->last_rx = L->last_tx = L->tok_t = now;
    L->tokens = static_cast<double>(core->o.shaper.burst_bytes);
    core->links[static_cast<std::size_t>(r)] = std::move(L);
  }
  core->work.emplace(core->io.get_executor());
  for (auto& L : core->links)
    if (L) core->read_header(*L);
  core->heartbeat();
  core->io.restart();  // the TLS rendezvous ran it on this thread until it was out of work
  core->th = std::thread([c = core.get()] { c->io.run(); });
  return std::unique_ptr<asio_tcp>(new asio_tcp(core));
}

static_assert(Transport<asio_tcp>);

}  // namespace paco::net
