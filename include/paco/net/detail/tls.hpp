#pragma once
// TLS of asio_tcp (included only when PACO_WITH_TLS; links OpenSSL): the context of a group
// member built from tls_options, the deadline-bounded TLS handshake and byte channel of the
// rendezvous, and the mapping of TLS failures to paco::errc with OpenSSL's reason as text.

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/asio/ssl/error.hpp>
#include <boost/asio/ssl/stream.hpp>
#include <boost/asio/write.hpp>

#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509_vfy.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>

#include "paco/core/error.hpp"
#include "paco/net/concepts.hpp"
#include "paco/net/detail/rendezvous.hpp"
#include "paco/net/tls_options.hpp"

namespace paco::net::detail {

namespace ssl = boost::asio::ssl;
using tls_stream = ssl::stream<boost::asio::ip::tcp::socket>;

// OpenSSL's queued error reasons, oldest first, "; "-separated. Ensures: the queue is empty.
inline std::string openssl_errors() {
  std::string s;
  while (unsigned long e = ::ERR_get_error()) {
    const char* r = ::ERR_reason_error_string(e);
    char buf[256];
    if (!r) {
      ::ERR_error_string_n(e, buf, sizeof buf);
      r = buf;
    }
    s += (s.empty() ? "" : "; ") + std::string(r);
  }
  return s.empty() ? "no OpenSSL reason" : s;
}

// Closes a FILE (the deleter of file_ptr).
struct file_closer {
  void operator()(std::FILE* f) const { std::fclose(f); }
};
using file_ptr = std::unique_ptr<std::FILE, file_closer>;

// Opens a tls_options file, naming the field and path on failure.
// Ensures: errc::invalid_argument (empty), not_found (missing) or io (unreadable).
inline result<file_ptr> open_tls_file(const char* field, const std::string& path) {
  const std::string f = std::string("tcp_options.tls.") + field;
  if (path.empty()) return {errc::invalid_argument, f + ": must name a PEM file when tls.enabled"};
  std::FILE* p = std::fopen(path.c_str(), "rb");
  if (!p) {
    int e = errno;
    return {e == ENOENT ? errc::not_found : errc::io,
            f + ": cannot read '" + path + "': " + std::strerror(e)};
  }
  return file_ptr(p);
}

// The TLS context of a group member: TLS 1.3 only, our certificate chain and key, ca_file as
// the only trust anchors, a peer certificate required in both directions, no session tickets,
// keys never prompted for a passphrase.
// Ensures: a context, or an error naming the field and file: not_found / io (cannot read),
// invalid_argument (not PEM, encrypted key, key not matching the certificate, certificate
// not chaining to ca_file, with OpenSSL's and X509's reasons).
inline result<std::shared_ptr<ssl::context>> make_tls_context(const tls_options& t) {
  using ctx_result = result<std::shared_ptr<ssl::context>>;
  for (auto [field, path] : {std::pair{"ca_file", &t.ca_file}, std::pair{"cert_file", &t.cert_file},
                             std::pair{"key_file", &t.key_file}})
    if (auto f = open_tls_file(field, *path); !f) return f.error();
  std::shared_ptr<ssl::context> c;
  try {
    c = std::make_shared<ssl::context>(ssl::context::tls);
  } catch (const std::exception& e) {
    return ctx_result{errc::io, std::string("TLS: creating the OpenSSL context: ") + e.what()};
  }
  SSL_CTX* x = c->native_handle();
  ::ERR_clear_error();
  auto bad = [&](std::string m) {
    return ctx_result{errc::invalid_argument, m + ": " + openssl_errors()};
  };
  if (::SSL_CTX_set_min_proto_version(x, TLS1_3_VERSION) != 1)
    return bad("TLS: this OpenSSL cannot do TLS 1.3");
  ::SSL_CTX_set_options(x, SSL_OP_NO_COMPRESSION);
  ::SSL_CTX_set_num_tickets(x, 0);  // links are never resumed
  ::SSL_CTX_set_default_passwd_cb(x, [](char*, int, int, void*) { return 0; });
  if (::SSL_CTX_load_verify_locations(x, t.ca_file.c_str(), nullptr) != 1)
    return bad("tcp_options.tls.ca_file '" + t.ca_file + "': no PEM CA certificate loaded");
  if (::SSL_CTX_use_certificate_chain_file(x, t.cert_file.c_str()) != 1)
    return bad("tcp_options.tls.cert_file '" + t.cert_file + "': no PEM certificate loaded");
  auto kf = open_tls_file("key_file", t.key_file);
  if (!kf) return kf.error();
  EVP_PKEY* key = ::PEM_read_PrivateKey(
      kf.value().get(), nullptr, [](char*, int, int, void*) { return 0; }, nullptr);
  if (!key)
    return bad("tcp_options.tls.key_file '" + t.key_file +
               "': no PEM private key loaded (an encrypted key is refused: paco never prompts)");
  std::unique_ptr<EVP_PKEY, void (*)(EVP_PKEY*)> key_owner(key, &::EVP_PKEY_free);
  X509* leaf = ::SSL_CTX_get0_certificate(x);
  if (::X509_check_private_key(leaf, key) != 1)
    return bad("tcp_options.tls.key_file '" + t.key_file + "' does not match tls.cert_file '" +
               t.cert_file + "'");
  if (::SSL_CTX_use_PrivateKey(x, key) != 1)
    return bad("tcp_options.tls.key_file '" + t.key_file + "'");
  // Our own certificate must chain to the CA, else every peer refuses us: say so here.
  STACK_OF(X509)* chain = nullptr;
  ::SSL_CTX_get0_chain_certs(x, &chain);
  std::unique_ptr<X509_STORE_CTX, void (*)(X509_STORE_CTX*)> v(::X509_STORE_CTX_new(),
                                                               &::X509_STORE_CTX_free);
  if (!v || ::X509_STORE_CTX_init(v.get(), ::SSL_CTX_get_cert_store(x), leaf, chain) != 1)
    return bad("TLS: checking tls.cert_file");
  if (::X509_verify_cert(v.get()) != 1) {
    ::ERR_clear_error();
    return ctx_result{errc::invalid_argument,
                      "tcp_options.tls.cert_file '" + t.cert_file +
                          "' does not chain to tls.ca_file '" + t.ca_file + "': " +
                          ::X509_verify_cert_error_string(::X509_STORE_CTX_get_error(v.get()))};
  }
  c->set_verify_mode(ssl::verify_peer | ssl::verify_fail_if_no_peer_cert);
  return c;
}

// Wraps the connected descriptor fd in a TLS stream on io (the stream owns fd from here on,
// also on failure). peer_name non-empty: the peer's certificate must name it.
inline result<std::unique_ptr<tls_stream>> tls_wrap(boost::asio::io_context& io, ssl::context& ctx,
                                                    int fd, const std::string& peer_name) {
  std::unique_ptr<tls_stream> s;
  try {
    s = std::make_unique<tls_stream>(io, ctx);
  } catch (const std::exception& e) {
    ::close(fd);
    return {errc::io, std::string("TLS: creating a stream: ") + e.what()};
  }
  boost::system::error_code ec;
  s->next_layer().assign(boost::asio::ip::tcp::v4(), fd, ec);
  if (ec) {
    ::close(fd);
    return {errc::io, "TLS: adopting socket: " + ec.message()};
  }
  if (!peer_name.empty() && ::SSL_set1_host(s->native_handle(), peer_name.c_str()) != 1)
    return {errc::invalid_argument,
            "tcp_options.tls.peer_name '" + peer_name + "': " + openssl_errors()};
  return s;
}

// Does the peer on fd open with a paco frame, i.e. without TLS? Waits for its first bytes
// until d and peeks at them (nothing is consumed).
inline bool greets_without_tls(int fd, deadline d) {
  if (poll_until(fd, POLLIN, d)) return false;
  std::uint32_t m = 0;
  return ::recv(fd, &m, sizeof m, MSG_PEEK | MSG_DONTWAIT) == sizeof m && m == wire::magic;
}

// The paco error of a failed operation on a TLS stream; `why` gets the text. OpenSSL failures
// (certificate refused either way, alerts, not TLS) -> auth with OpenSSL's reason and, when
// this side refused the certificate, X509's; aborted -> timeout; closed or reset -> peer_lost.
inline std::error_code tls_error(const boost::system::error_code& e, tls_stream& s,
                                 std::string& why) {
  if (e.category() == boost::asio::error::get_ssl_category()) {
    why = "TLS: " + e.message();
    long v = ::SSL_get_verify_result(s.native_handle());
    if (v != X509_V_OK) why += std::string(": ") + ::X509_verify_cert_error_string(v);
    if (ERR_GET_REASON(static_cast<unsigned long>(e.value())) == SSL_R_WRONG_VERSION_NUMBER)
      why += " (the peer does not speak TLS: is tcp_options.tls the same on every rank?)";
    ::ERR_clear_error();
    return errc::auth;
  }
  why = "TLS: " + e.message();
  if (e == boost::asio::error::operation_aborted) return errc::timeout;
  return errc::peer_lost;
}

// The rendezvous' byte channel over a TLS stream: blocking, bounded by a deadline; runs io
// on the calling thread (before the transport's I/O thread starts). `why`: text of the last
// failure (OpenSSL's reason), for the caller's error message.
struct tls_channel {
  boost::asio::io_context& io;
  tls_stream& s;
  std::string why;

