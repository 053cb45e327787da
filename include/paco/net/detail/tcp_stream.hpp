#pragma once
// The byte stream of one asio_tcp connection: the plain TCP socket or, with TLS
// (tcp_options.tls, builds with PACO_WITH_TLS), the TLS stream over it that owns it. Both the
// rendezvous' connections (rv_conn) and the links' (link_stream) choose between the two here,
// in one place: the rest of the transport asks a connection, not the build, whether its bytes
// go through TLS. A build without TLS has only the plain socket and refuses tls.enabled.

#include <boost/asio/completion_condition.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>

#include <unistd.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "paco/core/error.hpp"
#include "paco/net/concepts.hpp"
#include "paco/net/detail/rendezvous.hpp"
#include "paco/net/tls_options.hpp"
#include "paco/net/wire.hpp"
#if PACO_WITH_TLS
#include "paco/net/detail/tls.hpp"
#endif

namespace paco::net::detail {

namespace asio = boost::asio;

#if PACO_WITH_TLS
using tls_context = ssl::context;
#else
struct tls_context;  // never made: a build without TLS refuses tls.enabled
#endif

// The TLS context of a group member, or none when TLS is off.
// Ensures: null when !t.enabled; else a context or make_tls_context's error (not_found / io /
// invalid_argument naming the field and file); unsupported in a build without TLS.
inline result<std::shared_ptr<tls_context>> tls_context_for(const tls_options& t) {
  if (!t.enabled) return std::shared_ptr<tls_context>{};
#if PACO_WITH_TLS
  return make_tls_context(t);
#else
  return paco::error{errc::unsupported,
                     "tcp_options.tls.enabled: this build has no TLS (configure paco with "
                     "-DPACO_WITH_TLS=ON and OpenSSL)"};
#endif
}

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
  // Runs f(channel) over this connection (its descriptor, or its TLS stream, run on io); a TLS
  // failure's text in why.
  template <class F>
  auto over([[maybe_unused]] asio::io_context& io, [[maybe_unused]] std::string& why, F&& f) {
#if PACO_WITH_TLS
    if (tls) {
      tls_channel ch{io, *tls, {}};
      auto r = f(ch);
      why = std::move(ch.why);
      return r;
    }
#endif
    fd_channel ch{fd.get()};
    return f(ch);
  }
};

// A connected descriptor as a connection; with TLS (ctx set) after the TLS handshake on io (as
// client when we connected) by d, the peer's certificate naming peer_name when that is set.
// Ensures: the connection, or auth / a TLS error with the failure's text in why (a server
// refuses a peer without TLS in its own words and closes).
inline result<rv_conn> open_conn([[maybe_unused]] asio::io_context& io,
                                 [[maybe_unused]] tls_context* ctx,
                                 [[maybe_unused]] const std::string& peer_name, fd_owner fd,
                                 bool client, deadline d, std::string& why) {
  rv_conn c;
#if PACO_WITH_TLS
  if (ctx) {
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
    auto s = tls_wrap(io, *ctx, fd.release(), peer_name);
    if (!s) return s.error();
    c.tls = std::move(s.value());
    tls_channel ch{io, *c.tls, {}};
    if (auto ec = ch.handshake(client ? ssl::stream_base::client : ssl::stream_base::server, d)) {
      why = std::move(ch.why);
      if (!client) c.refuse_close();  // let the client read our alert
      return paco::error{ec, "TLS handshake"};
    }
    return c;
  }
#endif
  (void)client;
  (void)d;
  (void)why;
  c.fd = std::move(fd);
  return c;
}

// Completion condition of the composed reads and writes: all bytes, in syscalls as large as
// the socket takes (asio's transfer_all caps each at 64 KiB: 16 syscalls and wake-ups per MiB).
struct transfer_all_unbounded {
  std::size_t operator()(const boost::system::error_code& e, std::size_t) const noexcept {
    return e ? 0 : std::size_t(1) << 30;
  }
};

// The connection of a link on the data path (the I/O thread's): the socket, or the TLS stream
// that owns its own socket.
class link_stream {
 public:
  explicit link_stream(asio::io_context& io) : sock_(io) {}

  // The TCP socket (under the TLS stream when there is one).
  asio::ip::tcp::socket& socket() {
#if PACO_WITH_TLS
    if (tls_) return tls_->next_layer();
#endif
    return sock_;
  }
  // Do bytes go through TLS? (Then no syscall may touch the socket's bytes directly.)
  bool is_tls() const {
#if PACO_WITH_TLS
    return tls_ != nullptr;
#else
    return false;
#endif
  }

  // Writes / reads a whole buffer sequence on the socket or TLS stream. Requires: I/O thread.
  template <class Buffers, class Handler>
  void async_write(const Buffers& b, Handler&& h) {
    on_stream([&](auto& s, auto all) { asio::async_write(s, b, all, std::forward<Handler>(h)); });
  }
  template <class Buffers, class Handler>
  void async_read(const Buffers& b, Handler&& h) {
    on_stream([&](auto& s, auto all) { asio::async_read(s, b, all, std::forward<Handler>(h)); });
  }

  // Takes over the rendezvous' connection c, its socket tuned to buffer_bytes (tune_socket).
  // Ensures: ok, or io when the descriptor cannot be adopted (it is closed then).
  status adopt(rv_conn& c, int buffer_bytes) {
#if PACO_WITH_TLS
    if (c.tls) {
      tls_ = std::move(c.tls);
      tune_socket(tls_->next_layer().native_handle(), buffer_bytes);
    }
#endif
    if (c.fd.get() >= 0) {
      int fd = c.fd.release();
      tune_socket(fd, buffer_bytes);
      boost::system::error_code ec;
      sock_.assign(asio::ip::tcp::v4(), fd, ec);
      if (ec) {
        ::close(fd);
        return paco::error{errc::io, "asio_tcp: adopting socket: " + ec.message()};
      }
    }
    return {};
  }

 private:
  // f(the TLS stream or the socket, the completion condition of a whole transfer on it: asio's
  // transfer_all through TLS, transfer_all_unbounded on the plain socket).
  template <class F>
  void on_stream(F&& f) {
#if PACO_WITH_TLS
    if (tls_) return f(*tls_, asio::transfer_all());
#endif
    f(sock_, transfer_all_unbounded{});
  }

  asio::ip::tcp::socket sock_;  // the connection (unused when tls_ is set)
#if PACO_WITH_TLS
  std::unique_ptr<tls_stream> tls_;  // the connection when TLS is on (owns its socket)
#endif
};

}  // namespace paco::net::detail
