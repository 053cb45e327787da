// Watching a running DiPaCo job (launch.metrics_port): the store's Prometheus metrics and every
// worker's are scraped over HTTP during a run and hold the run's counts (while a client that
// connected and sent nothing waits on the store's server); the store's status page
// is loaded in headless Chromium (Debian's chromium) during the run, its rendered DOM shows the
// grid, the workers and their loss curves, and a screenshot is kept as status_page.png in the
// test's directory.
#include <catch2/catch.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <string>
#include <utility>
#include <vector>

#include "support/processes.hpp"

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using paco::testing::slurp;

namespace {

// GET http://127.0.0.1:port/path: the response's body ("" when nothing answers).
std::string http_get(int port, const std::string& path) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(std::uint16_t(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  timeval tv{5, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    ::close(fd);
    return "";
  }
  const std::string req =
      "GET " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
  if (::send(fd, req.data(), req.size(), 0) != ssize_t(req.size())) {
    ::close(fd);
    return "";
  }
  std::string out;
  char buf[8192];
  for (ssize_t n; (n = ::recv(fd, buf, sizeof buf, 0)) > 0;) out.append(buf, std::size_t(n));
  ::close(fd);
  const auto body = out.find("\r\n\r\n");
  return out.rfind("HTTP/1.1 200", 0) == 0 && body != std::string::npos ? out.substr(body + 4) : "";
}

// The value of the first sample of `metric` (with its labels as written) in a scrape, or -1.
double sample(const std::string& text, const std::string& metric) {
  const auto at = text.find("\n" + metric + " ");
  if (at == std::string::npos) return -1;
  return std::stod(text.substr(at + metric.size() + 2));
}

}  // namespace

TEST_CASE("a running job's metrics scrape and its status page renders in Chromium",
          "[multiproc][watch]") {
  paco::testing::small_dipaco_run r{
      PACO_SOURCE_DIR, PACO_BINARY_DIR,
      fs::temp_directory_path() / ("paco_watch_" + std::to_string(::getpid()))};
  fs::remove_all(r.dir);
  r.rounds = 40;
  const int port = paco::testing::free_port_block(8);
  REQUIRE(port > 0);
  const pid_t launcher = r.start({"--set", "launch.metrics_port=" + std::to_string(port), "--set",
                                  "launch.throttle=1:3,2:3,3:3,4:3"});
  REQUIRE(launcher > 0);
  // Mid-run: once every worker has logged a round.
  REQUIRE(paco::testing::wait_until(
      [&] {
        for (int w = 1; w <= 4; ++w)
          if (paco::testing::worker_log_values(r.dir, w, "round").size() < 2) return false;
        return true;
      },
      180s));

  // A client that connects and sends nothing is dropped (after the server's 5 s): it cannot hold
  // the page or the metrics.
  const int silent = ::socket(AF_INET, SOCK_STREAM, 0);
  {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(std::uint16_t(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::connect(silent, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  }
  // The store's metrics and worker 2's, scraped until both hold a reported round (a worker logs
  // its round before it reports it and before its own metrics count it).
  std::string store, worker;
  REQUIRE(paco::testing::wait_until(
      [&] {
        store = http_get(port, "/metrics");
        worker = http_get(port + 2, "/metrics");
        return sample(store, "paco_store_worker_loss{worker=\"3\"}") > 0 &&
               sample(worker, "paco_worker_rounds_total") >= 2;
      },
      60s));
  INFO(store);
  REQUIRE(sample(store, "paco_store_live_workers") == 4);
  REQUIRE(sample(store, "paco_store_rounds_planned") == 40);
  REQUIRE(sample(store, "paco_store_pushes_total{result=\"accepted\"}") >= 8);
  REQUIRE(sample(store, "paco_store_pushes_total{result=\"late\"}") == 0);
  REQUIRE(sample(store, "paco_store_rounds_closed_total{module=\"0\"}") >= 2);
  REQUIRE(sample(store, "paco_store_round_open_seconds_count") >= 8);
  REQUIRE(sample(store, "paco_store_bytes_total{direction=\"in\",worker=\"1\"}") > 0);
  REQUIRE(sample(store, "paco_store_bytes_total{direction=\"out\",worker=\"1\"}") > 0);
  REQUIRE(sample(store, "paco_store_worker_loss{worker=\"3\"}") > 0);
  // A worker's own.
  INFO(worker);
  REQUIRE(sample(worker, "paco_worker_rounds_total") >= 2);
  REQUIRE(sample(worker, "paco_worker_loss") > 0);
  REQUIRE(sample(worker, "paco_worker_loss_bpb") ==
          Approx(sample(worker, "paco_worker_loss") / std::log(2.0)).epsilon(1e-9));
  REQUIRE(sample(worker, "paco_worker_rounds_planned") == 40);
  REQUIRE(sample(worker, "paco_worker_tokens_per_second") > 0);
  REQUIRE(sample(worker, "paco_worker_tokens_total") > 0);
  REQUIRE(sample(worker, "paco_worker_bytes_sent_total") > 0);
  REQUIRE(sample(worker, "paco_worker_inner_step") >= 60);

  // Both endpoints pass Prometheus's own checks of the text format and its naming rules.
  if (std::system("command -v promtool >/dev/null 2>&1") != 0) {
    WARN("promtool is not installed (scripts/deps.sh installs prometheus): not checked");
  } else {
    for (const auto& [name, text] : {std::pair{"store", store}, std::pair{"worker", worker}}) {
      const fs::path file = r.dir.string() + "." + name + ".prom",
                     report = r.dir.string() + "." + name + ".promtool";
      std::ofstream(file) << text;
      const int rc = std::system(
          ("promtool check metrics < " + file.string() + " > " + report.string() + " 2>&1")
              .c_str());
      INFO(name << " metrics, promtool says: " << slurp(report));
      CHECK(rc == 0);
      fs::remove(file);
      fs::remove(report);
    }
  }

  // The status page, rendered by a browser while the run goes on.
  const std::string page = http_get(port, "/");
  INFO(page);
  REQUIRE(page.find("<svg id=\"chart\"") != std::string::npos);
  // The pace (rounds have closed: seconds per round and an ETA), the events (every worker
  // joined) and the configuration as the run has it.
  REQUIRE(std::regex_search(page, std::regex("<p id=\"pace\">[0-9.]+ s per round; ETA [0-9]+:")));
  for (int w = 1; w <= 4; ++w)
    REQUIRE(page.find("worker-" + std::to_string(w) + " joined") != std::string::npos);
  REQUIRE(page.find("<td class=\"l\">dipaco.rounds</td><td class=\"l\">40</td>") !=
          std::string::npos);
  REQUIRE(page.find("<td class=\"l\">launch.throttle</td><td class=\"l\">&quot;1:3,2:3,3:3,"
                    "4:3&quot;</td>") != std::string::npos);
  if (std::system("command -v chromium >/dev/null 2>&1") != 0) {
    WARN("chromium is not installed (scripts/deps.sh installs it): the page was not rendered");
  } else {
    const fs::path shot = fs::current_path() / "status_page.png",
                   dom = r.dir.string() + ".dom.html";
    fs::remove(shot);
    const std::string url = "http://127.0.0.1:" + std::to_string(port) + "/";
    const std::string flags =
        "chromium --headless --no-sandbox --disable-gpu --disable-dev-shm-usage "
        "--user-data-dir=" +
        r.dir.string() + ".chromium --window-size=1000,1100 ";
    REQUIRE(std::system(
                (flags + "--dump-dom " + url + " > " + dom.string() + " 2>/dev/null").c_str()) ==
            0);
    REQUIRE(std::system((flags + "--screenshot=" + shot.string() + " " + url + " >/dev/null 2>&1")
                            .c_str()) == 0);
    const std::string d = slurp(dom);
    INFO(d);
    // The grid (2 levels × 2 experts: modules 0 … 3 with their rounds), a row per worker with
    // its health, and a loss curve per worker in the chart.
    REQUIRE(d.find("id=\"grid\"") != std::string::npos);
    for (int m = 0; m < 4; ++m)
      REQUIRE(d.find("module " + std::to_string(m) + "<br>round ") != std::string::npos);
    for (int w = 1; w <= 4; ++w)
      REQUIRE(d.find(">worker-" + std::to_string(w) + "<") != std::string::npos);
    REQUIRE(d.find("class=\"live\">live<") != std::string::npos);
    REQUIRE(d.find("id=\"events\"") != std::string::npos);
    REQUIRE(d.find("id=\"config\"") != std::string::npos);
    const std::regex curve("<polyline[^>]*points=\"[0-9.]+,[0-9.]+ [0-9.]+,[0-9.]+");
    REQUIRE(std::regex_search(d, curve));
    REQUIRE(fs::exists(shot));
    REQUIRE(fs::file_size(shot) > 10000);
  }
  ::close(silent);
  const int code = paco::testing::exit_code(paco::testing::wait_exit(launcher, 300s));
  const std::string out = slurp(r.out());
  INFO(out);
  REQUIRE(code == 0);
  // The launcher said where to look, at the start.
  REQUIRE(out.find("status page http://127.0.0.1:" + std::to_string(port) + "/ ") !=
          std::string::npos);
  fs::remove_all(r.dir);
  fs::remove_all(r.dir.string() + ".chromium");
}
