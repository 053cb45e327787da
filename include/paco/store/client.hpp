#pragma once
// client: the worker side of the module store service (server.hpp) over any
// Transport. It models the ModuleStore and EncodedModuleStore concepts of path_worker: pull,
// push (fp32 Δ), push_encoded (a compress::module_codec payload) and wait_closed go to the store
// rank that owns the module (store_layout), in the messages of wire.hpp; describe asks a store
// for its run's description (what a worker starting from nothing needs).

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <span>
#include <string>

#include "paco/core/hash.hpp"
#include "paco/net/concepts.hpp"
#include "paco/store/concepts.hpp"
#include "paco/store/link.hpp"
#include "paco/store/wire.hpp"

namespace paco::store {

// The worker side: models the Store interface of path_worker over a Transport.
template <net::Transport T>
class client {
 public:
  using module_store_tag = void;

  // One world: store id s is rank s of t.
  client(T& t, store_layout layout, int worker,
         std::chrono::milliseconds io_timeout = std::chrono::milliseconds(10000))
      : layout_(std::move(layout)), worker_(worker), io_(io_timeout) {
    for (int s : layout_.store_ranks) stores_[s] = {&t, s};
  }
  // One link per store id (a star): links[s] reaches store s.
  client(std::map<int, worker_link<T>> links, store_layout layout, int worker,
         std::chrono::milliseconds io_timeout = std::chrono::milliseconds(10000))
      : layout_(std::move(layout)), worker_(worker), io_(io_timeout), stores_(std::move(links)) {}

  std::size_t bytes_sent() const noexcept { return bytes_out_; }
  std::size_t bytes_received() const noexcept { return bytes_in_; }
  // Pushes the store took into a later round than their base: merged late, at a staleness
  // weight (server_options::max_staleness); the reply carries the push's staleness.
  long merged_late() const noexcept { return merged_late_; }
  // Module m's push pace as the store last reported it in a wait reply (store/push_pace.hpp:
  // how long after a round opens its on-time pushes arrive); 0 before any.
  double push_time_s(int m) const {
    const auto it = pace_.find(m);
    return it == pace_.end() ? 0.0 : it->second;
  }

  // Announces this worker to every store (after a start or a restart). Errors: version when a
  // store speaks another store protocol (wire::protocol_version; a store of an older paco
  // answers 0), naming both; the transport's.
  status hello() {
    for (int s : layout_.store_ranks) {
      wire::request rq{std::uint32_t(wire::kind::hello), -1, 0, worker_,
                       wire::protocol_version,           0,  0};
      auto got = exchange(s, rq);
      if (!got) return got.error();
      const wire::reply& rp = *got;
      if (rp.count != wire::protocol_version || rp.status == int(errc::version))
        return error(errc::version, "store " + std::to_string(s) + " speaks store protocol " +
                                        std::to_string(rp.count) + ", this worker " +
                                        std::to_string(wire::protocol_version) +
                                        " (the worker and the store are different paco versions)");
      if (rp.status != 0)
        return error(static_cast<errc>(rp.status),
                     "store " + std::to_string(s) + " refused this worker's hello");
    }
    return {};
  }
  // Tells every store this worker is done (it is no longer expected in later rounds).
  status bye() {
    for (int s : layout_.store_ranks) {
      wire::request rq{std::uint32_t(wire::kind::bye), -1, 0, worker_, 0, 0, 0};
      auto& l = stores_.at(s);
      auto r = l.t->send(l.peer, wire::request_tag, wire::bytes_of(rq), deadline());
      if (auto ec = r.wait()) return error(ec, "bye to store " + std::to_string(s));
    }
    return {};
  }

  // The description of the run that store s serves (server_options::describe), at most
  // max_bytes. Errors: unsupported (the store serves none), too_large (the store announced more
  // than max_bytes: nothing is read, the link must be dropped), corrupt (the bytes do not hash to
  // what the store announced), the transport's.
  result<std::string> describe(std::size_t max_bytes = std::size_t(64) << 20, int s = 0) {
    wire::request rq{std::uint32_t(wire::kind::describe), -1, 0, worker_, 0, 0, 0};
    auto rp = call(s, rq);
    if (!rp)
      return error(rp.error().code, "store " + std::to_string(s) +
                                        " does not describe its run: " + rp.error().message);
    if (rp->count > max_bytes)
      return error(errc::too_large, "store " + std::to_string(s) + " announced a description of " +
                                        std::to_string(rp->count) + " bytes, more than " +
                                        std::to_string(max_bytes));
    std::string d(rp->count, '\0');
    auto& l = stores_.at(s);
    auto r =
        l.t->recv(l.peer, wire::data_tag, std::as_writable_bytes(std::span<char>(d)), deadline());
    if (auto ec = r.wait())
      return error(ec, "receiving the description of store " + std::to_string(s));
    bytes_in_ += d.size();
    if (hash64(d.data(), d.size()) != rp->hash)
      return error(errc::corrupt,
                   "the description of store " + std::to_string(s) + " does not match its hash");
    return d;
  }

  // Tells every store how this worker's round went (server_options::on_report): its loss and
  // throughput, for status pages. No reply; not counted in bytes_sent() (which counts the
  // sync's bytes). Errors: the transport's.
  status report(long round, double loss, double tokens_per_s) {
    for (int s : layout_.store_ranks) {
      wire::request rq{std::uint32_t(wire::kind::report),         -1, round, worker_, 0, loss,
                       std::uint64_t(std::max(0.0, tokens_per_s))};
      auto& l = stores_.at(s);
      auto r = l.t->send(l.peer, wire::request_tag, wire::bytes_of(rq), deadline());
      if (auto ec = r.wait()) return error(ec, "report to store " + std::to_string(s));
    }
    return {};
  }

