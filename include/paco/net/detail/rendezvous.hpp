#pragma once
// Blocking POSIX socket steps of asio_tcp's rendezvous (listen, connect with backoff, framed
// handshake), each bounded by a deadline through poll(2). The connected descriptors are then
// handed to Asio for the data path. Frames and the handshake run over a rendezvous channel:
// a plain descriptor (fd_channel) or, with TLS, a TLS stream (tls_channel in detail/tls.hpp).

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <concepts>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "paco/core/error.hpp"
#include "paco/net/concepts.hpp"
#include "paco/net/detail/handshake_mac.hpp"
#include "paco/net/wire.hpp"

namespace paco::net::detail {

// Owns a file descriptor. Ensures: closed on destruction unless released.
class fd_owner {
 public:
  fd_owner() = default;
  explicit fd_owner(int fd) : fd_(fd) {}
  fd_owner(fd_owner&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  fd_owner& operator=(fd_owner&& o) noexcept {
    if (this != &o) {
      reset();
      fd_ = std::exchange(o.fd_, -1);
    }
    return *this;
  }
  ~fd_owner() { reset(); }
  int get() const noexcept { return fd_; }
  int release() noexcept { return std::exchange(fd_, -1); }
  void reset() noexcept {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
};

inline std::string errno_text(int e) {
  return std::strerror(e);
}

// "host:port" -> IPv4 address. Ensures: errc::invalid_argument naming the text on failure.
inline result<sockaddr_in> resolve_ipv4(const std::string& hostport) {
  auto colon = hostport.rfind(':');
  if (colon == std::string::npos || colon + 1 >= hostport.size())
    return {errc::invalid_argument, "address '" + hostport + "': expected host:port"};
  std::string host = hostport.substr(0, colon), port = hostport.substr(colon + 1);
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (int rc = ::getaddrinfo(host.c_str(), port.c_str(), &hints, &res); rc != 0 || !res)
    return {errc::invalid_argument,
            "address '" + hostport + "': cannot resolve (" + gai_strerror(rc) + ")"};
  sockaddr_in a{};
  std::memcpy(&a, res->ai_addr, sizeof a);
  ::freeaddrinfo(res);
  return a;
}

inline std::string to_string(const sockaddr_in& a) {
  char buf[INET_ADDRSTRLEN] = {};
  ::inet_ntop(AF_INET, &a.sin_addr, buf, sizeof buf);
  return std::string(buf) + ":" + std::to_string(ntohs(a.sin_port));
}

// Waits until fd is ready for `events` or the deadline passes.
inline std::error_code poll_until(int fd, short events, deadline d) {
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(d - clock::now()).count();
    if (left < 0) return errc::timeout;
    pollfd p{fd, events, 0};
    int rc = ::poll(&p, 1, static_cast<int>(std::min<long long>(left + 1, 1000)));
    if (rc > 0) return {};
    if (rc < 0 && errno != EINTR) return {errno, std::generic_category()};
  }
}

inline std::error_code write_all(int fd, const void* data, std::size_t n, deadline d) {
  auto p = static_cast<const char*>(data);
  while (n) {
    ssize_t k = ::send(fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (k > 0) {
      p += k;
      n -= static_cast<std::size_t>(k);
    } else if (k < 0 && (errno == EAGAIN || errno == EINTR)) {
      if (auto ec = poll_until(fd, POLLOUT, d)) return ec;
    } else {
      return errc::peer_lost;
    }
  }
  return {};
}

// Before closing a refused connection: half-closes it, then reads and drops until the peer
// closes or `grace` passes, so that what we sent last (a refuse frame, a TLS alert) reaches
// the peer instead of a reset caused by bytes we never read.
inline void drain_before_close(int fd, std::chrono::milliseconds grace) {
  ::shutdown(fd, SHUT_WR);
  const deadline until = clock::now() + grace;
  char buf[4096];
  for (;;) {
    ssize_t k = ::recv(fd, buf, sizeof buf, MSG_DONTWAIT);
    if (k > 0) continue;
    if (k < 0 && (errno == EAGAIN || errno == EINTR) && !poll_until(fd, POLLIN, until)) continue;
    return;
  }
}

inline std::error_code read_all(int fd, void* data, std::size_t n, deadline d) {
  auto p = static_cast<char*>(data);
  while (n) {
    ssize_t k = ::recv(fd, p, n, MSG_DONTWAIT);
    if (k > 0) {
      p += k;
      n -= static_cast<std::size_t>(k);
    } else if (k == 0) {
      return errc::peer_lost;
    } else if (errno == EAGAIN || errno == EINTR) {
      if (auto ec = poll_until(fd, POLLIN, d)) return ec;
    } else {
      return errc::peer_lost;
    }
  }
  return {};
}

// A blocking byte stream of the rendezvous. Requires of models: write/read move all n bytes
// by the deadline and return {} or the errc (timeout, peer_lost, auth, ...).
template <class C>
concept rendezvous_channel = requires(C& c, const void* out, void* in, std::size_t n, deadline d) {
  { c.write(out, n, d) } -> std::same_as<std::error_code>;
  { c.read(in, n, d) } -> std::same_as<std::error_code>;
};

// A plain connected descriptor as a rendezvous channel.
struct fd_channel {
  int fd = -1;
  std::error_code write(const void* p, std::size_t n, deadline d) { return write_all(fd, p, n, d); }
  std::error_code read(void* p, std::size_t n, deadline d) { return read_all(fd, p, n, d); }
};
static_assert(rendezvous_channel<fd_channel>);

template <rendezvous_channel C>
inline std::error_code send_frame(C& ch, wire::kind k, std::span<const std::byte> payload,
                                  deadline d, std::uint32_t aux = 0) {
  auto h = wire::make_header(k, 0, payload, true, aux);
  if (auto ec = ch.write(&h, sizeof h, d)) return ec;
  return ch.write(payload.data(), payload.size(), d);
}

// Reads one control frame. Ensures: header and payload checked; payload <= max bytes.
template <rendezvous_channel C>
inline std::error_code read_frame(C& ch, wire::frame_header& h, std::vector<std::byte>& payload,
                                  std::size_t max, deadline d) {
  if (auto ec = ch.read(&h, sizeof h, d)) return ec;
  if (auto ec = wire::check_header(h, wire::limits{.max_payload = max})) return ec;
  payload.resize(h.length);
  if (auto ec = ch.read(payload.data(), payload.size(), d)) return ec;
  return wire::check_payload(h, payload);
}

// TCP_NODELAY, and with buffer_bytes > 0 that send and receive buffer (set before connect or
// listen, so that the window scale the handshake agrees on can use it). Above the system's
// net.core.[rw]mem_max a privileged process gets the size asked for (SO_*BUFFORCE); others
// get the system's maximum (the kernel caps it; read it back with socket_buffers()).
inline void tune_socket(int fd, int buffer_bytes) {
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  if (buffer_bytes > 0) {
    if (::setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &buffer_bytes, sizeof buffer_bytes) != 0)
      ::setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &buffer_bytes, sizeof buffer_bytes);
    if (::setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &buffer_bytes, sizeof buffer_bytes) != 0)
      ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &buffer_bytes, sizeof buffer_bytes);
  }
}

