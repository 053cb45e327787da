#pragma once
// http_server: a small read-only HTTP/1.1 server (Boost.Beast) for a process's metrics and status
// pages: GET (or HEAD) of a registered path answers with what its handler makes; anything else is
// 404 (405 for another method). Connections are served concurrently, each by an asynchronous
// session on the server's one thread, one request per connection (answered, then closed). Every
// connection has a deadline: a client that has not sent its request's header within io_timeout
// is dropped, and so is one that has not taken the answer within io_timeout more, so an idle
// preconnect or a stalled scraper holds only its own connection. Past max_connections open at
// once, a new connection is closed as soon as it is accepted. With a token, a request without
// "Authorization: Bearer <token>" is answered 401 (the token compared in constant time).
//
//   auto http = net::http_server::start("0.0.0.0", 9100,
//       {{"/metrics", [&] { return net::http_reply{.content_type = prometheus_text, .body = …};
//       }}}, {.token = run_token});
//   http->port();   // the port it listens on (0 asked: a free one)

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <thread>

#include "paco/core/error.hpp"

namespace paco::net {

struct http_reply {
  int status = 200;
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;
};

struct http_options {
  // Per connection: its request's header must arrive within this, then its answer be taken
  // within this again.
  std::chrono::milliseconds io_timeout{5000};
  // Required of every request as "Authorization: Bearer <token>" (empty: none; 401 without it).
  std::string token;
  // Connections open at once (≥ 1); one accepted beyond them is closed at once.
  int max_connections = 256;
};

// True when `header` (an Authorization field's value) is "Bearer <token>" (scheme in any case).
// Cost: time that depends on token's size only, never on where a wrong value differs.
inline bool bearer_matches(std::string_view header, std::string_view token) noexcept {
  constexpr std::string_view scheme = "bearer ";
  if (header.size() < scheme.size()) return false;
  for (std::size_t i = 0; i < scheme.size(); ++i)
    if ((header[i] >= 'A' && header[i] <= 'Z' ? char(header[i] - 'A' + 'a') : header[i]) !=
        scheme[i])
      return false;
  const std::string_view given = header.substr(scheme.size());
  unsigned diff = given.size() != token.size();
  for (std::size_t i = 0; i < token.size(); ++i)
    diff |= unsigned(static_cast<unsigned char>(token[i]) ^
                     static_cast<unsigned char>(i < given.size() ? given[i] : 0));
  return diff == 0;
}

class http_server {
 public:
  using handler = std::function<http_reply()>;

