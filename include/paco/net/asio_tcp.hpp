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
//
// Layout: this header holds the endpoint (asio_tcp, its requests, connect()); the pieces it
// is made of are tcp_options.hpp (configuration and its checks) and, in detail/,
// tcp_stream.hpp (a connection's socket or TLS stream: the one place that knows the build's
// TLS), tcp_link.hpp (ops, links and the state they share), tcp_send.hpp (send path, inline
// send, shaper), tcp_recv.hpp (receive path), tcp_heartbeat.hpp (liveness) and
// tcp_connect.hpp (rendezvous and start, over rendezvous.hpp's socket steps).

#include <boost/asio/post.hpp>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>

#include "paco/core/error.hpp"
#include "paco/net/concepts.hpp"
#include "paco/net/detail/tcp_connect.hpp"
#include "paco/net/detail/tcp_link.hpp"
#include "paco/net/detail/tcp_recv.hpp"
#include "paco/net/detail/tcp_send.hpp"
#include "paco/net/detail/tcp_stream.hpp"
#include "paco/net/tcp_options.hpp"
#include "paco/net/tls_options.hpp"
#include "paco/net/wire.hpp"

namespace paco::net {

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
    auto c = detail::tls_context_for(t);
    if (!c) return c.error();
    return {};
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
      detail::unpark(*core_, L);
    } else if (core_->stopped) {
      core_->complete(*op, errc::cancelled);
    } else if (L.failed) {
      core_->complete(*op, L.err);
    } else {
      L.posted.push_back(op);
      detail::unpark(*core_, L);
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
    op->ready_at = clock::now() + core_->o.shaper_to(peer).latency;
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
      detail::write_inline(*core_, lk, L, op);
    } else {
      L.sendq.push_back(op);
      detail::schedule_write(*core_, L);
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
        detail::schedule_write(*core_, *Lp);
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
      : core_(std::move(c)), inline_ok_(!core_->o.shaped() && !core_->o.tls.enabled) {}

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
  auto core = detail::connect_core(std::move(o));
  if (!core) return core.error();
  return std::unique_ptr<asio_tcp>(new asio_tcp(std::move(core.value())));
}

static_assert(Transport<asio_tcp>);

}  // namespace paco::net
