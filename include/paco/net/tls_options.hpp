#pragma once
// tls_options: TLS of asio_tcp's links, mutual certificates from one group CA. Plain data, so
// it is usable in every build; the TLS code itself (detail/tls.hpp, OpenSSL) is compiled only
// when PACO_WITH_TLS is set, and connect() refuses tls.enabled otherwise (errc::unsupported).

#include <string>

namespace paco::net {

// TLS of every link of a group. Defaults: off. When enabled, each member presents cert_file
// and accepts only peers whose certificate chains to ca_file (both directions: TLS 1.3,
// verify_peer | verify_fail_if_no_peer_cert). The token handshake still runs inside TLS.
// Requires (checked by connect()): the three files readable PEM, key_file unencrypted and
// matching cert_file, cert_file chaining to ca_file.
struct tls_options {
  bool enabled = false;   // TLS 1.3 on every link, the rendezvous included
  std::string ca_file;    // PEM: the group's CA certificate(s), the only trust anchors
  std::string cert_file;  // PEM: this member's certificate, then any intermediates
  std::string key_file;   // PEM: its private key, unencrypted (protect it by file mode)
  std::string peer_name;  // non-empty: a peer's certificate must name this DNS name (SAN/CN)
};

}  // namespace paco::net
