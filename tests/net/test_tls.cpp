// asio_tcp over TLS: bad files refused at connect() naming field and file; a certificate of
// another CA refused in either direction while the group's members connect; the token still
// checked inside TLS; TLS and plain peers refusing each other; peer_name; the openssl recipe
// of docs/transport.md. (The conformance suite over TLS is tls_world in test_conformance.cpp.)
#include <catch2/catch.hpp>

#if defined(PACO_TEST_ASIO) && PACO_WITH_TLS

#include <stdlib.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <future>
#include <sstream>
#include <string>
#include <vector>

#include "tls_world.hpp"

namespace {

using namespace paco;
using namespace std::chrono_literals;
using endpoint = result<std::unique_ptr<net::asio_tcp>>;

bool has(const std::string& s, const std::string& w) {
  return s.find(w) != std::string::npos;
}

std::future<endpoint> connect_async(net::tcp_options o) {
  return std::async(std::launch::async, [o] { return net::asio_tcp::connect(o); });
}

// Ranks 0 and 1 swap one message each way. Ensures: "" or what failed.
std::string swap_one(net::asio_tcp& t) {
  int o = 1 - t.rank();
  std::vector<int> x(1000, t.rank()), y(1000, -1);
  auto s = t.send(o, 5, net::as_bytes(std::span<const int>(x)), net::after(5s));
  auto r = t.recv(o, 5, net::as_writable_bytes(std::span<int>(y)), net::after(5s));
  if (auto ec = r.wait()) return "recv: " + ec.message();
  if (auto ec = s.wait()) return "send: " + ec.message();
  return y[0] == o && y[999] == o ? "" : "wrong payload";
}

net::tcp_options member(int rank, int port, std::chrono::milliseconds timeout = 5000ms) {
  auto o = testing::tls_loopback_options(rank, 2, port);
  o.connect_timeout = timeout;
  return o;
}

}  // namespace

TEST_CASE("asio_tcp TLS: bad files are refused at connect(), naming the field and file",
          "[net][tls]") {
  const auto& d = testing::tls_pki_dir();
  auto expect = [&](net::tls_options tls, errc code, std::vector<std::string> words) {
    auto o = member(1, testing::free_port(), 2000ms);
    o.tls = tls;
    auto t0 = net::clock::now();
    auto r = net::asio_tcp::connect(o);
    REQUIRE(!r);
    INFO(r.error().what());
    CHECK(r.error().code == code);
    for (auto& w : words) CHECK(has(r.error().message, w));
    CHECK(net::clock::now() - t0 < 1s);      // checked before any network step
    auto c = net::asio_tcp::check_tls(tls);  // the same verdict without connecting
    REQUIRE(!c);
    CHECK(c.error().code == code);
    CHECK(c.error().message == r.error().message);
  };
  const auto m = testing::tls_member(0);
  CHECK(net::asio_tcp::check_tls(m));                   // good files
  CHECK(net::asio_tcp::check_tls(net::tls_options{}));  // TLS off: nothing to check
  auto with = [&](auto change) {
    auto t = m;
    change(t);
    return t;
  };
  expect(with([&](auto& t) { t.key_file = d + "/missing.key"; }), errc::not_found,
         {"tcp_options.tls.key_file", "missing.key", "No such file"});
  expect(with([&](auto& t) { t.ca_file = d + "/missing_ca.pem"; }), errc::not_found,
         {"tcp_options.tls.ca_file", "missing_ca.pem"});
  expect(with([&](auto& t) { t.cert_file.clear(); }), errc::invalid_argument,
         {"tcp_options.tls.cert_file", "must name"});
  expect(with([&](auto& t) { t.key_file = d + "/node1.key"; }), errc::invalid_argument,
         {"tls.key_file", "node1.key", "does not match", "node0.pem"});
  expect(with([&](auto& t) { t.key_file = d + "/node0_enc.key"; }), errc::invalid_argument,
         {"tls.key_file", "node0_enc.key", "encrypted"});
  expect(with([&](auto& t) { t.key_file = d + "/node0.pem"; }), errc::invalid_argument,
         {"tls.key_file", "node0.pem"});
  expect(with([&](auto& t) { t.ca_file = d + "/node0.key"; }), errc::invalid_argument,
         {"tls.ca_file", "node0.key"});
  expect(with([&](auto& t) {
           t.cert_file = d + "/rogue.pem";
           t.key_file = d + "/rogue.key";
         }),
         errc::invalid_argument, {"tls.cert_file", "rogue.pem", "does not chain", "ca.pem"});
}

