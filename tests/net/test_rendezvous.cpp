// The coordinator rendezvous of a fixed-size group: a rank started twice stops the group, and
// every process taking part (the coordinator, the admitted member, the second claimant) gets an
// error naming the rank and both addresses.
#include <catch2/catch.hpp>

#include <cstring>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "paco/net/detail/handshake_mac.hpp"
#include "paco/net/wire.hpp"
#include "tcp_world.hpp"

using namespace paco;
using namespace std::chrono_literals;

TEST_CASE("asio_tcp rendezvous: a rank started twice stops every process of the group",
          "[net][rendezvous]") {
  const int port = testing::free_port();
  // A group of 3: the coordinator, rank 1 twice, rank 2 never (so the group cannot form before
  // the second rank 1 arrives).
  std::vector<std::string> err(3);
  std::vector<std::error_code> code(3);
  std::vector<std::thread> th;
  for (int i = 0; i < 3; ++i)
    th.emplace_back([&, i] {
      if (i == 2) std::this_thread::sleep_for(300ms);  // the second rank 1, once the first is in
      auto o = testing::loopback_options(i == 0 ? 0 : 1, 3, port);
      o.connect_timeout = 10s;
      auto t = net::asio_tcp::connect(o);
      if (!t) {
        err[std::size_t(i)] = t.error().message;
        code[std::size_t(i)] = t.error().code;
      }
    });
  for (auto& t : th) t.join();
  INFO("coordinator: " << err[0] << "\nrank 1: " << err[1] << "\nrank 1 again: " << err[2]);
  for (int i = 0; i < 3; ++i) {
    REQUIRE(code[std::size_t(i)] == errc::mismatch);
    REQUIRE(err[std::size_t(i)].find("rank 1 was started twice (from 127.0.0.1:") !=
            std::string::npos);
  }
  REQUIRE(err[1].find("the coordinator stopped the group") != std::string::npos);
}

namespace {

std::string hex(const paco::net::detail::digest256& d) {
  static const char* digits = "0123456789abcdef";
  std::string h;
  for (auto b : d) h += digits[b >> 4], h += digits[b & 15];
  return h;
}

paco::net::detail::digest256 hmac(const std::string& key, const std::string& msg) {
  return paco::net::detail::hmac_sha256(key, {std::as_bytes(std::span(msg.data(), msg.size()))});
}

}  // namespace

TEST_CASE("handshake_mac: HMAC-SHA-256 gives RFC 4231's digests", "[net][wire]") {
  // Test cases 1, 2 and 6 of RFC 4231 (section 4): a 20-byte key, a short one, and a 131-byte
  // key (longer than a block: hashed first).
  CHECK(hex(hmac(std::string(20, '\x0b'), "Hi There")) ==
        "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
  CHECK(hex(hmac("Jefe", "what do ya want for nothing?")) ==
        "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
  CHECK(hex(hmac(std::string(131, '\xaa'),
                 "Test Using Larger Than Block-Size Key - Hash Key First")) ==
        "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
  // The parts are one message.
  const std::string a = "what do ya ", b = "want for nothing?";
  CHECK(paco::net::detail::hmac_sha256("Jefe", {std::as_bytes(std::span(a.data(), a.size())),
                                                std::as_bytes(std::span(b.data(), b.size()))}) ==
        hmac("Jefe", a + b));
}

TEST_CASE("handshake_mac: the handshake refuses a peer without the token", "[net][wire]") {
  namespace wire = paco::net::wire;
  auto c = wire::make_hello(1, 2, 5, 0);
  auto s = wire::make_hello(0, 2, 5, 0);
  auto ms = wire::server_mac("secret", c, s);
  std::memcpy(s.mac, ms.data(), 32);
  REQUIRE(!wire::verify_server("secret", c, s));
  REQUIRE(wire::verify_server("other", c, s) == errc::auth);
  wire::auth_body a{};
  auto mc = wire::client_mac("secret", c, s);
  std::memcpy(a.mac, mc.data(), 32);
  REQUIRE(!wire::verify_client("secret", c, s, a));
  auto mw = wire::client_mac("wrong", c, s);
  std::memcpy(a.mac, mw.data(), 32);
  REQUIRE(wire::verify_client("secret", c, s, a) == errc::auth);
}
