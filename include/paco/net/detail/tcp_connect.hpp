#pragma once
// asio_tcp::connect() (see asio_tcp.hpp's file comment): the checks of tcp_options, the
// rendezvous over blocking sockets (rendezvous.hpp; TLS streams when tls.enabled) that leaves
// one connection per peer, and the core started on them (links, heartbeat, I/O thread).
// Rendezvous: with `peers`, rank r connects to every rank below it and accepts the ranks
// above it; with `coordinator`, rank 0 first collects every member's listening port, admits
// them (all, or those that arrive within join_window in an elastic group, renumbered by id)
// and sends everyone the table, then the members connect among themselves the same way.

#include <arpa/inet.h>
#include <netinet/in.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "paco/core/error.hpp"
#include "paco/net/concepts.hpp"
#include "paco/net/detail/rendezvous.hpp"
#include "paco/net/detail/tcp_heartbeat.hpp"
#include "paco/net/detail/tcp_link.hpp"
#include "paco/net/detail/tcp_recv.hpp"
#include "paco/net/detail/tcp_stream.hpp"
#include "paco/net/tcp_options.hpp"
#include "paco/net/wire.hpp"

namespace paco::net::detail {

// The kernel's autotuning maximum of a TCP socket's buffer (the third field of
// net.ipv4.tcp_rmem or tcp_wmem), or 0 when it cannot be read.
inline std::size_t tcp_autotune_max(const char* file) {
  std::FILE* f = std::fopen(file, "r");
  if (!f) return 0;
  unsigned long long lo = 0, def = 0, hi = 0;
  const int n = std::fscanf(f, "%llu %llu %llu", &lo, &def, &hi);
  std::fclose(f);
  return n == 3 ? static_cast<std::size_t>(hi) : 0;
}

// The SO_SNDBUF / SO_RCVBUF every connection of an endpoint gets (0: the kernel's autotuning).
// Ensures: o.socket_buffer_bytes when set; else, with o.bdp_bytes, each stream's share of the
// bandwidth-delay product, ceil(bdp_bytes / streams), when autotuning could not reach it (its
// maximum below the share in either direction), else 0; capped at 1 GiB.
inline int effective_socket_buffer(const tcp_options& o) {
  if (o.socket_buffer_bytes > 0 || o.bdp_bytes == 0) return o.socket_buffer_bytes;
  const auto k = static_cast<std::size_t>(std::max(o.streams, 1));
  const std::size_t share = std::min<std::size_t>((o.bdp_bytes + k - 1) / k, std::size_t(1) << 30);
  const std::size_t rx = tcp_autotune_max("/proc/sys/net/ipv4/tcp_rmem");
  const std::size_t tx = tcp_autotune_max("/proc/sys/net/ipv4/tcp_wmem");
  // Autotuning grows a buffer to its maximum, of which about half holds payload.
  if (rx && tx && share <= std::min(rx, tx) / 2) return 0;
  return static_cast<int>(share);
}

// One rank's rendezvous. Requires: o checked (check_tcp_options); one core per stream
// (cores[k] carries stream k of every link), each with tls_ctx set when o.tls.enabled (stream
// k's TLS streams then run on cores[k]->io, on this thread).
struct tcp_rendezvous {
  tcp_rendezvous(std::vector<std::shared_ptr<tcp_core>>& c, tcp_options& opts)
      : cores(c),
        o(opts),
        d(clock::now() + opts.connect_timeout),
        p(opts.size),
        me(opts.rank),
        streams(opts.streams),
        buffer(effective_socket_buffer(opts)),
        conns(static_cast<std::size_t>(streams)),
        addr(static_cast<std::size_t>(p)) {
    for (auto& c : conns) c.resize(static_cast<std::size_t>(p));
  }

  // Connects this rank with every other by o.connect_timeout, `streams` connections per pair.
  // Ensures: conns[k][r] open for every stream k and r != me of the group of p ranks; in an
  //   elastic group p, me, o.size and o.rank are the assigned ones. Else: timeout (a peer
  //   never came), auth, mismatch (size/epoch/streams), version, protocol, io, naming the
  //   address or peer at fault.
  status run() {
    if (auto st = listen(); !st) return st;
    hello = wire::make_hello(me, p, o.epoch, port, streams);
    status st;
    if (!o.peers.empty())
      st = mesh(0);
    else if (me == 0)  // coordinator rendezvous: rank 0 collects and sends the table
      st = coordinate();
    else
      st = join();
    listener.reset();
    return st;
  }

