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
// Streams (tcp_options.streams = S > 1, for long fat links where one TCP window per round trip
// is below the line rate): every pair of ranks has S connections, each carried by its own core
// (I/O thread, links, heartbeats). A message of n bytes leaves as S frames, piece k (bytes
// [k*n/S, (k+1)*n/S) in whole-byte split: the first n%S pieces one byte longer) on stream k;
// the receiver posts the same split, so each stream's FIFO per (peer, tag) keeps the pieces of
// one message together and a recv's pieces land straight in its buffer. A request is complete
// when all its pieces are, and fails when one does; its payload CRC is combined from theirs
// (crc32c_combine). A link is alive while every one of its streams is: once one fails, every
// later message to that peer fails too (each has a piece on it), and the streams stay in step
// (every message takes one frame on each; a message that moved on some streams and not on
// others fails the link on all: request::settle). A shaped link gives each stream rate / S.
//
// Layout: this header holds the endpoint (asio_tcp, its requests, connect()); the pieces it
// is made of are tcp_options.hpp (configuration and its checks) and, in detail/,
// tcp_stream.hpp (a connection's socket or TLS stream: the one place that knows the build's
// TLS), tcp_link.hpp (ops, links and the state they share), tcp_send.hpp (send path, inline
// send, shaper), tcp_recv.hpp (receive path), tcp_heartbeat.hpp (liveness) and
// tcp_connect.hpp (rendezvous and start, over rendezvous.hpp's socket steps).

#include <boost/asio/post.hpp>

