// The metrics/status HTTP server (net/http_server.hpp) and what the job layer serves with it:
// connections served concurrently under a per-connection deadline (a scrape answers within 1 s
// while 50 idle connections are open), the cap on connections, the bearer token, where a run's
// processes listen (job::http_listen_of) and the status page's bounded size.

#include <catch2/catch.hpp>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "paco/job/dipaco_job.hpp"
#include "paco/job/status_page.hpp"
#include "paco/net/http_server.hpp"
#include "paco/net/loopback.hpp"

using namespace paco;
using clock_type = std::chrono::steady_clock;

namespace {

// A TCP connection to 127.0.0.1:port; blocking: connect waits (up to the kernel's retries),
// else it is started and left to complete. −1 when no socket could be made.
int connect_to(int port, bool blocking) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  if (!blocking) ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<unsigned short>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 && blocking) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// Waits for fd to be readable until `until`; false when the time ran out.
bool readable(int fd, clock_type::time_point until) {
  const auto left =
      std::chrono::duration_cast<std::chrono::milliseconds>(until - clock_type::now()).count();
  pollfd p{fd, POLLIN, 0};
  return left > 0 && ::poll(&p, 1, int(left)) > 0;
}

struct http_answer {
  int status = 0;      // 0: no answer within the time given
  std::string text;    // the whole answer, header and body
  double seconds = 0;  // from connect to the answer's end
};

// GET path on 127.0.0.1:port with extra header lines ("Name: value\r\n"), read to the end.
// Gives up after `limit` (from before the connect, so a server that accepts late fails it too);
// seconds is the time taken either way.
http_answer http_get(int port, const std::string& path, const std::string& headers = "",
                     std::chrono::milliseconds limit = std::chrono::milliseconds(10000)) {
  http_answer r;
  const auto t0 = clock_type::now();
  const auto until = t0 + limit;
  const int fd = connect_to(port, false);
  const auto done = [&](bool answered) {
    if (fd >= 0) ::close(fd);
    r.seconds = std::chrono::duration<double>(clock_type::now() - t0).count();
    if (answered && r.text.rfind("HTTP/1.1 ", 0) == 0) r.status = std::atoi(r.text.c_str() + 9);
    return r;
  };
  if (fd < 0) return done(false);
  pollfd p{fd, POLLOUT, 0};
  if (::poll(&p, 1, int(limit.count())) <= 0) return done(false);
  const std::string req = "GET " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\n" + headers + "\r\n";
  if (::send(fd, req.data(), req.size(), MSG_NOSIGNAL) != ssize_t(req.size())) return done(false);
  char b[4096];
  for (;;) {
    if (!readable(fd, until)) return done(false);
    const ssize_t n = ::recv(fd, b, sizeof b, 0);
    if (n <= 0) break;
    r.text.append(b, std::size_t(n));
  }
  return done(true);
}

std::map<std::string, net::http_server::handler> metrics_route() {
  return {{"/metrics", [] { return net::http_reply{200, "text/plain", "paco_up 1\n"}; }}};
}

}  // namespace