  std::vector<std::shared_ptr<tcp_core>>& cores;
  tcp_options& o;
  deadline d;
  int p, me, streams;
  int buffer;  // SO_SNDBUF / SO_RCVBUF of every connection (0: autotuning)
  std::vector<std::vector<rv_conn>> conns;  // conns[stream][rank]
  std::vector<sockaddr_in> addr;
  fd_owner listener;
  std::uint16_t port = 0;
  wire::hello_body hello{};

  // Stream k of the connection to rank r.
  rv_conn& conn(int k, int r) {
    return conns[static_cast<std::size_t>(k)][static_cast<std::size_t>(r)];
  }

 private:
  // The I/O context stream k's connections live on.
  asio::io_context& io(int k) { return cores[static_cast<std::size_t>(k)]->io; }

  static std::string with(std::string m, const std::string& why) {
    return why.empty() ? m : m + " [" + why + "]";
  }

  // A connected descriptor as a connection of stream k; with TLS after the TLS handshake (as
  // client when we connected) by the deadline.
  result<rv_conn> open(fd_owner fd, bool client, int k, std::string& why) {
    return open_conn(io(k), cores[static_cast<std::size_t>(k)]->tls_ctx.get(), o.tls.peer_name,
                     std::move(fd), client, d, why);
  }

  // Our listening socket (the peers' addresses, the coordinator's, known from here on).
  status listen() {
    sockaddr_in la{};
    if (!o.peers.empty()) {
      auto a = resolve_ipv4(o.peers[static_cast<std::size_t>(me)]);
      if (!a) return a.error();
      la = a.value();
      for (int r = 0; r < p; ++r) {
        auto ar = resolve_ipv4(o.peers[static_cast<std::size_t>(r)]);
        if (!ar) return ar.error();
        addr[static_cast<std::size_t>(r)] = ar.value();
      }
    } else {
      auto c = resolve_ipv4(o.coordinator);
      if (!c) return c.error();
      addr[0] = c.value();
      if (me == 0) {
        la = c.value();
      } else {
        auto l = resolve_ipv4(o.listen_host + ":0");
        if (!l) return l.error();
        la = l.value();
      }
    }
    if (me < p - 1 || (o.peers.empty() && me == 0)) {
      auto l = listen_on(la, p * streams + 8, buffer, port);
      if (!l) return l.error();
      listener = std::move(l.value());
    }
    return {};
  }