  // TLS handshake as client or server. Ensures: {} or tls_error's code; timeout at d.
  std::error_code handshake(ssl::stream_base::handshake_type k, deadline d) {
    return run(d, [&](auto h) { s.async_handshake(k, std::move(h)); });
  }
  std::error_code write(const void* p, std::size_t n, deadline d) {
    return run(
        d, [&](auto h) { boost::asio::async_write(s, boost::asio::buffer(p, n), std::move(h)); });
  }
  std::error_code read(void* p, std::size_t n, deadline d) {
    return run(
        d, [&](auto h) { boost::asio::async_read(s, boost::asio::buffer(p, n), std::move(h)); });
  }

 private:
  // Starts one operation and runs io until it completed or d passed (then closes the socket,
  // which completes it).
  template <class Start>
  std::error_code run(deadline d, Start start) {
    boost::system::error_code r;
    bool done = false;
    start([&](const boost::system::error_code& e, auto&&...) {
      r = e;
      done = true;
    });
    io.restart();
    while (!done && io.run_one_until(d)) {
    }
    if (!done) {
      boost::system::error_code ig;
      s.lowest_layer().close(ig);
      io.restart();
      while (!done && io.run_one()) {
      }
      why = "TLS: no answer by the deadline";
      return errc::timeout;
    }
    return r ? tls_error(r, s, why) : std::error_code{};
  }
};
static_assert(rendezvous_channel<tls_channel>);

}  // namespace paco::net::detail