#include <sys/socket.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "paco/core/error.hpp"
#include "paco/net/concepts.hpp"
#include "paco/net/crc32c.hpp"
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
        rest_ = std::move(o.rest_);
        settled_ = o.settled_;
      }
      return *this;
    }
    ~request() { cancel(); }
    // Blocks until complete or the deadline (a frame abandoned mid-way drops that link).
    // Ensures: {} when every piece of the message moved; else the first piece's error.
    std::error_code wait() {
      std::error_code ec = op_ ? core_->wait(op_, d_) : std::error_code{};
      for (auto& r : rest_) {
        if (ec && ec != errc::mismatch)
          r.cancel();  // a lost link or a passed deadline: the other pieces make no message
        else if (auto e = r.wait(); e && !ec)
          ec = e;
      }
      if (ec)
        settle();
      else
        settled_ = true;  // every piece moved: nothing to settle when it is destroyed
      return ec;
    }
    bool test() {
      for (auto& r : rest_)
        if (!r.test()) return false;
      if (!op_) return true;
      std::lock_guard lk(core_->mu);
      return op_->state == detail::tcp_op::state_t::done;
    }
    // A completed recv's payload CRC-32C, when its frame carried one and it matched (for
    // send_with_crc: forwarding the bytes unchanged needs no second pass). Requires: wait()
    // returned {}. Ensures: nullopt for sends, frames without a CRC and failed recvs.
    std::optional<std::uint32_t> payload_crc() const {
      if (!op_ || op_->is_send || op_->caller_checks) return std::nullopt;
      return combined_crc();
    }
    // A completed recv_unverified's expected payload CRC-32C: the one its frame carried, which
    // the caller must compare with the bytes' before trusting them. Requires: wait() returned
    // {}. Ensures: nullopt when the frame carried no CRC (payload_crc off at the sender), for
    // other requests and for failed recvs.
    std::optional<std::uint32_t> expected_crc() const {
      if (!op_ || !op_->caller_checks) return std::nullopt;
      return combined_crc();
    }
    void cancel() {
      for (auto& r : rest_) r.cancel();
      if (!op_ || !core_) return;
      {
        std::unique_lock lk(core_->mu);
        core_->abandon(lk, op_, errc::cancelled);
      }
      settle();
    }

   private:
    friend class asio_tcp;
    // A striped message keeps its link's streams in step only if each of its pieces moved its
    // frame (sent, or received: a length mismatch consumes the frame too) or none did. Once
    // every piece has ended, a message that moved on some streams and not on others (a deadline
    // or cancel that caught pieces still queued, a full queue on one stream) fails the link to
    // its peer on every stream: a later message would otherwise be assembled from pieces of
    // two. Requires: every piece done (after wait() or cancel()).
    void settle() {
      if (rest_.empty() || !op_ || settled_) return;
      settled_ = true;
      std::size_t moved = 0;
      auto piece_moved = [](const request& r) {
        std::lock_guard lk(r.core_->mu);
        return r.op_->state == detail::tcp_op::state_t::done &&
               (!r.op_->ec || r.op_->ec == errc::mismatch);
      };
      moved += piece_moved(*this) ? 1 : 0;
      for (const auto& r : rest_) moved += piece_moved(r) ? 1 : 0;
      if (moved == 0 || moved == rest_.size() + 1) return;
      const std::string why = "rank " + std::to_string(op_->peer) + ": a message striped over " +
                              std::to_string(rest_.size() + 1) + " streams moved on " +
                              std::to_string(moved) + " of them (the streams are out of step)";
      auto fail_on = [peer = op_->peer, &why](const std::shared_ptr<detail::tcp_core>& c) {
        std::lock_guard lk(c->mu);
        if (c->stopped || c->stopping) return;
        boost::asio::post(c->io, [c = c.get(), peer, why] {
          std::lock_guard g(c->mu);
          auto& L = *c->links[static_cast<std::size_t>(peer)];
          if (!L.failed) c->fail_link(L, errc::peer_lost, why);
        });
      };
      fail_on(core_);
      for (const auto& r : rest_) fail_on(r.core_);
    }
    // The CRC of the whole message: this piece's, then the other streams' pieces' appended.
    std::optional<std::uint32_t> combined_crc() const {
      auto c = completed_crc();
      for (const auto& r : rest_) {
        if (!c) return c;
        auto k = r.completed_crc();
        if (!k) return k;
        c = crc32c_combine(*c, *k, r.op_->len);
      }
      return c;
    }
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
    std::vector<request> rest_;  // a striped message: its pieces on streams 1..S-1
    bool settled_ = false;       // settle() ran
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
  // TCP connections per link (tcp_options::streams).
  int streams() const { return static_cast<int>(lanes_.size()); }
  // The send and receive buffer sizes the kernel reports for stream k of the link to peer
  // (SO_SNDBUF, SO_RCVBUF: twice what was set, for bookkeeping; autotuned sizes grow later).
  // Ensures: {0, 0} for oneself, a bad peer or stream, or a failed link.
  std::pair<int, int> socket_buffers(int peer, int k = 0) const {
    if (peer < 0 || peer >= size() || peer == rank() || k < 0 || k >= streams()) return {0, 0};
    auto& c = *lanes_[static_cast<std::size_t>(k)];
    std::lock_guard lk(c.mu);
    auto& L = *c.links[static_cast<std::size_t>(peer)];
    if (L.failed) return {0, 0};
    int snd = 0, rcv = 0;
    socklen_t n = sizeof snd;
    ::getsockopt(L.socket().native_handle(), SOL_SOCKET, SO_SNDBUF, &snd, &n);
    n = sizeof rcv;
    ::getsockopt(L.socket().native_handle(), SOL_SOCKET, SO_RCVBUF, &rcv, &n);
    return {snd, rcv};
  }

  // Queues `bytes` for peer. Requires: bytes alive until the request completes.
  // Cost: one CRC-32C pass on the calling thread (payload_crc), no copy.
  request send(int peer, tag_t tag, std::span<const std::byte> bytes, deadline d) {
    if (lanes_.size() > 1) return striped_send(peer, tag, bytes, d);
    return queue_send(core_, peer, tag, bytes, d, std::nullopt);
  }
  // send() of bytes whose CRC-32C is already known: a received payload forwarded unchanged
  // (the all-gather half of a ring), with the CRC its recv request verified.
  // Requires: crc == crc32c(0, bytes) (a wrong one makes the peer's recv fail with corrupt).
  // Cost: no pass over the bytes (with payload_crc off: as send(); with streams > 1 as send():
  //   each piece needs its own CRC).
  request send_with_crc(int peer, tag_t tag, std::span<const std::byte> bytes, std::uint32_t crc,
                        deadline d) {
    if (lanes_.size() > 1) return send(peer, tag, bytes, d);
    return queue_send(core_, peer, tag, bytes, d, crc);
  }

  // Posts a recv of the next message from peer with tag into bytes.
  request recv(int peer, tag_t tag, std::span<std::byte> bytes, deadline d) {
    if (lanes_.size() > 1) return striped_recv(peer, tag, bytes, d, false);
    return post_recv(core_, peer, tag, bytes, d, false);
  }
  // recv() whose payload CRC-32C the caller checks, in a pass it makes over the bytes anyway
  // (the reduce-scatter half of a ring reduces them): the I/O thread makes no pass over them.
  // Requires: the caller compares crc32c(0, bytes) with the request's expected_crc() before
  //   trusting the bytes, and treats a difference as errc::corrupt.
  // Cost: a copy from the socket, no checksum pass.
  request recv_unverified(int peer, tag_t tag, std::span<std::byte> bytes, deadline d) {
    if (lanes_.size() > 1) return striped_recv(peer, tag, bytes, d, true);
    return post_recv(core_, peer, tag, bytes, d, true);
  }

 private:
  // A request that completed at once with ec (bad peer, message too large).
  request failed_now(const std::shared_ptr<detail::tcp_core>& c, bool is_send, int peer,
                     std::error_code ec, deadline d) {
    auto op = std::make_shared<detail::tcp_op>();
    op->is_send = is_send;
    op->peer = peer;
    op->state = detail::tcp_op::state_t::done;
    op->ec = ec;
    return request(c, std::move(op), d);
  }

  // Piece k of an n-byte message striped over S streams: {offset, length}, the whole-byte
  // split (the first n % S pieces one byte longer). Both ends compute it from the length.
  static std::pair<std::size_t, std::size_t> piece(std::size_t n, std::size_t S, std::size_t k) {
    const std::size_t base = n / S, extra = n % S;
    return {k * base + std::min(k, extra), base + (k < extra ? 1 : 0)};
  }

  // A message striped over the streams: piece k sent on stream k.
  request striped_send(int peer, tag_t tag, std::span<const std::byte> bytes, deadline d) {
    if (bytes.size() > core_->o.max_frame_bytes)  // the whole message's bound, not a piece's
      return failed_now(core_, true, peer, errc::too_large, d);
    const std::size_t S = lanes_.size();
    request head;
    for (std::size_t k = 0; k < S; ++k) {
      auto [off, len] = piece(bytes.size(), S, k);
      auto r = queue_send(lanes_[k], peer, tag, bytes.subspan(off, len), d, std::nullopt);
      if (k == 0) {
        head = std::move(r);
        if (head.test() && head.op_->ec) return head;  // bad peer, failed link: no pieces
      } else {
        head.rest_.push_back(std::move(r));
      }
    }
    return head;
  }
  // A striped message received: piece k posted on stream k, straight into its part of bytes.
  request striped_recv(int peer, tag_t tag, std::span<std::byte> bytes, deadline d,
                       bool caller_checks) {
    if (peer < 0 || peer >= size() || peer == rank())  // invalid_argument, no pieces
      return post_recv(core_, peer, tag, bytes, d, caller_checks);
    const std::size_t S = lanes_.size();
    request head;
    for (std::size_t k = 0; k < S; ++k) {
      auto [off, len] = piece(bytes.size(), S, k);
      auto r = post_recv(lanes_[k], peer, tag, bytes.subspan(off, len), d, caller_checks);
      if (k == 0) {
        head = std::move(r);
      } else {
        head.rest_.push_back(std::move(r));
      }
    }
    return head;
  }

  request post_recv(const std::shared_ptr<detail::tcp_core>& c, int peer, tag_t tag,
                    std::span<std::byte> bytes, deadline d, bool caller_checks) {
    if (peer < 0 || peer >= size() || peer == rank())
      return failed_now(c, false, peer, errc::invalid_argument, d);
    auto op = std::make_shared<detail::tcp_op>();
    op->caller_checks = caller_checks;
    op->peer = peer;
    op->tag = tag;
    op->buf = bytes.data();
    op->len = bytes.size();
    std::lock_guard lk(c->mu);
    auto& L = *c->links[static_cast<std::size_t>(peer)];
    auto it = std::find_if(L.unexpected.begin(), L.unexpected.end(),
                           [&](auto& m) { return m.tag == tag; });
    if (it != L.unexpected.end()) {
      if (it->ec) {
        c->complete(*op, it->ec);
      } else if (it->len != bytes.size()) {
        c->complete(*op, errc::mismatch);
      } else {
        if (it->len) std::memcpy(bytes.data(), it->bytes.get(), it->len);
        op->has_crc = it->has_crc;
        op->crc = it->crc;
        c->complete(*op, {});
      }
      L.unexpected_bytes -= it->len;
      L.unexpected.erase(it);
      detail::unpark(*c, L);
    } else if (c->stopped) {
      c->complete(*op, errc::cancelled);
    } else if (L.failed) {
      c->complete(*op, L.err);
    } else {
      L.posted.push_back(op);
      detail::unpark(*c, L);
    }
    return request(c, std::move(op), d);
  }

  request queue_send(const std::shared_ptr<detail::tcp_core>& c, int peer, tag_t tag,
                     std::span<const std::byte> bytes, deadline d,
                     std::optional<std::uint32_t> crc) {
    if (peer < 0 || peer >= size() || peer == rank())
      return failed_now(c, true, peer, errc::invalid_argument, d);
    auto op = std::make_shared<detail::tcp_op>();
    op->is_send = true;
    op->peer = peer;
    op->tag = tag;
    op->buf = const_cast<std::byte*>(bytes.data());
    op->len = bytes.size();
    op->hdr = crc && c->o.payload_crc
                  ? wire::make_data_header_with_crc(tag, bytes.size(), *crc)
                  : wire::make_header(wire::kind::data, tag, bytes, c->o.payload_crc);
    op->ready_at = clock::now() + c->o.shaper_to(peer).latency;
    std::unique_lock lk(c->mu);
    auto& L = *c->links[static_cast<std::size_t>(peer)];
    if (c->stopped) {
      c->complete(*op, errc::cancelled);
    } else if (L.failed) {
      c->complete(*op, L.err);
    } else if (bytes.size() > c->o.max_frame_bytes) {
      c->complete(*op, errc::too_large);
    } else if (L.sendq.size() >= c->o.max_queued_sends) {
      c->complete(*op, errc::too_large);
    } else if (!L.writing && L.sendq.empty() && inline_ok_) {
      detail::write_inline(*c, lk, L, op);
    } else {
      L.sendq.push_back(op);
      detail::schedule_write(*c, L);
    }
    lk.unlock();
    return request(c, std::move(op), d);
  }

 public:
  // Ensures: every queued send and posted recv completes with errc::cancelled (operations
  // already moving bytes finish or drop their link).
  void cancel_all() {
    for (auto& c : lanes_) {
      std::lock_guard lk(c->mu);
      for (auto& Lp : c->links) {
        if (!Lp) continue;
        for (auto& op : Lp->sendq) c->complete(*op, errc::cancelled);
        Lp->sendq.clear();
        for (auto& op : Lp->posted) c->complete(*op, errc::cancelled);
        Lp->posted.clear();
      }
    }
  }

  // Is the link to peer up? Ensures: false once the peer was lost (closed, crashed, silent) on
  // any of the link's streams.
  bool alive(int peer) const {
    if (peer == rank()) return true;
    for (const auto& c : lanes_) {
      std::lock_guard lk(c->mu);
      if (c->links[static_cast<std::size_t>(peer)]->failed) return false;
    }
    return true;
  }
  // Why the link to peer failed ("" while it is up): the first failed stream's reason.
  std::string failure(int peer) const {
    if (peer == rank()) return {};
    for (const auto& c : lanes_) {
      std::lock_guard lk(c->mu);
      const auto& L = *c->links[static_cast<std::size_t>(peer)];
      if (L.failed) return L.why;
    }
    return {};
  }

  // Orderly close: flushes queued sends (up to options.linger), says bye, closes.
  // Ensures: pending operations complete with cancelled; idempotent.
  void close() {
    if (!core_) return;
    const auto until = clock::now() + core_->o.linger;
    for (auto& c : lanes_) {  // every stream says bye first, then each waits for the peers'
      std::lock_guard lk(c->mu);
      if (c->stopped) return;
      for (auto& Lp : c->links) {
        if (!Lp || Lp->failed) continue;
        auto op = std::make_shared<detail::tcp_op>();
        op->is_send = true;
        op->peer = Lp->peer;
        op->hdr = wire::make_header(wire::kind::bye, 0, {});
        Lp->sendq.push_back(op);
        detail::schedule_write(*c, *Lp);
      }
    }
    for (auto& c : lanes_) {  // sends drained and the peers' bye read (they close after ours)
      std::unique_lock lk(c->mu);
      c->cv.wait_until(lk, until, [&] {
        for (auto& Lp : c->links)
          if (Lp && !Lp->failed) return false;
        return true;
      });
    }
    shutdown();
  }

  // Closes every link at once, as a crash would (for tests). Ensures: peers see peer_lost.
  void abort() { shutdown(); }

 private:
  explicit asio_tcp(std::vector<std::shared_ptr<detail::tcp_core>> lanes)
      : lanes_(std::move(lanes)),
        core_(lanes_.front()),
        inline_ok_(!core_->o.shaped() && !core_->o.tls.enabled) {}

  void shutdown() {
    {  // once: stream 0's flag says whether a shutdown has begun
      std::lock_guard lk(core_->mu);
      if (core_->stopped || core_->stopping) return;
      core_->stopping = true;
    }
    for (auto& c : lanes_) {
      {
        std::lock_guard lk(c->mu);
        c->stopping = true;
      }
      boost::asio::post(c->io, [c = c.get()] {
        std::lock_guard lk(c->mu);
        c->hb.cancel();
        for (auto& Lp : c->links)
          if (Lp) c->fail_link(*Lp, errc::cancelled, "closed");
      });
    }
    for (auto& c : lanes_) {
      c->work.reset();
      if (c->th.joinable()) c->th.join();
    }
    for (auto& c : lanes_) {
      std::lock_guard lk(c->mu);
      c->stopped = true;
      for (auto& Lp : c->links) {
        if (!Lp) continue;
        if (Lp->wop) c->complete(*Lp->wop, errc::cancelled);
        if (Lp->rop) c->complete(*Lp->rop, errc::cancelled);
        for (auto& op : Lp->sendq) c->complete(*op, errc::cancelled);
        for (auto& op : Lp->posted) c->complete(*op, errc::cancelled);
        Lp->sendq.clear();
        Lp->posted.clear();
      }
    }
  }

  std::vector<std::shared_ptr<detail::tcp_core>> lanes_;  // lanes_[k] carries stream k
  std::shared_ptr<detail::tcp_core> core_;                // lanes_[0]
  bool inline_ok_ = true;  // sends may be written from the caller's thread (no shaper, no TLS)
};

inline result<std::unique_ptr<asio_tcp>> asio_tcp::connect(tcp_options o) {
  auto cores = detail::connect_cores(std::move(o));
  if (!cores) return cores.error();
  return std::unique_ptr<asio_tcp>(new asio_tcp(std::move(cores.value())));
}

static_assert(Transport<asio_tcp>);

}  // namespace paco::net
