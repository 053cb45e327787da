#pragma once
// http_server: a small read-only HTTP/1.1 server (Boost.Beast) for a process's metrics and status
// pages: GET of a registered path answers with what its handler makes; anything else is 404 (405
// for another method). One connection at a time on its own thread, each request answered and
// the connection closed; a client that has not sent its request's header within io_timeout is
// dropped (so a stalled scraper or an idle preconnect cannot hold it), and one that does not
// take the answer within io_timeout is dropped too.
//
//   auto http = net::http_server::start("0.0.0.0", 9100,
//       {{"/metrics", [&] { return net::http_reply{.content_type = prometheus_text, .body = …};
//       }}});
//   http->port();   // the port it listens on (0 asked: a free one)

#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>

#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/http.hpp>

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <thread>

#include "paco/core/error.hpp"

namespace paco::net {

struct http_reply {
  int status = 200;
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;
};

class http_server {
 public:
  using handler = std::function<http_reply()>;

  // Listens on host:port (0: a free port) and serves routes until destroyed. A handler runs on
  // the server's thread and must be safe to call there. Errors: io naming the address (in use,
  // not this machine's).
  static result<std::unique_ptr<http_server>> start(
      const std::string& host, int port, std::map<std::string, handler> routes,
      std::chrono::milliseconds io_timeout = std::chrono::milliseconds(5000)) {
    std::unique_ptr<http_server> s(new http_server(std::move(routes), io_timeout));
    boost::system::error_code ec;
    const auto addr = boost::asio::ip::make_address(host, ec);
    if (ec) return error(errc::invalid_argument, "http: '" + host + "' is not an address");
    const boost::asio::ip::tcp::endpoint ep(addr, static_cast<unsigned short>(port));
    s->acceptor_.open(ep.protocol(), ec);
    if (!ec) s->acceptor_.set_option(boost::asio::socket_base::reuse_address(true), ec);
    if (!ec) s->acceptor_.bind(ep, ec);
    if (!ec) s->acceptor_.listen(16, ec);
    if (ec)
      return error(errc::io, "http: cannot listen on " + host + ":" + std::to_string(port) + ": " +
                                 ec.message());
    s->port_ = s->acceptor_.local_endpoint().port();
    s->accept();
    s->thread_ = std::thread([p = s.get()] { p->ioc_.run(); });
    return s;
  }
  http_server(const http_server&) = delete;
  http_server& operator=(const http_server&) = delete;
  ~http_server() {
    ioc_.stop();
    if (thread_.joinable()) thread_.join();
  }

  int port() const noexcept { return port_; }
  // Requests answered so far (any status).
  long served() const noexcept { return served_.load(); }

 private:
  http_server(std::map<std::string, handler> routes, std::chrono::milliseconds io_timeout)
      : routes_(std::move(routes)), io_timeout_(io_timeout), acceptor_(ioc_) {}

  void accept() {
    acceptor_.async_accept([this](boost::system::error_code ec, boost::asio::ip::tcp::socket s) {
      if (!ec) answer(std::move(s));
      if (acceptor_.is_open()) accept();
    });
  }

  // Reads one request (its header within io_timeout and 16 KiB) and answers it; anything else
  // drops the connection. The socket is read with poll() against a deadline (Asio's synchronous
  // read would wait past a receive timeout), and the answer is sent whole without blocking past
  // the send timeout.
  void answer(boost::asio::ip::tcp::socket socket) noexcept {
    namespace http = boost::beast::http;
    try {
      const int fd = socket.native_handle();
      const int ms = int(io_timeout_.count());
      const timeval tv{ms / 1000, (ms % 1000) * 1000};
      ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
      const auto until = std::chrono::steady_clock::now() + io_timeout_;
      http::request_parser<http::empty_body> parser;
      parser.header_limit(16384);
      std::string in;
      char chunk[4096];
      while (!parser.is_done()) {
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
            until - std::chrono::steady_clock::now());
        pollfd p{fd, POLLIN, 0};
        if (left.count() <= 0 || ::poll(&p, 1, int(left.count())) <= 0) return;
        const ssize_t n = ::recv(fd, chunk, sizeof chunk, 0);
        if (n <= 0) return;
        in.append(chunk, std::size_t(n));
        if (in.size() > 16384) return;
        boost::system::error_code ec;
        const std::size_t used = parser.put(boost::asio::buffer(in), ec);
        in.erase(0, used);
        if (ec && ec != http::error::need_more) return;
      }
      const auto& req = parser.get();
      http_reply r;
      const std::string target(req.target());
      const std::string path = target.substr(0, target.find('?'));
      if (req.method() != http::verb::get && req.method() != http::verb::head) {
        r = {405, "text/plain; charset=utf-8", "only GET\n"};
      } else if (auto it = routes_.find(path); it != routes_.end()) {
        try {
          r = it->second();
        } catch (const std::exception& e) {
          r = {500, "text/plain; charset=utf-8", std::string("error: ") + e.what() + "\n"};
        }
      } else {
        std::string known;
        for (auto& [p, h] : routes_) known += " " + p;
        r = {404, "text/plain; charset=utf-8", "not found; this server has" + known + "\n"};
      }
      http::response<http::string_body> res{static_cast<http::status>(r.status), req.version()};
      res.set(http::field::server, "paco");
      res.set(http::field::content_type, r.content_type);
      res.set(http::field::cache_control, "no-store");
      res.keep_alive(false);
      if (req.method() != http::verb::head) res.body() = std::move(r.body);
      res.prepare_payload();
      std::ostringstream wire;
      wire << res;
      const std::string out = wire.str();
      for (std::size_t sent = 0; sent < out.size();) {
        const ssize_t n = ::send(fd, out.data() + sent, out.size() - sent, MSG_NOSIGNAL);
        if (n <= 0) return;  // the send timeout passed, or the client left
        sent += std::size_t(n);
      }
      boost::system::error_code ec;
      socket.shutdown(boost::asio::ip::tcp::socket::shutdown_both, ec);
      ++served_;
    } catch (...) {  // a connection's failure is never the server's
    }
  }

  std::map<std::string, handler> routes_;
  std::chrono::milliseconds io_timeout_;
  boost::asio::io_context ioc_;
  boost::asio::ip::tcp::acceptor acceptor_;
  std::thread thread_;
  int port_ = 0;
  std::atomic<long> served_{0};
};

}  // namespace paco::net
