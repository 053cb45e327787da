#pragma once
// is_loopback_host: whether a host name or address names this machine's loopback interface
// ("localhost", 127.0.0.0/8, ::1, ::ffff:127.x.y.z), read from its text alone (nothing is
// resolved), so a process can keep what it serves off the network when its run is local.

#include <arpa/inet.h>
#include <netinet/in.h>

#include <cstring>
#include <string>

namespace paco::net {

// Ensures: true for "localhost" and "localhost." (any case), an IPv4 address in 127.0.0.0/8,
// "::1" (with or without brackets) and an IPv4-mapped 127.x.y.z; false for anything else.
inline bool is_loopback_host(std::string host) {
  if (host.size() > 2 && host.front() == '[' && host.back() == ']')
    host = host.substr(1, host.size() - 2);
  std::string lower = host;
  for (char& c : lower)
    if (c >= 'A' && c <= 'Z') c = char(c - 'A' + 'a');
  if (lower == "localhost" || lower == "localhost.") return true;
  in_addr v4{};
  if (::inet_pton(AF_INET, host.c_str(), &v4) == 1) return (ntohl(v4.s_addr) >> 24) == 127;
  in6_addr v6{};
  if (::inet_pton(AF_INET6, host.c_str(), &v6) != 1) return false;
  static constexpr unsigned char one[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
  static constexpr unsigned char mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  if (std::memcmp(v6.s6_addr, one, 16) == 0) return true;
  return std::memcmp(v6.s6_addr, mapped, 12) == 0 && v6.s6_addr[12] == 127;
}

}  // namespace paco::net
