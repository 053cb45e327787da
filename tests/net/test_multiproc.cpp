// Multi-process tests of asio_tcp on 127.0.0.1: separate processes (posix_spawn of
// paco_net_worker), a clean run, and a rank SIGKILLed in the middle of an all-reduce; both
// again over TLS in builds with PACO_WITH_TLS.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "paco/collectives/collectives.hpp"
#include "tcp_world.hpp"
#if PACO_WITH_TLS
#include "tls_pki.hpp"
#endif

extern char** environ;

namespace {

struct proc {
  pid_t pid = -1;
  std::string out;  // stdout file
};

proc spawn_worker(const std::vector<std::string>& args, const std::string& out) {
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  std::vector<char*> argv;
  std::string exe = PACO_NET_WORKER;
  argv.push_back(exe.data());
  std::vector<std::string> copy = args;
  for (auto& a : copy) argv.push_back(a.data());
  argv.push_back(nullptr);
  proc p;
  p.out = out;
  REQUIRE(posix_spawn(&p.pid, exe.c_str(), &fa, nullptr, argv.data(), environ) == 0);
  posix_spawn_file_actions_destroy(&fa);
  return p;
}

// Waits for pid up to `limit`; kills it after that. Returns the exit status (or -1).
int wait_for(pid_t pid, std::chrono::milliseconds limit) {
  auto until = std::chrono::steady_clock::now() + limit;
  int st = 0;
  while (std::chrono::steady_clock::now() < until) {
    pid_t r = waitpid(pid, &st, WNOHANG);
    if (r == pid) return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  kill(pid, SIGKILL);
  waitpid(pid, &st, 0);
  return -1;
}

std::string slurp(const std::string& f) {
  std::ifstream in(f);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string tmpdir() {
  char t[] = "/tmp/paco_multiproc_XXXXXX";
  return mkdtemp(t);
}

// 4 workers (extra: arguments appended to each), 20 exact all-reduces of 100003 floats.
void clean_run(const std::vector<std::string>& extra) {
  auto dir = tmpdir();
  int port = paco::testing::free_port();
  std::vector<proc> ps;
  for (int r = 0; r < 4; ++r) {
    std::vector<std::string> a{std::to_string(r), "4", std::to_string(port), "100003", "20",
                               "10000",           "0"};
    a.insert(a.end(), extra.begin(), extra.end());
    ps.push_back(spawn_worker(a, dir + "/r" + std::to_string(r)));
  }
  for (int r = 0; r < 4; ++r) {
    int rc = wait_for(ps[r].pid, std::chrono::seconds(60));
    INFO("rank " << r << " output: " << slurp(ps[r].out));
    REQUIRE(rc == 0);
    REQUIRE(slurp(ps[r].out).find("ok 20") != std::string::npos);
  }
}

// 4 workers all-reducing; rank 2 SIGKILLed: the others error within 2x the deadline, then
// regroup as 3.
void sigkill_run(const std::vector<std::string>& extra) {
  auto dir = tmpdir();
  int port = paco::testing::free_port();
  int regroup = paco::testing::free_port();  // rank 0's port for the next group
  const int deadline_ms = 1000;
  std::vector<proc> ps;
  for (int r = 0; r < 4; ++r) {
    std::vector<std::string> a{std::to_string(r),
                               "4",
                               std::to_string(port),
                               "4000000",
                               "100000",
                               std::to_string(deadline_ms),
                               std::to_string(regroup)};
    a.insert(a.end(), extra.begin(), extra.end());
    ps.push_back(spawn_worker(a, dir + "/r" + std::to_string(r)));
  }
  // Wait until all are connected and all-reducing, then kill rank 2.
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  for (int r = 0; r < 4; ++r)
    while (slurp(ps[r].out).find("ready") == std::string::npos &&
           std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  kill(ps[2].pid, SIGKILL);
  wait_for(ps[2].pid, std::chrono::seconds(5));
  for (int r : {0, 1, 3}) {
    int rc = wait_for(ps[r].pid, std::chrono::seconds(30));
    auto out = slurp(ps[r].out);
    INFO("rank " << r << " output: " << out);
    REQUIRE(rc == 0);
    auto e = out.find("error ");
    REQUIRE(e != std::string::npos);
    double ms = std::stod(out.substr(e + 6));
    std::printf("[multiproc%s] rank %d: error after %.1f ms (deadline %d ms): %s",
                extra.empty() ? "" : " tls", r, ms, deadline_ms, out.substr(e).c_str());
    REQUIRE(ms < 2 * deadline_ms);
    REQUIRE(out.find("regroup 3 ok") != std::string::npos);
  }
}

}  // namespace

TEST_CASE("asio_tcp across 4 processes: exact all-reduces", "[net][multiproc]") {
  clean_run({});
}

TEST_CASE("SIGKILL mid all-reduce: survivors error within 2x deadline and regroup",
          "[net][multiproc]") {
  sigkill_run({});
}

#if PACO_WITH_TLS
TEST_CASE("asio_tcp over TLS across 4 processes: exact all-reduces", "[net][multiproc][tls]") {
  clean_run({"--tls-dir", paco::testing::tls_pki_dir()});
}

TEST_CASE("TLS: SIGKILL mid all-reduce: survivors error within 2x deadline and regroup",
          "[net][multiproc][tls]") {
  sigkill_run({"--tls-dir", paco::testing::tls_pki_dir()});
}
#endif

TEST_CASE("asio_tcp shaper: a per-link rate within 10%, added latency", "[net][shaper]") {
  using namespace paco;
  const double rate = 40e6;  // bytes/s
  const std::size_t bytes = 12 << 20, m = 1 << 20;
  std::vector<double> secs(2, 0), lat(2, 0);
  int port = paco::testing::free_port();
  std::vector<std::thread> th;
  for (int r = 0; r < 2; ++r)
    th.emplace_back([&, r] {
      auto o = paco::testing::loopback_options(r, 2, port);
      o.shaper.rate_bytes_per_s = rate;
      // 6.5 ms of traffic: a late shaper timer on a loaded 2-core machine is credited.
      o.shaper.burst_bytes = 256 << 10;
      o.shaper.latency = std::chrono::milliseconds(30);
      auto t = net::asio_tcp::connect(o).value_or_throw();
      std::vector<std::byte> buf(m), one(1);
      auto d = net::after(std::chrono::seconds(30));
      // Latency: a ping-pong of one byte takes >= 2 x 30 ms.
      auto t0 = net::clock::now();
      if (r == 0) {
        t->send(1, 9, one, d).wait();
        t->recv(1, 9, one, d).wait();
        lat[0] = std::chrono::duration<double>(net::clock::now() - t0).count();
      } else {
        t->recv(0, 9, one, d).wait();
        t->send(0, 9, one, d).wait();
      }
      t0 = net::clock::now();
      if (r == 0) {
        std::vector<net::asio_tcp::request> q;
        for (std::size_t off = 0; off < bytes; off += m) q.push_back(t->send(1, 1, buf, d));
        for (auto& x : q) x.wait();
      } else {
        t->recv(0, 1, buf, d).wait();  // time from the first message (after the added latency)
        t0 = net::clock::now();
        for (std::size_t off = m; off < bytes; off += m) t->recv(0, 1, buf, d).wait();
        secs[1] = std::chrono::duration<double>(net::clock::now() - t0).count();
      }
    });
  for (auto& t : th) t.join();
  double got = double(bytes - m) / secs[1];
  std::printf(
      "[shaper] configured %.1f MB/s, delivered %.1f MB/s; ping-pong %.1f ms (2 x 30 ms added)\n",
      rate / 1e6, got / 1e6, lat[0] * 1e3);
  REQUIRE(got > 0.9 * rate);
  REQUIRE(got < 1.1 * rate);
  REQUIRE(lat[0] >= 0.060);
}

TEST_CASE(
    "asio_tcp per-peer shaper: the link to one peer shaped to its rate and delay, the others "
    "not",
    "[net][shaper]") {
  using namespace paco;
  const double rate = 20e6;  // bytes/s, rank 0 -> rank 1 only
  const std::size_t bytes = 6 << 20, m = 1 << 20;
  std::vector<double> secs(3, 0), lat(3, 0);
  int port = paco::testing::free_port();
  std::vector<std::thread> th;
  for (int r = 0; r < 3; ++r)
    th.emplace_back([&, r] {
      auto o = paco::testing::loopback_options(r, 3, port);
      if (r == 0)
        o.peer_shapers[1] = {.rate_bytes_per_s = rate,
                             .burst_bytes = 256 << 10,
                             .latency = std::chrono::milliseconds(30)};
      if (r == 1)  // and back: the 1 -> 0 direction is rank 1's link to 0
        o.peer_shapers[0] = {.latency = std::chrono::milliseconds(30)};
      auto t = net::asio_tcp::connect(o).value_or_throw();
      std::vector<std::byte> buf(m), one(1);
      auto d = net::after(std::chrono::seconds(30));
      if (r == 0) {
        for (int p = 1; p <= 2; ++p) {  // a ping-pong of one byte with each
          const auto t0 = net::clock::now();
          t->send(p, 9, one, d).wait();
          t->recv(p, 9, one, d).wait();
          lat[std::size_t(p)] = std::chrono::duration<double>(net::clock::now() - t0).count();
        }
        std::vector<net::asio_tcp::request> q;
        for (int p = 1; p <= 2; ++p)
          for (std::size_t off = 0; off < bytes; off += m) q.push_back(t->send(p, 1, buf, d));
        for (auto& x : q) x.wait();
      } else {
        t->recv(0, 9, one, d).wait();
        t->send(0, 9, one, d).wait();
        t->recv(0, 1, buf, d).wait();  // from the first message (after the added latency)
        const auto t0 = net::clock::now();
        for (std::size_t off = m; off < bytes; off += m) t->recv(0, 1, buf, d).wait();
        secs[std::size_t(r)] = std::chrono::duration<double>(net::clock::now() - t0).count();
      }
    });
  for (auto& t : th) t.join();
  const double shaped = double(bytes - m) / secs[1], free = double(bytes - m) / secs[2];
  std::printf(
      "[shaper] to rank 1: configured %.1f MB/s, delivered %.1f MB/s, ping-pong %.1f ms (2 x 30 "
      "ms added); to rank 2 (unshaped): %.1f MB/s, ping-pong %.1f ms\n",
      rate / 1e6, shaped / 1e6, lat[1] * 1e3, free / 1e6, lat[2] * 1e3);
  REQUIRE(shaped > 0.9 * rate);
  REQUIRE(shaped < 1.1 * rate);
  REQUIRE(lat[1] >= 0.060);
  // The other link is not shaped: its ping-pong does not carry the added delay, and it is not
  // held to the shaped rate.
  REQUIRE(lat[2] < 0.060);
  REQUIRE(free > 1.5 * rate);
}

TEST_CASE("asio_tcp per-peer shaper: a key that is not another rank is refused by name",
          "[net][shaper]") {
  using namespace paco;
  auto o = paco::testing::loopback_options(0, 2, paco::testing::free_port());
  o.peer_shapers[2] = {.rate_bytes_per_s = 1e6};
  auto t = net::asio_tcp::connect(o);
  REQUIRE(!t);
  REQUIRE(t.error().code == errc::invalid_argument);
  REQUIRE(t.error().message.find("peer_shapers[2]") != std::string::npos);
  o.peer_shapers.clear();
  o.peer_shapers[0] = {.rate_bytes_per_s = 1e6};  // itself
  auto self = net::asio_tcp::connect(o);
  REQUIRE(!self);
  REQUIRE(self.error().message.find("peer_shapers[0]") != std::string::npos);
}

// 300 000 bytes of a pattern that is not periodic in any power of two.
static std::vector<std::byte> crc_test_message() {
  std::vector<std::byte> msg(300000);
  for (std::size_t i = 0; i < msg.size(); ++i) msg[i] = std::byte(i * 131 % 251);
  return msg;
}

TEST_CASE("asio_tcp send_with_crc: a verified CRC forwards unchanged bytes; a wrong one is caught",
          "[net][crc]") {
  using namespace paco;
  const auto msg = crc_test_message();
  const std::uint32_t want = net::crc32c(0, msg);
  // Rank 0 sends; rank 1 forwards with the CRC its recv verified, then with a wrong one; rank 2
  // receives both. Results are checked on this thread (Catch assertions are not thread-safe).
  std::optional<std::uint32_t> send_crc{1u}, crc1, crc2;
  std::error_code e_send, e_fwd, e_bad_send, e_recv, e_bad;
  bool same = false;
  paco::testing::run_tcp_ranks("crc", 3, paco::testing::loopback_options, [&](net::asio_tcp& t) {
    auto d = net::after(std::chrono::seconds(10));
    std::vector<std::byte> got(msg.size());
    if (t.rank() == 0) {
      auto s = t.send(1, 5, msg, d);
      e_send = s.wait();
      send_crc = s.payload_crc();
    } else if (t.rank() == 1) {
      auto r = t.recv(0, 5, got, d);
      e_recv = r.wait();
      crc1 = r.payload_crc();
      e_fwd = t.send_with_crc(2, 6, got, crc1.value_or(0), d).wait();
      e_bad_send = t.send_with_crc(2, 7, got, crc1.value_or(0) ^ 1u, d).wait();
    } else {
      auto r = t.recv(1, 6, got, d);
      if (!r.wait()) same = std::memcmp(got.data(), msg.data(), msg.size()) == 0;
      crc2 = r.payload_crc();
      e_bad = t.recv(1, 7, got, d).wait();
    }
  });
  REQUIRE(!e_send);
  REQUIRE(!send_crc);  // a send has none
  REQUIRE(!e_recv);
  REQUIRE(crc1 == want);
  REQUIRE(!e_fwd);
  REQUIRE(same);
  REQUIRE(crc2 == want);
  REQUIRE(!e_bad_send);  // the sender vouched for the CRC; the receiver catches it
  REQUIRE(e_bad == make_error_code(errc::corrupt));
}

TEST_CASE("asio_tcp recv_unverified: the caller checks the frame's CRC; the ring catches a bad one",
          "[net][crc]") {
  using namespace paco;
  const auto msg = crc_test_message();
  const std::uint32_t want = net::crc32c(0, msg);
  // Rank 0 sends msg plainly, then with a wrong CRC, then plays a faulty ring neighbour: its
  // reduce-scatter chunk carries a wrong CRC. Rank 1 receives both unverified, then all-reduces.
  std::optional<std::uint32_t> exp1, exp2, verified1;
  std::error_code e1, e2;
  bool same = false, bad_bytes_same = false;
  std::string ring_error;
  bool ring_failed = false, ring_ok_without_crc = false;
  auto no_crc = [](int r, int p, int port) {
    auto o = paco::testing::loopback_options(r, p, port);
    o.payload_crc = false;
    return o;
  };
  constexpr std::size_t n = 1000;  // p = 2: each rank's block is 500 floats, one chunk
  paco::testing::run_tcp_ranks(
      "crc_caller", 2, paco::testing::loopback_options, [&](net::asio_tcp& t) {
        auto d = net::after(std::chrono::seconds(10));
        std::vector<std::byte> got(msg.size());
        if (t.rank() == 0) {
          t.recv(1, 8, {}, d).wait();  // rank 1's recvs are posted: frames are read into them
          t.send(1, 5, msg, d).wait();
          t.send_with_crc(1, 6, msg, want ^ 1u, d).wait();
          std::vector<float> block(n / 2, 1.0f);
          t.send_with_crc(1, 0x70000000u, std::as_bytes(std::span(block)), 12345u, d).wait();
          t.recv(1, 9, {}, d).wait();  // until rank 1 is done
        } else {
          std::vector<std::byte> got2(msg.size());
          auto r = t.recv_unverified(0, 5, got, d);
          auto r2 = t.recv_unverified(0, 6, got2, d);
          t.send(0, 8, {}, d).wait();
          e1 = r.wait();
          exp1 = r.expected_crc();
          verified1 = r.payload_crc();
          same = std::memcmp(got.data(), msg.data(), msg.size()) == 0;
          e2 = r2.wait();  // delivered: the CRC is the caller's to check
          exp2 = r2.expected_crc();
          bad_bytes_same = std::memcmp(got2.data(), msg.data(), msg.size()) == 0;
          std::vector<float> x(n, 2.0f);
          auto st = collectives::allreduce_ring(t, std::span<float>(x), {.until = d});
          ring_failed = !st.ok();
          if (!st.ok()) ring_error = st.error().what();
          t.send(0, 9, {}, d).wait();
        }
      });
  REQUIRE(!e1);
  REQUIRE(same);
  REQUIRE(exp1 == want);
  REQUIRE(!verified1);  // payload_crc() vouches only for CRCs the transport checked
  REQUIRE(!e2);
  REQUIRE(bad_bytes_same);
  REQUIRE(exp2 == (want ^ 1u));
  INFO(ring_error);
  REQUIRE(ring_failed);
  REQUIRE(ring_error.find("recv from rank 0") != std::string::npos);
  REQUIRE(ring_error.find(make_error_code(errc::corrupt).message()) != std::string::npos);
  // Frames without a CRC (payload_crc off): the ring reduces without checking, exactly.
  paco::testing::run_tcp_ranks("crc_off", 3, no_crc, [&](net::asio_tcp& t) {
    std::vector<float> x(n + 7);
    for (std::size_t i = 0; i < x.size(); ++i) x[i] = float(t.rank() + 1) * float(i % 13);
    auto st = collectives::allreduce_ring(t, std::span<float>(x), {.chunk_bytes = 256});
    bool exact = st.ok();
    for (std::size_t i = 0; i < x.size() && exact; ++i) exact = x[i] == 6.0f * float(i % 13);
    if (t.rank() == 0) ring_ok_without_crc = exact;
  });
  REQUIRE(ring_ok_without_crc);
}