TEST_CASE("http_server: a scrape answers within 1 s while 50 idle connections are open") {
  // The default deadline (5 s): under one connection at a time the scrape would wait behind
  // every idle connection's 5 s.
  auto s = net::http_server::start("127.0.0.1", 0, metrics_route());
  REQUIRE(s.ok());
  const int port = (*s)->port();
  std::vector<int> idle;
  for (int i = 0; i < 50; ++i) {
    const int fd = connect_to(port, false);
    REQUIRE(fd >= 0);
    idle.push_back(fd);
  }
  // Every idle connection established (or given 2 s), then a moment for the server to see them.
  const auto until = clock_type::now() + std::chrono::seconds(2);
  for (int fd : idle) {
    pollfd p{fd, POLLOUT, 0};
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(until - clock_type::now()).count();
    ::poll(&p, 1, int(std::max<long>(left, 0)));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  const auto a = http_get(port, "/metrics");
  std::printf("http_server: scrape under 50 idle connections answered in %.4f s (status %d)\n",
              a.seconds, a.status);
  CHECK(a.status == 200);
  CHECK(a.text.find("paco_up 1") != std::string::npos);
  CHECK(a.seconds < 1.0);
  for (int fd : idle) ::close(fd);
}

TEST_CASE("http_server: a connection that sends nothing is dropped at its deadline") {
  auto s = net::http_server::start("127.0.0.1", 0, metrics_route(),
                                   {.io_timeout = std::chrono::milliseconds(300)});
  REQUIRE(s.ok());
  const int fd = connect_to((*s)->port(), true);
  REQUIRE(fd >= 0);
  const auto t0 = clock_type::now();
  REQUIRE(readable(fd, t0 + std::chrono::seconds(5)));
  char b[16];
  CHECK(::recv(fd, b, sizeof b, 0) <= 0);  // closed, nothing answered
  const double waited = std::chrono::duration<double>(clock_type::now() - t0).count();
  CHECK(waited >= 0.25);
  CHECK(waited < 3.0);
  ::close(fd);
  // The server's count of open connections comes back to 0, and it still answers.
  for (int i = 0; i < 100 && (*s)->connections() != 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  CHECK((*s)->connections() == 0);
  CHECK(http_get((*s)->port(), "/metrics").status == 200);
  CHECK((*s)->served() == 1);
}

TEST_CASE("http_server: past max_connections a new connection is closed at once") {
  auto s = net::http_server::start("127.0.0.1", 0, metrics_route(), {.max_connections = 4});
  REQUIRE(s.ok());
  const int port = (*s)->port();
  std::vector<int> idle;
  for (int i = 0; i < 4; ++i) idle.push_back(connect_to(port, true));
  for (int i = 0; i < 200 && (*s)->connections() < 4; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  REQUIRE((*s)->connections() == 4);
  // The fifth: closed well before the deadline (5 s), unanswered.
  const int fifth = connect_to(port, true);
  REQUIRE(fifth >= 0);
  REQUIRE(readable(fifth, clock_type::now() + std::chrono::seconds(1)));
  char b[16];
  CHECK(::recv(fifth, b, sizeof b, 0) <= 0);
  ::close(fifth);
  CHECK((*s)->connections() == 4);
  // One idle connection gone: a scrape is served again.
  ::close(idle.back());
  idle.pop_back();
  for (int i = 0; i < 200 && (*s)->connections() > 3; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  CHECK(http_get(port, "/metrics").status == 200);
  for (int fd : idle) ::close(fd);
  CHECK(!net::http_server::start("127.0.0.1", 0, metrics_route(), {.max_connections = 0}).ok());
}

TEST_CASE("http_server: with a token, only a request carrying it as a bearer token is served") {
  const std::string token = "0123456789abcdef0123456789abcdef";
  auto s = net::http_server::start("127.0.0.1", 0, metrics_route(), {.token = token});
  REQUIRE(s.ok());
  const int port = (*s)->port();
  const auto none = http_get(port, "/metrics");
  CHECK(none.status == 401);
  CHECK(none.text.find("WWW-Authenticate: Bearer") != std::string::npos);
  CHECK(none.text.find("paco_up") == std::string::npos);
  CHECK(http_get(port, "/metrics", "Authorization: Bearer 0123456789abcdef0123456789abcdeF\r\n")
            .status == 401);  // same length, last byte differs
  CHECK(http_get(port, "/metrics", "Authorization: Bearer 0123\r\n").status == 401);
  CHECK(http_get(port, "/metrics", "Authorization: Bearer " + token + "0\r\n").status == 401);
  CHECK(http_get(port, "/metrics", "Authorization: Basic " + token + "\r\n").status == 401);
  CHECK(http_get(port, "/nothing").status == 401);  // the routes are not told either
  const auto right = http_get(port, "/metrics", "Authorization: Bearer " + token + "\r\n");
  CHECK(right.status == 200);
  CHECK(right.text.find("paco_up 1") != std::string::npos);
  CHECK(http_get(port, "/metrics", "Authorization: bearer " + token + "\r\n").status == 200);
  CHECK(http_get(port, "/nothing", "Authorization: Bearer " + token + "\r\n").status == 404);
  // Without a token nothing is asked.
  auto open = net::http_server::start("127.0.0.1", 0, metrics_route());
  REQUIRE(open.ok());
  CHECK(http_get((*open)->port(), "/metrics").status == 200);

  CHECK(net::bearer_matches("Bearer abc", "abc"));
  CHECK(net::bearer_matches("BEARER abc", "abc"));
  CHECK(!net::bearer_matches("Bearer abd", "abc"));
  CHECK(!net::bearer_matches("Bearer ab", "abc"));
  CHECK(!net::bearer_matches("Bearer abcd", "abc"));
  CHECK(!net::bearer_matches("Bearer", "abc"));
  CHECK(!net::bearer_matches("", "abc"));
  CHECK(!net::bearer_matches("Token abc", "abc"));
}

TEST_CASE("is_loopback_host and http_listen_of: loopback for a local run, else a token") {
  for (const char* h : {"localhost", "LocalHost", "localhost.", "127.0.0.1", "127.1.2.3", "::1",
                        "[::1]", "0:0:0:0:0:0:0:1", "::ffff:127.0.0.1"})
    CHECK(net::is_loopback_host(h));
  for (const char* h : {"", "0.0.0.0", "10.0.0.1", "128.0.0.1", "::", "::2", "node-1",
                        "localhost.example.org", "127.0.0.1.example.org", "::ffff:10.0.0.1"})
    CHECK(!net::is_loopback_host(h));

  const std::string token = "secret";
  auto listen = [&](const std::string& mode, const std::string& host) {
    job::launch_section l;
    l.mode = mode;
    l.store_host = host;
    return job::http_listen_of(l, token);
  };
  for (const std::string mode : {"local", "manual", "mpi"}) {
    CHECK(listen(mode, "localhost").host == "127.0.0.1");
    CHECK(listen(mode, "127.0.0.1").host == "127.0.0.1");
    CHECK(listen(mode, "127.0.0.2").host == "127.0.0.2");
    CHECK(listen(mode, "::1").host == "::1");
    CHECK(listen(mode, "[::1]").host == "::1");
    for (const char* h : {"localhost", "127.0.0.1", "::1"}) CHECK(listen(mode, h).token.empty());
  }
  // Beyond loopback: every interface, the run's token required.
  for (const std::string mode : {"manual", "mpi"})
    for (const char* h : {"10.0.0.5", "node-1", "0.0.0.0"}) {
      CHECK(listen(mode, h).host == "0.0.0.0");
      CHECK(listen(mode, h).token == token);
    }
  // A local run with store_host another interface's address still keeps to loopback.
  CHECK(listen("local", "10.0.0.5").host == "127.0.0.1");
  CHECK(listen("local", "10.0.0.5").token.empty());
  // The default launch section is local and on 127.0.0.1.
  CHECK(job::http_listen_of(job::launch_section{}, token).host == "127.0.0.1");
  // What it names, a server binds.
  auto s = net::http_server::start(listen("manual", "localhost").host, 0, metrics_route());
  REQUIRE(s.ok());
  CHECK(http_get((*s)->port(), "/metrics").status == 200);
}

TEST_CASE("status_board: the page's size is bounded whatever the rounds run") {
  const std::vector<path::level_span> levels(2, path::level_span{.offset = 0, .size = 1});
  auto g = path::path_plan::make_runtime(std::vector<int>{2, 2}, levels, 1);
  REQUIRE(g.ok());
  std::map<int, job::status_board::process> who;
  for (int w = 1; w <= g->workers(); ++w) who[w] = {w - 1, "worker-" + std::to_string(w)};
  const long rounds = 4000;
  job::status_board board("cap", *g, who, rounds, std::vector<long>(4, 0));
  std::vector<std::size_t> size_at;  // the page's size after 100, 200, … rounds
  for (long r = 0; r < rounds; ++r) {
    for (int w = 1; w <= g->workers(); ++w)
      board.on_report({.worker = w,
                       .round = r,
                       .loss = 3.0 - 1e-4 * double(r) - 0.01 * w,
                       .tokens_per_s = 1000});
    if ((r + 1) % 100 == 0) size_at.push_back(board.page().size());
  }
  const std::string page = board.page();
  std::printf("status_board: page %zu bytes after 200 rounds, %zu after %ld (%zu workers)\n",
              size_at[1], page.size(), rounds, who.size());
  // Past the cap the page grows by no more than the cap's line and a few digits.
  CHECK(page.size() <= size_at[1] + 200);
  CHECK(long(size_at.back()) - long(size_at[size_at.size() / 2]) < 64);
  CHECK(page.find("id=\"curve-cap\"") != std::string::npos);
  CHECK(page.find(std::to_string(rounds - long(job::status_board::curve_rounds)) +
                  " earlier rounds left out") != std::string::npos);
  // Below the cap nothing is left out.
  job::status_board fresh("cap", *g, who, rounds, std::vector<long>(4, 0));
  for (long r = 0; r < long(job::status_board::curve_rounds); ++r)
    fresh.on_report({.worker = 1, .round = r, .loss = 3.0, .tokens_per_s = 1});
  CHECK(fresh.page().find("curve-cap") == std::string::npos);
}