// A listening socket on `a` (port 0: the OS picks). Ensures: the bound port in `port`.
inline result<fd_owner> listen_on(sockaddr_in a, int backlog, int buffer_bytes,
                                  std::uint16_t& port) {
  fd_owner s(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (s.get() < 0) return {errc::io, "socket(): " + errno_text(errno)};
  int one = 1;
  ::setsockopt(s.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  tune_socket(s.get(), buffer_bytes);
  if (::bind(s.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) != 0)
    return {errc::io, "bind " + to_string(a) + ": " + errno_text(errno)};
  if (::listen(s.get(), backlog) != 0)
    return {errc::io, "listen " + to_string(a) + ": " + errno_text(errno)};
  socklen_t len = sizeof a;
  ::getsockname(s.get(), reinterpret_cast<sockaddr*>(&a), &len);
  port = ntohs(a.sin_port);
  return s;
}

// Connects to `a`, retrying with exponential backoff (20 ms .. 1 s) until the deadline.
inline result<fd_owner> connect_retry(sockaddr_in a, int buffer_bytes, deadline d) {
  auto backoff = std::chrono::milliseconds(20);
  int last = 0;
  while (clock::now() < d) {
    fd_owner s(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    if (s.get() < 0) return {errc::io, "socket(): " + errno_text(errno)};
    tune_socket(s.get(), buffer_bytes);
    int rc = ::connect(s.get(), reinterpret_cast<sockaddr*>(&a), sizeof a);
    if (rc != 0 && errno == EINPROGRESS) {
      if (!poll_until(s.get(), POLLOUT, d)) {
        int err = 0;
        socklen_t len = sizeof err;
        ::getsockopt(s.get(), SOL_SOCKET, SO_ERROR, &err, &len);
        rc = err ? -1 : 0;
        errno = err;
      }
    }
    if (rc == 0) return s;
    last = errno;
    auto wake = std::min(d, clock::now() + backoff);
    std::this_thread::sleep_until(wake);
    backoff = std::min(backoff * 2, std::chrono::milliseconds(1000));
  }
  return {errc::timeout, "connect to " + to_string(a) + ": no answer by the deadline (last: " +
                             (last ? errno_text(last) : std::string("none")) + ")"};
}

inline result<fd_owner> accept_until(int listener, deadline d, sockaddr_in& peer) {
  for (;;) {
    if (auto ec = poll_until(listener, POLLIN, d))
      return paco::error{ec, "accept: no peer connected by the deadline"};
    socklen_t len = sizeof peer;
    int fd =
        ::accept4(listener, reinterpret_cast<sockaddr*>(&peer), &len, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd >= 0) return fd_owner(fd);
    if (errno != EAGAIN && errno != EINTR && errno != ECONNABORTED)
      return {errc::io, "accept: " + errno_text(errno)};
  }
}

// Client side of the handshake over channel ch with the rank expected to be `want` (-1: any).
// Ensures: the server's hello on success; errc::auth / version / mismatch / ... otherwise.
template <rendezvous_channel C>
inline result<wire::hello_body> client_handshake(C& ch, const wire::hello_body& mine, int want,
                                                 std::string_view token, deadline d) {
  if (auto ec = send_frame(ch, wire::kind::hello, wire::bytes_of(mine), d))
    return paco::error{ec, "handshake: sending hello"};
  wire::frame_header h;
  std::vector<std::byte> p;
  if (auto ec = read_frame(ch, h, p, sizeof(wire::hello_body), d))
    return paco::error{ec, "handshake: reading the server's hello"};
  if (h.kind == static_cast<std::uint8_t>(wire::kind::refuse))
    return {static_cast<errc>(h.aux), "handshake: refused by the server"};
  if (h.kind != static_cast<std::uint8_t>(wire::kind::hello))
    return {errc::protocol, "handshake: expected hello"};
  wire::hello_body s;
  std::memcpy(&s, p.data(), sizeof s);
  const auto group = wire::check_hello(s, static_cast<int>(mine.rank), static_cast<int>(mine.size),
                                       mine.epoch, static_cast<int>(mine.streams));
  const paco::error differs{
      group, "handshake: server's group (size " + std::to_string(s.size) + ", epoch " +
                 std::to_string(s.epoch) + ", " + std::to_string(wire::streams_of(s)) +
                 " stream(s) per link) differs from ours (size " + std::to_string(mine.size) +
                 ", epoch " + std::to_string(mine.epoch) + ", " + std::to_string(mine.streams) +
                 ")"};
  // The same launch (epoch) set up otherwise (size, streams): authenticate first, so the server
  // knows a member of its own launch is misconfigured and stops at once (server_handshake).
  const bool same_launch = group == errc::mismatch && s.epoch == mine.epoch;
  if (group && !same_launch) return differs;
  if (want >= 0 && s.rank != static_cast<std::uint32_t>(want))
    return {errc::protocol,
            "handshake: expected rank " + std::to_string(want) + ", got " + std::to_string(s.rank)};
  if (auto ec = wire::verify_server(token, mine, s))
    return paco::error{ec, "handshake: the server does not hold the token"};
  wire::auth_body a{};
  auto m = wire::client_mac(token, mine, s);
  std::memcpy(a.mac, m.data(), 32);
  if (auto ec = send_frame(ch, wire::kind::auth, wire::bytes_of(a), d))
    return paco::error{ec, "handshake: auth"};
  if (same_launch) return differs;
  if (auto ec = read_frame(ch, h, p, 0, d))
    return paco::error{ec, "handshake: waiting for welcome"};
  if (h.kind == static_cast<std::uint8_t>(wire::kind::refuse))
    return {static_cast<errc>(h.aux), "handshake: refused by the server"};
  if (h.kind != static_cast<std::uint8_t>(wire::kind::welcome))
    return {errc::protocol, "handshake: expected welcome"};
  return s;
}

// Server side. Ensures: the client's hello on success; on failure the client was sent a
// refuse frame carrying the errc. *member_differs (when given) is set when the client holds the
// token and belongs to this launch (its epoch) but was set up with another group size or number
// of streams: a misconfigured member, not a stray process, so the caller need not wait for others.
template <rendezvous_channel C>
inline result<wire::hello_body> server_handshake(C& ch, wire::hello_body mine,
                                                 std::string_view token, deadline d,
                                                 bool* member_differs = nullptr) {
  wire::frame_header h;
  std::vector<std::byte> p;
  auto refuse = [&](std::error_code ec, std::string why) -> result<wire::hello_body> {
    send_frame(ch, wire::kind::refuse, {}, d, static_cast<std::uint32_t>(ec.value()));
    return paco::error{ec, "handshake: " + why};
  };
  if (auto ec = read_frame(ch, h, p, sizeof(wire::hello_body), d)) {
    if (ec == errc::timeout || ec == errc::peer_lost)
      return paco::error{ec, "handshake: reading hello"};
    // The peer spoke, but not this protocol: tell it (a TLS ClientHello opens 0x16 0x03).
    auto b = reinterpret_cast<const std::uint8_t*>(&h);
    if (b[0] == 0x16 && b[1] == 0x03)
      return refuse(errc::auth, "the peer speaks TLS, this rank does not (tcp_options.tls)");
    return refuse(ec, "reading hello");
  }
  if (h.kind != static_cast<std::uint8_t>(wire::kind::hello))
    return refuse(errc::protocol, "expected hello");
  wire::hello_body c;
  std::memcpy(&c, p.data(), sizeof c);
  const auto group = wire::check_hello(c, static_cast<int>(mine.rank), static_cast<int>(mine.size),
                                       mine.epoch, static_cast<int>(mine.streams));
  const std::string differs =
      "client's group (rank " + std::to_string(c.rank) + ", size " + std::to_string(c.size) +
      ", epoch " + std::to_string(c.epoch) + ", " + std::to_string(wire::streams_of(c)) +
      " stream(s) per link) differs from ours (size " + std::to_string(mine.size) + ", epoch " +
      std::to_string(mine.epoch) + ", " + std::to_string(mine.streams) + ")";
  // Another launch (epoch) or a malformed hello is refused now; a member of this launch set up
  // otherwise is authenticated first (client_handshake sends its auth before it stops).
  const bool same_launch = group == errc::mismatch && c.epoch == mine.epoch;
  if (group && !same_launch) return refuse(group, differs);
  auto m = wire::server_mac(token, c, mine);
  std::memcpy(mine.mac, m.data(), 32);
  if (auto ec = send_frame(ch, wire::kind::hello, wire::bytes_of(mine), d))
    return paco::error{ec, "handshake: hello"};
  if (auto ec = read_frame(ch, h, p, sizeof(wire::auth_body), d))
    return paco::error{ec, "handshake: reading auth"};
  if (h.kind != static_cast<std::uint8_t>(wire::kind::auth))
    return refuse(errc::protocol, "expected auth");
  wire::auth_body a;
  std::memcpy(&a, p.data(), sizeof a);
  if (auto ec = wire::verify_client(token, c, mine, a))
    return refuse(ec, "rank " + std::to_string(c.rank) + " does not hold the token");
  if (same_launch) {
    if (member_differs) *member_differs = true;
    return refuse(group, differs);
  }
  if (auto ec = send_frame(ch, wire::kind::welcome, {}, d))
    return paco::error{ec, "handshake: welcome"};
  return c;
}

}  // namespace paco::net::detail
