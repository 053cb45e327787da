#pragma once
// The ranks of an engine's launch (mpirun, srun: net::rank_from_env) meet before any role runs:
// rank 0 coordinates a TCP group at the rendezvous address (asio_tcp's coordinator rendezvous,
// the PACO_TOKEN handshake), every other rank joins it, and rank 0 sends every rank one text —
// what its `produce` returned (the configuration it read, once; a job's fingerprint) or why the
// launch cannot run. So every rank stops with the same clear error when:
//   - a rank was started twice while the group forms: the coordinator's rendezvous names the
//     rank and both addresses (net/detail/tcp_connect.hpp: stop_group), on every process
//     connected (one that comes after the group formed finds no meeting and fails alone);
//   - rank 0 refuses the launch (a world too small for the job, a configuration it cannot read):
//     every rank prints rank 0's reason;
// and ranks > 0 need no configuration file of their own.
//
//   rendezvous  PACO_COORDINATOR, else MASTER_ADDR:MASTER_PORT (net::coordinator_from_env),
//               else 127.0.0.1:29399 (one machine). Over several machines set it on every rank
//               to rank 0's host and a free port.
//   members     listen on every interface for the group's mesh (asio_tcp's coordinator mode
//               connects every pair: N² connections, for seconds, at the start).
//   the text    crosses in the clear (the token authenticates, nothing encrypts): it holds no
//               secret (the token and TLS keys are never in a configuration).
//
//   auto text = job::meet_ranks(who, [&] { return read_my_config(); }, {.token = t, .epoch = 1});
//   auto cfg = job::launch_configuration<my_config>(read, parse, is_mpi, false, 1);  // read once
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "paco/core/error.hpp"
#include "paco/net/asio_tcp.hpp"
#include "paco/net/launch_env.hpp"