TEST_CASE("asio_tcp TLS: a member certificate of another CA is refused; the group connects",
          "[net][tls]") {
  const auto& d = testing::tls_pki_dir();
  int port = testing::free_port();
  auto rank0 = connect_async(member(0, port));
  // The impostor trusts the group's CA but presents a certificate of another CA.
  auto oi = member(1, port, 4000ms);
  oi.tls.ca_file = d + "/both_ca.pem";
  oi.tls.cert_file = d + "/rogue.pem";
  oi.tls.key_file = d + "/rogue.key";
  auto t0 = net::clock::now();
  auto imp = net::asio_tcp::connect(oi);
  REQUIRE(!imp);
  INFO("impostor: " << imp.error().what());
  std::printf("[tls] impostor refused: %s\n", imp.error().what().c_str());
  CHECK(imp.error().code == errc::auth);
  CHECK(has(imp.error().message, "TLS"));
  CHECK(net::clock::now() - t0 < 3s);  // refused, not timed out
  // The member that belongs connects to the same rank 0.
  auto r1 = net::asio_tcp::connect(member(1, port));
  auto r0 = rank0.get();
  REQUIRE(r0);
  REQUIRE(r1);
  auto e0 = std::async(std::launch::async, [&] { return swap_one(*r0.value()); });
  CHECK(swap_one(*r1.value()) == "");
  CHECK(e0.get() == "");
}

TEST_CASE("asio_tcp TLS: a coordinator with a certificate of another CA is refused", "[net][tls]") {
  const auto& d = testing::tls_pki_dir();
  int port = testing::free_port();
  auto o0 = member(0, port, 1500ms);
  o0.tls.ca_file = d + "/both_ca.pem";
  o0.tls.cert_file = d + "/rogue.pem";
  o0.tls.key_file = d + "/rogue.key";
  auto rank0 = connect_async(o0);
  auto t0 = net::clock::now();
  auto r1 = net::asio_tcp::connect(member(1, port));
  REQUIRE(!r1);
  INFO("rank 1: " << r1.error().what());
  std::printf("[tls] rank 1 refuses the coordinator: %s\n", r1.error().what().c_str());
  CHECK(r1.error().code == errc::auth);
  CHECK(has(r1.error().message, "certificate verify failed"));
  CHECK(net::clock::now() - t0 < 3s);
  auto r0 = rank0.get();  // nobody acceptable came: its deadline, naming the refusal
  REQUIRE(!r0);
  INFO("rank 0: " << r0.error().what());
  CHECK(r0.error().code == errc::timeout);
  CHECK(has(r0.error().message, "TLS"));
}

TEST_CASE("asio_tcp TLS: the token is still checked inside TLS", "[net][tls]") {
  int port = testing::free_port();
  auto rank0 = connect_async(member(0, port, 1500ms));
  auto o1 = member(1, port);
  o1.token = "another-token";
  auto r1 = net::asio_tcp::connect(o1);
  REQUIRE(!r1);
  INFO(r1.error().what());
  CHECK(r1.error().code == errc::auth);
  CHECK(has(r1.error().message, "token"));
  CHECK(!rank0.get());
}

TEST_CASE("asio_tcp TLS: TLS and plain peers refuse each other by their deadlines", "[net][tls]") {
  for (bool tls_server : {true, false}) {
    int port = testing::free_port();
    auto o0 = member(0, port, 1500ms), o1 = member(1, port, 3000ms);
    (tls_server ? o1 : o0).tls = {};
    auto rank0 = connect_async(o0);
    auto t0 = net::clock::now();
    auto r1 = net::asio_tcp::connect(o1);
    REQUIRE(!r1);
    INFO("TLS on rank " << (tls_server ? 0 : 1) << "; rank 1: " << r1.error().what());
    std::printf("[tls] TLS only on rank %d; rank 1: %s\n", tls_server ? 0 : 1,
                r1.error().what().c_str());
    CHECK(r1.error().code == errc::auth);
    CHECK(net::clock::now() - t0 < 2s);
    auto r0 = rank0.get();
    INFO("rank 0: " << (r0 ? std::string("connected") : r0.error().what()));
    CHECK(!r0);
  }
}