  // Listens on host:port (0: a free port) and serves routes until destroyed. A handler runs on
  // the server's thread (one at a time) and must be safe to call there.
  // Requires: host a numeric address ("127.0.0.1", "0.0.0.0", "::1"); o.max_connections ≥ 1.
  // Ensures: port() is the port listened on. Errors: invalid_argument naming the address or
  // max_connections; io naming the address (in use, not this machine's).
  static result<std::unique_ptr<http_server>> start(const std::string& host, int port,
                                                    std::map<std::string, handler> routes,
                                                    http_options o = {}) {
    if (o.max_connections < 1)
      return error(errc::invalid_argument,
                   "http: max_connections " + std::to_string(o.max_connections) + " is not ≥ 1");
    std::unique_ptr<http_server> s(new http_server(std::move(routes), std::move(o)));
    boost::system::error_code ec;
    const auto addr = boost::asio::ip::make_address(host, ec);
    if (ec) return error(errc::invalid_argument, "http: '" + host + "' is not an address");
    const boost::asio::ip::tcp::endpoint ep(addr, static_cast<unsigned short>(port));
    s->acceptor_.open(ep.protocol(), ec);
    if (!ec) s->acceptor_.set_option(boost::asio::socket_base::reuse_address(true), ec);
    if (!ec) s->acceptor_.bind(ep, ec);
    if (!ec) s->acceptor_.listen(boost::asio::socket_base::max_listen_connections, ec);
    if (ec)
      return error(errc::io, "http: cannot listen on " + host + ":" + std::to_string(port) + ": " +
                                 ec.message());
    s->port_ = s->acceptor_.local_endpoint().port();
    s->accept();
    s->thread_ = std::thread([p = s.get()] { p->ioc_.run(); });
    return s;
  }
  // The same with only a deadline set (no token, 256 connections).
  static result<std::unique_ptr<http_server>> start(const std::string& host, int port,
                                                    std::map<std::string, handler> routes,
                                                    std::chrono::milliseconds io_timeout) {
    return start(host, port, std::move(routes), http_options{.io_timeout = io_timeout});
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
  // Connections open now (accepted, not yet closed).
  int connections() const noexcept { return open_.load(); }

 private:
  using tcp = boost::asio::ip::tcp;

  // One connection: its request read, answered, and the connection closed, all within its
  // deadlines; it lives as long as an operation of it is pending.
  class session : public std::enable_shared_from_this<session> {
   public:
    session(http_server& server, tcp::socket socket) : server_(server), stream_(std::move(socket)) {
      ++server_.open_;
    }
    ~session() { --server_.open_; }

    void run() {
      parser_.header_limit(16384);
      stream_.expires_after(server_.options_.io_timeout);
      boost::beast::http::async_read(
          stream_, buffer_, parser_,
          [self = shared_from_this()](boost::beast::error_code ec, std::size_t) {
            if (!ec) self->answer();
          });
    }

   private:
    // Answers the request read. A failure to make or send the answer (out of memory) drops
    // the connection: a connection's failure is never the server's.
    void answer() noexcept {
      namespace http = boost::beast::http;
      try {
        const auto& req = parser_.get();
        http_reply r = server_.reply_to(req);
        res_.result(unsigned(r.status));
        res_.version(req.version());
        res_.set(http::field::server, "paco");
        res_.set(http::field::content_type, r.content_type);
        res_.set(http::field::cache_control, "no-store");
        if (r.status == 401) res_.set(http::field::www_authenticate, "Bearer realm=\"paco\"");
        res_.keep_alive(false);
        if (req.method() != http::verb::head) res_.body() = std::move(r.body);
        res_.prepare_payload();
        stream_.expires_after(server_.options_.io_timeout);
        http::async_write(stream_, res_,
                          [self = shared_from_this()](boost::beast::error_code ec, std::size_t) {
                            if (ec) return;           // the deadline passed, or the client left
                            ++self->server_.served_;  // counted before the client sees the end
                            self->stream_.socket().shutdown(tcp::socket::shutdown_send, ec);
                          });
      } catch (...) {
      }
    }

    http_server& server_;
    boost::beast::tcp_stream stream_;
    boost::beast::flat_buffer buffer_{16384};  // the request's header at most
    boost::beast::http::request_parser<boost::beast::http::empty_body> parser_;
    boost::beast::http::response<boost::beast::http::string_body> res_;
  };

  http_server(std::map<std::string, handler> routes, http_options o)
      : routes_(std::move(routes)), options_(std::move(o)), acceptor_(ioc_), retry_(ioc_) {}

  // Accepts forever: a connection within max_connections gets a session, one beyond is closed;
  // after a failed accept (out of descriptors) it waits 50 ms before the next.
  void accept() {
    acceptor_.async_accept([this](boost::system::error_code ec, tcp::socket s) {
      if (ec == boost::asio::error::operation_aborted || !acceptor_.is_open()) return;
      if (ec) {
        retry_.expires_after(std::chrono::milliseconds(50));
        retry_.async_wait([this](boost::system::error_code e) {
          if (!e) accept();
        });
        return;
      }
      if (open_.load() < options_.max_connections) {
        try {
          std::make_shared<session>(*this, std::move(s))->run();
        } catch (...) {  // out of memory: this connection is dropped
        }
      } else {
        s.close(ec);
      }
      accept();
    });
  }

  // The answer to a request: 401 without the token, 405 for a method other than GET or HEAD,
  // the route's handler's (500 when it throws), else 404 naming the routes.
  template <class Request>
  http_reply reply_to(const Request& req) const {
    namespace http = boost::beast::http;
    const auto auth = req[http::field::authorization];
    if (!options_.token.empty() &&
        !bearer_matches(std::string_view(auth.data(), auth.size()), options_.token))
      return {401, "text/plain; charset=utf-8",
              "this server needs Authorization: Bearer <token>\n"};
    if (req.method() != http::verb::get && req.method() != http::verb::head)
      return {405, "text/plain; charset=utf-8", "only GET\n"};
    const std::string target(req.target());
    if (auto it = routes_.find(target.substr(0, target.find('?'))); it != routes_.end()) {
      try {
        return it->second();
      } catch (const std::exception& e) {
        return {500, "text/plain; charset=utf-8", std::string("error: ") + e.what() + "\n"};
      }
    }
    std::string known;
    for (auto& [p, h] : routes_) known += " " + p;
    return {404, "text/plain; charset=utf-8", "not found; this server has" + known + "\n"};
  }

  std::map<std::string, handler> routes_;
  http_options options_;
  std::atomic<long> served_{0};
  std::atomic<int> open_{0};  // before ioc_: sessions still pending at its end count down
  boost::asio::io_context ioc_;
  tcp::acceptor acceptor_;
  boost::asio::steady_timer retry_;
  std::thread thread_;
  int port_ = 0;
};

}  // namespace paco::net