  // Connects stream k of the link to rank r.
  status connect_to(int r, int k) {
    auto& a = addr[static_cast<std::size_t>(r)];
    const std::string who = "asio_tcp rank " + std::to_string(me) + " -> rank " +
                            std::to_string(r) + " at " + to_string(a) +
                            (streams > 1 ? " (stream " + std::to_string(k) + ")" : "") + ": ";
    wire::hello_body mine = hello;
    mine.stream = static_cast<std::uint16_t>(k);
    while (true) {
      auto s = connect_retry(a, buffer, d);
      if (!s)
        return paco::error{s.error().code,
                           "asio_tcp rank " + std::to_string(me) + ": " + s.error().message};
      std::string why;
      auto c = open(std::move(s.value()), true, k, why);
      result<wire::hello_body> h =
          c ? c.value().over(io(k), why,
                             [&](auto& ch) { return client_handshake(ch, mine, r, o.token, d); })
            : result<wire::hello_body>(c.error());
      if (h) {
        conn(k, r) = std::move(c.value());
        return {};
      }
      // A peer that is not up yet may reset us: retry; anything it said is final.
      if (h.error().code != errc::peer_lost || clock::now() >= d)
        return paco::error{h.error().code, who + with(h.error().message, why)};
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }

  // Accepts until streams k0..k1-1 of every rank in `want` are connected; refused connections
  // do not count. stop_on_twice (a fixed-size coordinator's admission): a second process
  // claiming an admitted rank stops the group (stop_group): errc::mismatch naming both
  // addresses, on this rank and every process connected.
  status accept_from(std::vector<int> want, std::vector<std::uint16_t>* ports, int k0, int k1,
                     bool stop_on_twice = false) {
    std::size_t got = 0;
    const std::size_t need = want.size() * static_cast<std::size_t>(k1 - k0);
    std::string last;
    while (got < need) {
      sockaddr_in pa{};
      auto s = accept_until(listener.get(), d, pa);
      if (!s)
        return paco::error{s.error().code, "asio_tcp rank " + std::to_string(me) + ": " +
                                               std::to_string(need - got) +
                                               " connection(s) of peers never arrived" +
                                               (last.empty() ? "" : "; last refused: " + last)};
      // Which stream this is the client's hello says; the connection is opened on stream 0's
      // context meanwhile (only TLS streams are bound to one, and TLS has one stream per link).
      std::string why;
      bool member_differs = false;
      auto c = open(std::move(s.value()), false, 0, why);
      result<wire::hello_body> h =
          c ? c.value().over(io(0), why,
                             [&](auto& ch) {
                               return server_handshake(ch, hello, o.token, d, &member_differs);
                             })
            : result<wire::hello_body>(c.error());
      // A member of this launch set up otherwise (group size, streams) will not change by
      // waiting: the group stops now rather than at the deadline.
      if (!h && member_differs)
        return stop_group("a member of this launch at " + to_string(pa) +
                              " was set up otherwise: " + h.error().message,
                          std::move(c.value()));
      if (!h) {
        last = to_string(pa) + ": " + with(h.error().message, why);
        if (c) c.value().refuse_close();
        continue;
      }
      int r = static_cast<int>(h.value().rank);
      const int hk = h.value().stream;
      const bool wanted = std::find(want.begin(), want.end(), r) != want.end();
      if (stop_on_twice && wanted && hk == 0 && conn(0, r).open()) {
        const std::string why = "rank " + std::to_string(r) + " was started twice (from " +
                                to_string(addr[static_cast<std::size_t>(r)]) + " and from " +
                                to_string(pa) + "): every rank of the group stops";
        return stop_group(why, std::move(c.value()));
      }
      if (!wanted || hk < k0 || hk >= k1 || conn(hk, r).open()) {
        last = "unexpected or duplicate rank " + std::to_string(r) + " (stream " +
               std::to_string(hk) + ")";
        c.value().refuse_close();
        continue;
      }
      conn(hk, r) = std::move(c.value());
      if (hk == 0) addr[static_cast<std::size_t>(r)] = pa;
      if (ports) (*ports)[static_cast<std::size_t>(r)] = h.value().listen_port;
      ++got;
    }
    return {};
  }

  // Connects every stream to ranks first..me-1 and accepts the ranks above me.
  status mesh(int first) {
    for (int r = first; r < me; ++r)
      for (int k = 0; k < streams; ++k)
        if (auto st = connect_to(r, k); !st) return st;
    std::vector<int> above;
    for (int r = me + 1; r < p; ++r) above.push_back(r);
    return accept_from(above, nullptr, 0, streams);
  }

  // The coordinator refuses the group: a refuse frame carrying errc::mismatch and `why` goes
  // to every admitted member and to `extra` (the process at fault), which close. Ensures: the
  // error, naming why.
  status stop_group(const std::string& why, rv_conn extra) {
    const auto text =
        std::as_bytes(std::span(why.data(), std::min(why.size(), wire::max_refuse_reason)));
    const auto refuse = [&](rv_conn& c) {
      std::string ignored;
      (void)c.over(io(0), ignored, [&](auto& ch) {
        return send_frame(ch, wire::kind::refuse, text, d,
                          static_cast<std::uint32_t>(errc::mismatch));
      });
      c.refuse_close();
    };
    for (int r = 1; r < p; ++r)
      if (conn(0, r).open()) refuse(conn(0, r));
    refuse(extra);
    return paco::error{errc::mismatch, "asio_tcp coordinator: " + why};
  }

  // Rank 0 of the coordinator rendezvous: admits the members, sends each the table.
  status coordinate() {
    std::vector<int> all;
    for (int r = 1; r < p; ++r) all.push_back(r);
    std::vector<std::uint16_t> ports(static_cast<std::size_t>(p));
    if (o.join_window.count() > 0) {  // elastic: admit whoever arrives within the window
      auto window_end = std::min(d, clock::now() + o.join_window);
      auto saved = d;
      d = window_end;
      auto st = accept_from(all, &ports, 0, 1);
      d = saved;
      if (!st && st.error().code != errc::timeout) return st.error();
    } else if (auto st = accept_from(all, &ports, 0, 1, /*stop_on_twice=*/true); !st) {
      return st.error();
    }
    // Members by id; the table's header carries the group size, entry.reserved the id.
    std::vector<int> members{0};
    for (int r = 1; r < p; ++r)
      if (conn(0, r).open()) members.push_back(r);
    const int q = static_cast<int>(members.size());
    if (q == 1 && p > 1 && !o.allow_single)
      return paco::error{errc::timeout,
                         "asio_tcp coordinator: no member joined within join_window"};
    std::vector<wire::table_entry> table(static_cast<std::size_t>(q));
    for (int k = 0; k < q; ++k) {
      auto id = static_cast<std::size_t>(members[static_cast<std::size_t>(k)]);
      if (k > 0) {
        table[static_cast<std::size_t>(k)].ipv4 = ntohl(addr[id].sin_addr.s_addr);
        table[static_cast<std::size_t>(k)].port = ports[id];
      }
      table[static_cast<std::size_t>(k)].reserved = static_cast<std::uint16_t>(id);
    }
    auto tb = std::as_bytes(std::span(table));
    std::vector<rv_conn> renumbered(static_cast<std::size_t>(q));
    for (int k = 1; k < q; ++k) {
      auto id = static_cast<std::size_t>(members[static_cast<std::size_t>(k)]);
      std::string why;
      if (auto ec = conns[0][id].over(io(0), why, [&](auto& ch) {
            return send_frame(ch, wire::kind::table, tb, d, static_cast<std::uint32_t>(q));
          }))
        return paco::error{
            ec, with("asio_tcp coordinator: sending the table to rank " + std::to_string(id), why)};
      renumbered[static_cast<std::size_t>(k)] = std::move(conns[0][id]);
    }
    for (auto& c : conns) c.resize(static_cast<std::size_t>(q));
    conns[0] = std::move(renumbered);
    o.size = q;
    p = q;
    // The members' other streams, by their assigned ranks (they connect them after the table).
    if (streams > 1) {
      std::vector<int> assigned;
      for (int r = 1; r < q; ++r) assigned.push_back(r);
      hello = wire::make_hello(me, p, o.epoch, port, streams);
      if (auto st = accept_from(assigned, nullptr, 1, streams); !st) return st.error();
    }
    listener.reset();
    return {};
  }

  // A member of the coordinator rendezvous: reads the table (renumbered in an elastic group),
  // then connects to the members below it and accepts those above.
  status join() {
    if (auto st = connect_to(0, 0); !st) return st.error();
    wire::frame_header h;
    std::vector<std::byte> pl;
    std::string why;
    // The table, or the coordinator's refusal of the group with its reason (stop_group).
    const std::size_t most =
        std::max(sizeof(wire::table_entry) * static_cast<std::size_t>(p), wire::max_refuse_reason);
    if (auto ec =
            conn(0, 0).over(io(0), why, [&](auto& ch) { return read_frame(ch, h, pl, most, d); }))
      return paco::error{
          ec,
          with("asio_tcp rank " + std::to_string(me) + ": reading the coordinator's table", why)};
    if (h.kind == static_cast<std::uint8_t>(wire::kind::refuse))
      return paco::error{
          h.aux != 0 ? static_cast<errc>(h.aux) : errc::protocol,
          "asio_tcp rank " + std::to_string(me) + ": the coordinator stopped the " +
              "group: " + std::string(reinterpret_cast<const char*>(pl.data()), pl.size())};
    const std::size_t q = h.aux;  // the group size the coordinator decided
    if (h.kind != static_cast<std::uint8_t>(wire::kind::table) || q < 2 ||
        q > static_cast<std::size_t>(p) || pl.size() != sizeof(wire::table_entry) * q)
      return paco::error{errc::protocol, "asio_tcp: coordinator sent no valid table"};
    int new_rank = -1;
    for (std::size_t k = 0; k < q; ++k) {
      wire::table_entry e;
      std::memcpy(&e, pl.data() + sizeof e * k, sizeof e);
      if (e.reserved == static_cast<std::uint16_t>(me)) new_rank = static_cast<int>(k);
      if (k == 0) continue;
      addr[k].sin_family = AF_INET;
      addr[k].sin_addr.s_addr = htonl(e.ipv4);
      addr[k].sin_port = htons(e.port);
    }
    if (new_rank < 1)
      return paco::error{errc::protocol, "asio_tcp: coordinator's table lacks this member"};
    if (static_cast<int>(q) != p || new_rank != me) {  // elastic: renumbered
      auto c0 = std::move(conn(0, 0));
      for (auto& c : conns) {
        c.clear();
        c.resize(q);
      }
      conn(0, 0) = std::move(c0);
      me = new_rank;
      p = static_cast<int>(q);
      o.rank = me;
      o.size = p;
      hello = wire::make_hello(me, p, o.epoch, port, streams);
    }
    for (int k = 1; k < streams; ++k)  // the coordinator's link's other streams
      if (auto st = connect_to(0, k); !st) return st.error();
    return mesh(1);
  }
};

// The cores of a connected endpoint, one per stream (tcp_options::streams), their I/O threads
// running (see asio_tcp::connect()).
inline result<std::vector<std::shared_ptr<tcp_core>>> connect_cores(tcp_options o) {
  if (auto st = check_tcp_options(o); !st) return st.error();
  const bool elastic = o.join_window.count() > 0;
  if (elastic && o.size == 1 && !o.allow_single) o.allow_single = true;  // checked after admission

  // The endpoint's cores come first: with TLS the rendezvous' streams live on their
  // io_context (run on this thread until the I/O thread starts) and become the links.
  auto ctx = tls_context_for(o.tls);
  if (!ctx) return ctx.error();
  std::vector<std::shared_ptr<tcp_core>> cores;
  for (int k = 0; k < o.streams; ++k) {
    cores.push_back(std::make_shared<tcp_core>());
    cores.back()->tls_ctx = ctx.value();
  }

  tcp_rendezvous rv(cores, o);
  if (auto st = rv.run(); !st) return st.error();
  const int p = rv.p, me = rv.me;

  for (std::size_t k = 0; k < cores.size(); ++k) {  // core k carries stream k of every link
    auto& core = cores[k];
    core->o = o;
    core->lim.max_payload = core->o.max_frame_bytes;
    core->links.resize(static_cast<std::size_t>(p));
    auto now = clock::now();
    for (int r = 0; r < p; ++r) {
      if (r == me) continue;
      auto L = std::make_unique<tcp_link>(core->io);
      L->peer = r;
      if (auto st = L->stream.adopt(rv.conn(static_cast<int>(k), r), rv.buffer); !st)
        return st.error();
      L->last_rx = L->last_tx = L->tok_t = now;
      L->shaper = core->o.shaper_to(r);
      if (cores.size() > 1) {  // the link's rate is shared by its streams
        const auto n = static_cast<double>(cores.size());
        L->shaper.rate_bytes_per_s /= n;
        L->shaper.burst_bytes = std::max<std::size_t>(1, L->shaper.burst_bytes / cores.size());
      }
      L->tokens = static_cast<double>(L->shaper.burst_bytes);
      core->links[static_cast<std::size_t>(r)] = std::move(L);
    }
  }
  for (auto& core : cores) {
    core->work.emplace(core->io.get_executor());
    for (auto& L : core->links)
      if (L) read_header(*core, *L);
    heartbeat(*core);
    core->io.restart();  // the TLS rendezvous ran it on this thread until it was out of work
    core->th = std::thread([c = core.get()] { c->io.run(); });
  }
  return cores;
}

}  // namespace paco::net::detail
