#pragma once
// free_loopback_port: a TCP port on 127.0.0.1 that the OS reported free a moment ago (for
// launching local process groups and tests; another process may still take it before use).

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

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

}  // namespace paco::net
