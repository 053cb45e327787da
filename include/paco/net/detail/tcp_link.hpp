#pragma once
// The state of one asio_tcp endpoint: its operations (tcp_op), its links, one per peer
// (tcp_link: the connection, the send queue and shaper's bucket, the receive state), and the
// core they share (tcp_core: options, io_context and I/O thread, the lock all queues live
// under) with the small steps every path takes: completing an op, waiting for one, failing a
// link, abandoning an op. The paths themselves: tcp_send.hpp, tcp_recv.hpp, tcp_heartbeat.hpp.

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>

#include <sys/socket.h>

#include <algorithm>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "paco/core/error.hpp"
#include "paco/net/concepts.hpp"
#include "paco/net/detail/tcp_stream.hpp"
#include "paco/net/tcp_options.hpp"
#include "paco/net/wire.hpp"

namespace paco::net::detail {

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
  explicit tcp_link(asio::io_context& io) : stream(io), shape_timer(io) {}
  int peer = 0;
  link_stream stream;  // the connection: the socket or, with TLS, the TLS stream over it
  // The TCP socket (under the TLS stream when there is one).
  asio::ip::tcp::socket& socket() { return stream.socket(); }
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
  shaper_options shaper;       // this link's (tcp_options::shaper_to(peer))
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
  std::shared_ptr<tls_context> tls_ctx;  // set when o.tls.enabled
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
        ::shutdown(L.socket().native_handle(), SHUT_RDWR);
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
};

}  // namespace paco::net::detail