namespace paco::job {

// The rendezvous port on one machine, when the environment names none (the store's ranks use
// launch.base_port + s, 29400 + s by default).
constexpr int default_meeting_port = 29399;

// The meetings of a launch (meeting_options::epoch): a program's sharing of its configuration
// before its job exists (launch_configuration), then run_ranks' own (job/ranks.hpp).
constexpr std::uint64_t meeting_epoch_configuration = 1;
constexpr std::uint64_t meeting_epoch_roles = 2;

struct meeting_options {
  std::string rendezvous;  // "host:port" of rank 0; empty: the environment's, else the default
  std::string token;       // the group's secret (PACO_TOKEN); required
  std::chrono::milliseconds wait{120000};  // for the group to form and for rank 0's text
  std::uint64_t epoch = 0;  // meetings of one launch differ: a rank never joins another's
  std::size_t max_text_bytes = std::size_t(64) << 20;
};

namespace detail {

// The frame before the text: ok (1) or the errc of rank 0's refusal, and the text's length.
struct meeting_header {
  std::uint32_t ok = 0;
  std::uint32_t code = 0;
  std::uint64_t bytes = 0;
};
inline constexpr net::tag_t meeting_tag = 0x6d656574;  // "meet"

}  // namespace detail

// The rendezvous of a meeting: o.rendezvous, else the environment's, else 127.0.0.1:29399.
// Errors: the environment's (net::coordinator_from_env).
inline result<std::string> meeting_rendezvous(const meeting_options& o) {
  if (!o.rendezvous.empty()) return o.rendezvous;
  auto env = net::coordinator_from_env();
  if (!env) return env.error();
  if (*env) return **env;
  return "127.0.0.1:" + std::to_string(default_meeting_port);
}

// Requires: who.size ≥ 2; produce is called on rank 0 only. Ensures: every rank returns rank 0's
// text, or an error — rank 0's refusal ("rank 0: <its message>", its errc) on every rank, or the
// group's (mismatch: a rank started twice, naming it; timeout: the group did not form within
// o.wait, saying where it was awaited).
inline result<std::string> meet_ranks(const net::launch_rank& who,
                                      const std::function<result<std::string>()>& produce,
                                      const meeting_options& o) {
  const std::string me = "rank " + std::to_string(who.rank);
  auto at = meeting_rendezvous(o);
  if (!at) return at.error();
  result<std::string> mine = std::string();
  if (who.rank == 0) mine = produce();
  net::tcp_options t;
  t.rank = who.rank;
  t.size = who.size;
  t.coordinator = *at;
  t.listen_host = "0.0.0.0";
  t.token = o.token;
  t.epoch = o.epoch;
  t.connect_timeout = o.wait;
  t.peer_timeout = std::chrono::milliseconds(10000);
  auto g = net::asio_tcp::connect(t);
  if (!g) {
    const auto& e = g.error();
    std::string why = me + " of " + std::to_string(who.size) + ": the launch's group at " + *at +
                      " did not form: " + e.message;
    if (who.rank == 0 && e.message.find("in use") != std::string::npos)
      why +=
          " (another process holds the rendezvous: rank 0 started twice, or another launch at "
          "the same address)";
    if (e.code == errc::timeout && who.rank > 0)
      why +=
          " (rank 0 forms it once it has read its configuration, when that says launch.mode = "
          "\"mpi\"; over several machines set PACO_COORDINATOR=<rank 0's host>:<port> on every "
          "rank)";
    return error(e.code, why);
  }
  auto& net = **g;
  const auto until = net::after(o.wait);
  if (who.rank == 0) {
    detail::meeting_header h;
    const std::string& text = mine ? *mine : mine.error().message;
    h.ok = mine ? 1 : 0;
    h.code = mine ? 0 : std::uint32_t(mine.error().code.value());
    h.bytes = text.size();
    std::vector<net::asio_tcp::request> sent;
    for (int r = 1; r < who.size; ++r) {
      sent.push_back(net.send(r, detail::meeting_tag, std::as_bytes(std::span(&h, 1)), until));
      sent.push_back(net.send(r, detail::meeting_tag + 1,
                              std::as_bytes(std::span(text.data(), text.size())), until));
    }
    for (auto& q : sent)
      if (auto ec = q.wait())
        return error(ec,
                     me + ": sending the launch's configuration to every rank: " + ec.message());
    net.close();
    if (!mine) return error(mine.error().code, "rank 0: " + mine.error().message);
    return *mine;
  }
  detail::meeting_header h;
  if (auto ec =
          net.recv(0, detail::meeting_tag, std::as_writable_bytes(std::span(&h, 1)), until).wait())
    return error(ec, me + ": receiving rank 0's configuration: " + ec.message());
  if (h.bytes > o.max_text_bytes)
    return error(errc::too_large, me + ": rank 0 announced a configuration of " +
                                      std::to_string(h.bytes) + " bytes (at most " +
                                      std::to_string(o.max_text_bytes) + ")");
  std::string text(std::size_t(h.bytes), '\0');
  if (auto ec = net.recv(0, detail::meeting_tag + 1,
                         std::as_writable_bytes(std::span(text.data(), text.size())), until)
                    .wait())
    return error(ec, me + ": receiving rank 0's configuration: " + ec.message());
  net.close();
  if (h.ok != 1) {
    const auto code = static_cast<errc>(h.code);
    return error(code == errc::ok ? errc::protocol : code, "rank 0: " + text);
  }
  return text;
}

// A program's configuration, read once in an engine's launch. Outside one (no rank in the
// environment, a world of one, an environment whose variables are in error: run_ranks reports
// those): read() and parse() here. Rank 0 of a world of two or more: read() and parse(); when
// engine(config) says the configuration asks for an engine's launch (true), or, when it cannot
// be read, asked_on_command_line does, the ranks meet (epoch: the caller's, e.g.
// meeting_epoch_configuration) and rank 0 sends the text read() returned, or its error, or
// engine's refusal. Every other rank reads nothing: it parses what rank 0 sent.
// Requires: read() returns the configuration as a text parse() takes (a file's text and the
// program's overrides, say); the same parse() on every rank. Errors: read's and parse's; rank
// 0's refusal ("rank 0: …") on every rank; the meeting's; the missing token, naming PACO_TOKEN.
template <class Config>
result<Config> launch_configuration(const std::function<result<std::string>()>& read,
                                    const std::function<result<Config>(const std::string&)>& parse,
                                    const std::function<result<bool>(const Config&)>& engine,
                                    bool asked_on_command_line, std::uint64_t epoch) {
  const auto here = [&]() -> result<Config> {
    auto text = read();
    if (!text) return text.error();
    return parse(*text);
  };
  auto who = net::rank_from_env();
  if (!who || !*who || (*who)->size < 2) return here();
  const net::launch_rank& me = **who;
  // The token is asked for only where a meeting takes place (rank 0 of an sbatch script's shell,
  // SLURM_PROCID=0 of SLURM_NTASKS=N, runs a local launch that draws its own).
  const char* token = std::getenv("PACO_TOKEN");
  const auto no_token = [&] {
    return error(errc::invalid_argument,
                 "rank " + std::to_string(me.rank) +
                     ": PACO_TOKEN is not set (every rank of the launch needs the same one: "
                     "mpirun -x PACO_TOKEN; srun passes the environment)");
  };
  const meeting_options mo{.token = token ? token : "", .epoch = epoch};
  if (me.rank > 0) {
    if (mo.token.empty()) return no_token();
    auto shared = meet_ranks(me, {}, mo);
    if (!shared) return shared.error();
    return parse(*shared);
  }
  auto text = read();
  result<Config> cfg = text ? parse(*text) : result<Config>(text.error());
  auto wanted = cfg ? engine(*cfg) : result<bool>(asked_on_command_line);
  if (wanted && !*wanted) return cfg;  // not an engine's launch: nothing to share
  if (mo.token.empty()) return no_token();
  auto shared = meet_ranks(
      me,
      [&]() -> result<std::string> {
        if (!cfg) return cfg.error();
        if (!wanted) return wanted.error();
        return *text;
      },
      mo);
  if (!shared) return shared.error();
  return cfg;
}

}  // namespace paco::job