TEST_CASE("asio_tcp TLS: peer_name must be named by the peer's certificate", "[net][tls]") {
  for (std::string name : {"paco-node", "paco-other"}) {
    const bool good = name == "paco-node";
    int port = testing::free_port();
    auto o0 = member(0, port, good ? 5000ms : 1500ms), o1 = member(1, port);
    o0.tls.peer_name = o1.tls.peer_name = name;
    auto rank0 = connect_async(o0);
    auto r1 = net::asio_tcp::connect(o1);
    auto r0 = rank0.get();
    INFO(name << ": rank 1 " << (r1 ? std::string("connected") : r1.error().what()));
    if (good) {
      REQUIRE(r0);
      REQUIRE(r1);
      auto e0 = std::async(std::launch::async, [&] { return swap_one(*r0.value()); });
      CHECK(swap_one(*r1.value()) == "");
      CHECK(e0.get() == "");
    } else {
      REQUIRE(!r1);
      CHECK(r1.error().code == errc::auth);
      CHECK(has(r1.error().message, "hostname mismatch"));
      CHECK(!r0);
    }
  }
}

TEST_CASE("asio_tcp TLS: certificates from the openssl recipe of docs/transport.md work",
          "[net][tls]") {
  if (std::system("openssl version > /dev/null 2>&1") != 0) {
    std::printf("[tls] SKIPPED: no openssl command on PATH\n");
    WARN("skipped: no openssl command on PATH");
    return;
  }
  // The recipe is the ```sh block of docs/transport.md that starts with "# paco TLS recipe".
  std::ifstream doc(std::string(PACO_SOURCE_DIR) + "/docs/transport.md");
  std::string line, script;
  bool in = false, found = false;
  while (std::getline(doc, line)) {
    if (!in && line == "```sh") {
      in = true;
      script.clear();
    } else if (in && line == "```") {
      in = false;
      if (found) break;
    } else if (in) {
      if (script.empty() && line.rfind("# paco TLS recipe", 0) == 0) found = true;
      script += line + "\n";
    }
  }
  REQUIRE(found);
  char t[] = "/tmp/paco_tls_recipe_XXXXXX";
  REQUIRE(mkdtemp(t));
  std::string dir = t;
  std::ofstream(dir + "/recipe.sh") << script;
  int rc = std::system(("cd " + dir + " && sh -e recipe.sh > recipe.log 2>&1").c_str());
  std::stringstream log;
  log << std::ifstream(dir + "/recipe.log").rdbuf();
  INFO("recipe output:\n" << log.str());
  REQUIRE(rc == 0);
  int port = testing::free_port();
  auto opts = [&](int r) {
    auto o = member(r, port);
    std::string n = dir + "/node" + std::to_string(r);
    o.tls = {.enabled = true,
             .ca_file = dir + "/ca.pem",
             .cert_file = n + ".pem",
             .key_file = n + ".key"};
    return o;
  };
  auto rank0 = connect_async(opts(0));
  auto r1 = net::asio_tcp::connect(opts(1));
  auto r0 = rank0.get();
  INFO("rank 0: " << (r0 ? std::string("ok") : r0.error().what()));
  INFO("rank 1: " << (r1 ? std::string("ok") : r1.error().what()));
  REQUIRE(r0);
  REQUIRE(r1);
  auto e0 = std::async(std::launch::async, [&] { return swap_one(*r0.value()); });
  CHECK(swap_one(*r1.value()) == "");
  CHECK(e0.get() == "");
}

#elif defined(PACO_TEST_ASIO)  // a build with -DPACO_WITH_TLS=OFF

#include "tcp_world.hpp"

TEST_CASE("asio_tcp without TLS support: tls.enabled is refused as unsupported", "[net][tls]") {
  auto o = paco::testing::loopback_options(0, 2, paco::testing::free_port());
  o.tls.enabled = true;
  auto r = paco::net::asio_tcp::connect(o);
  REQUIRE(!r);
  INFO(r.error().what());
  CHECK(r.error().code == paco::errc::unsupported);
  CHECK(r.error().message.find("tcp_options.tls.enabled") != std::string::npos);
}

#endif  // PACO_TEST_ASIO && PACO_WITH_TLS