  result<pulled> pull(int m, std::span<float> dst) {
    const int s = layout_.owner(m);
    wire::request rq{std::uint32_t(wire::kind::pull), m, 0, worker_, 0, 0, dst.size()};
    auto rp = call(s, rq);
    if (!rp) return rp.error();
    if (rp->count != dst.size())
      return error(errc::mismatch, "module " + std::to_string(m) + " has " +
                                       std::to_string(rp->count) + " elements, expected " +
                                       std::to_string(dst.size()));
    auto& l = stores_.at(s);
    auto r = l.t->recv(l.peer, wire::data_tag, std::as_writable_bytes(dst), deadline());
    if (auto ec = r.wait()) return error(ec, "pulling module " + std::to_string(m));
    bytes_in_ += dst.size_bytes();
    return pulled{rp->round, rp->hash};
  }

  status push(int m, int /*worker*/, long round, std::span<const float> delta, double weight) {
    const int s = layout_.owner(m);
    auto& l = stores_.at(s);
    wire::request rq{std::uint32_t(wire::kind::push), m, round, worker_, 0, weight, delta.size()};
    auto h = l.t->send(l.peer, wire::request_tag, wire::bytes_of(rq), deadline());
    auto p = l.t->send(l.peer, wire::payload_tag, std::as_bytes(delta), deadline());
    if (auto ec = h.wait()) return error(ec, "push header to store " + std::to_string(s));
    if (auto ec = p.wait()) return error(ec, "push payload to store " + std::to_string(s));
    bytes_out_ += sizeof rq + delta.size_bytes();
    wire::reply rp{};
    auto r = l.t->recv(l.peer, wire::reply_tag, wire::bytes_of(rp), deadline());
    if (auto ec = r.wait()) return error(ec, "push reply from store " + std::to_string(s));
    if (rp.status != 0)
      return error(static_cast<errc>(rp.status), "store refused the push of module " +
                                                     std::to_string(m) + " for round " +
                                                     std::to_string(round));
    if (rp.count > 0) ++merged_late_;  // its staleness
    return {};
  }

  // Pushes a compress::module_codec payload of module m. Ensures: bytes_sent() grows by
  // wire::push_bytes(payload.size()). Errors: the transport's, or the store's refusal
  // (corrupt, mismatch, version: a payload it could not decode; too_large, unsupported).
  status push_encoded(int m, int /*worker*/, long round, std::span<const std::byte> payload,
                      double weight) {
    const int s = layout_.owner(m);
    auto& l = stores_.at(s);
    wire::request rq{
        std::uint32_t(wire::kind::push_encoded), m, round, worker_, 0, weight, payload.size()};
    auto h = l.t->send(l.peer, wire::request_tag, wire::bytes_of(rq), deadline());
    auto p = l.t->send(l.peer, wire::payload_tag, payload, deadline());
    if (auto ec = h.wait()) return error(ec, "push header to store " + std::to_string(s));
    if (auto ec = p.wait()) return error(ec, "push payload to store " + std::to_string(s));
    bytes_out_ += wire::push_bytes(payload.size());
    wire::reply rp{};
    auto r = l.t->recv(l.peer, wire::reply_tag, wire::bytes_of(rp), deadline());
    if (auto ec = r.wait()) return error(ec, "push reply from store " + std::to_string(s));
    if (rp.status != 0)
      return error(static_cast<errc>(rp.status),
                   "store " + std::to_string(s) + " refused the encoded push of module " +
                       std::to_string(m) + " for round " + std::to_string(round));
    if (rp.count > 0) ++merged_late_;  // its staleness
    return {};
  }

  status wait_closed(int m, long round, std::chrono::steady_clock::time_point until) {
    const int s = layout_.owner(m);
    auto& l = stores_.at(s);
    wire::request rq{std::uint32_t(wire::kind::wait), m, round, worker_, 0, 0, 0};
    auto h = l.t->send(l.peer, wire::request_tag, wire::bytes_of(rq), deadline());
    if (auto ec = h.wait()) return error(ec, "wait request to store " + std::to_string(s));
    wire::reply rp{};
    auto r = l.t->recv(l.peer, wire::reply_tag, wire::bytes_of(rp), until);
    if (auto ec = r.wait())
      return error(
          ec, "waiting for round " + std::to_string(round) + " of module " + std::to_string(m));
    if (rp.status == 0) pace_[m] = double(rp.count) / 1e6;
    return {};
  }

 private:
  // A request to store s and its reply, whatever its status. Errors: the transport's.
  result<wire::reply> exchange(int s, const wire::request& rq) {
    auto& l = stores_.at(s);
    auto h = l.t->send(l.peer, wire::request_tag, wire::bytes_of(rq), deadline());
    if (auto ec = h.wait()) return error(ec, "request to store " + std::to_string(s));
    wire::reply rp{};
    auto r = l.t->recv(l.peer, wire::reply_tag, wire::bytes_of(rp), deadline());
    if (auto ec = r.wait()) return error(ec, "reply from store " + std::to_string(s));
    return rp;
  }
  // The same, and an error for a reply that refuses it.
  result<wire::reply> call(int s, const wire::request& rq) {
    auto rp = exchange(s, rq);
    if (rp && rp->status != 0)
      return error(static_cast<errc>(rp->status), "store " + std::to_string(s) + " refused");
    return rp;
  }
  net::deadline deadline() const { return net::after(io_); }

  store_layout layout_;
  int worker_;
  std::chrono::milliseconds io_;
  std::map<int, worker_link<T>> stores_;
  std::size_t bytes_out_ = 0, bytes_in_ = 0;
  long merged_late_ = 0;
  std::map<int, double> pace_;  // per module, the push pace of its last wait reply
};

}  // namespace paco::store
