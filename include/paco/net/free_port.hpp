#pragma once
// free_loopback_port: a TCP port on 127.0.0.1 that the OS reported free a moment ago (for
// launching local process groups and tests; another process may still take it before use).
// port_available: whether a listener could bind host:port now (a launcher checks every port a job
// will listen on before any work starts).

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <string>

#include "paco/core/error.hpp"
#include "paco/net/detail/rendezvous.hpp"

namespace paco::net {

// Ensures: a port number in the ephemeral range, or -1 if no socket could be bound.
inline int free_loopback_port() {
  int s = ::socket(AF_INET, SOCK_STREAM, 0);
  if (s < 0) return -1;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  const bool ok = ::bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
                  ::getsockname(s, reinterpret_cast<sockaddr*>(&a), &len) == 0;
  ::close(s);
  return ok ? ntohs(a.sin_port) : -1;
}

// Whether a TCP listener could bind `host`:`port` now, as paco's listeners bind (SO_REUSEADDR).
// Ensures: nothing stays bound. Errors: invalid_argument for a port outside 1 … 65535 or a host
// that does not resolve; io naming host:port and the system's reason ("Address already in use").
inline status port_available(const std::string& host, int port) {
  if (port < 1 || port > 65535)
    return {errc::invalid_argument, "port " + std::to_string(port) + " is outside 1 … 65535"};
  auto a = detail::resolve_ipv4(host + ":" + std::to_string(port));
  if (!a) return a.error();
  detail::fd_owner s(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (s.get() < 0) return {errc::io, "socket(): " + detail::errno_text(errno)};
  int one = 1;
  ::setsockopt(s.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in at = a.value();
  if (::bind(s.get(), reinterpret_cast<sockaddr*>(&at), sizeof at) != 0 ||
      ::listen(s.get(), 1) != 0)
    return {errc::io, host + ":" + std::to_string(port) + ": " + detail::errno_text(errno)};
  return {};
}

}  // namespace paco::net
