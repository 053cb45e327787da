#pragma once
// server: the store side of the module store service over any Transport (inproc threads,
// Asio TCP, MPI). A store rank owns modules (module m lives on store rank owner(m),
// store_link.hpp); it answers its workers' pulls, applies their pushes and closes rounds.
//
// Wire protocol: wire.hpp (packed little-endian requests and replies). A push carries
// fp32 Δ, or (push_encoded) a compress::module_codec payload that the store decodes with its
// own codec of that module (server_options::codecs) before pushing it to the
// module_store; a payload that fails to decode (checksum, header, levels, body) is refused with
// errc::corrupt / mismatch / version in the reply, recorded in refusals(), and never applied.
// A round of module m closes when every contributor is in, or round_timeout after it opened:
// the contributors are the workers through m that are live (and take part in that round) plus
// those that already pushed to it. A worker that dies after its push is not waited for and its
// push is kept (it is valid work); a partner's death never closes a round before a live
// partner's push, so an on-time push is never refused because another worker died. Late and
// dead workers are left out; a round nobody pushed to closes with θ unchanged, so no round
// waits forever. A worker whose transport link fails is marked dead; a "hello" (or a new link)
// from it later marks it alive again and it joins at one round R for all its modules (so does a
// worker whose modules a restarted store holds at different rounds): a module
// of its path that nobody else is training and that holds no push (it only closed empty rounds,
// which leave θ and the outer state unchanged) is re-aligned to R at once by closing its empty
// rounds, so the worker pulls a consistent path and no partner waits for it more than a round.
// Every refused push is reported (on_refuse) with whether it was on time (it reached the store
// within round_timeout of its round opening) or late; ontime_refused() counts the former,
// late_refused() every push whose round had closed (dropped: the worker goes on with the next
// round, as DiLoCo's dropout robustness intends).
// With a quorum (server_options::quorum = q > 0) a round also closes once q of its contributors
// pushed from its base and a grace window has passed since the q-th push: grace × the median
// push spread (first to last on-time push) of the module's recent rounds, so a round waits for
// a partner near the pack and not for one far behind. With late merging
// (module_store::merge_late) a late push s ≤ s_max rounds behind joins the open round,
// discounted (traffic kind push_merged; late_merged()); so the slow worker behind a quorum is
// not starved. q = 0 and s_max = 0 (the defaults) are the protocol without either.
// With server_options::rounds = R > 0 the run has an end: no module closes a round past R (a
// push for round R or later is refused, no empty round closes by deadline), and once every
// module reached R serve() returns when every worker said bye or died, or io_timeout later.

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "paco/compress/module_codec.hpp"
#include "paco/core/hash.hpp"
#include "paco/core/stats.hpp"
#include "paco/net/concepts.hpp"
#include "paco/store/link.hpp"
#include "paco/store/module_store.hpp"
#include "paco/store/push_pace.hpp"
#include "paco/store/wire.hpp"

namespace paco::store {

// What moved through a store (server_options::on_traffic): a push accepted, accepted into a
// later round than its base (merged late, discounted), refused because its round had closed
// without it (late), or refused otherwise (a bad payload, a duplicate, past the
// run's end); a pull; or the live workers changed. bytes: the payload (a push as received, a
// pull's θ as sent).
struct traffic {
  enum class kind { push_accepted, push_merged, push_late, push_refused, pull, live };
  kind what = kind::live;
  int worker = -1, module = -1;
  long round = 0;
  std::size_t bytes = 0;
  std::size_t live = 0;  // workers live after the event
  bool alive = true;     // live: whether `worker` joined (true) or left (false: died, or bye)
};

// A worker's account of a round it completed (client::report), for a status page.
struct worker_report {
  int worker = -1;
  long round = 0;
  double loss = 0;          // its training loss over the round (nats per token)
  double tokens_per_s = 0;  // its inner steps' throughput
};

struct server_options {
  std::chrono::milliseconds round_timeout{60000};  // after a round opened; > a round's compute
  std::chrono::milliseconds io_timeout{10000};     // one send or recv
  // Called after every round close (e.g. to checkpoint the store), on the serving thread.
  std::function<void(const store::round_summary&)> on_close = {};
  // Decoders of encoded pushes, one per module (make_codecs over every module's level span);
  // null: the store takes fp32 pushes only.
  std::shared_ptr<const std::vector<compress::module_codec>> codecs = {};
  // Called with the reason whenever a push is refused (bad payload), on the serving thread.
  std::function<void(const std::string&)> on_refuse = {};
  long rounds = 0;  // the run's number of rounds: no module goes past it (0: no end)
  // A round closes once `quorum` of its contributors pushed from its base and the grace window
  // passed (0: only when every contributor pushed, or at round_timeout).
  int quorum = 0;
  // The grace window after the quorum's last push, as a multiple of the median push spread of
  // the module's last rounds (the current round's first-to-quorum spread before any). ≥ 0.
  double grace = 0.5;
  // The answer to a worker's describe request (client::describe), made on the serving thread
  // when asked: what a worker that starts from nothing needs to know of the run. Empty: the
  // store refuses describe (unsupported).
  std::function<std::string()> describe = {};
  // Called on the serving thread for every push and pull and whenever the live workers change:
  // what a metrics exporter counts (job/metrics.hpp).
  std::function<void(const traffic&)> on_traffic = {};
  // Called on the serving thread with every worker's report of a round.
  std::function<void(const worker_report&)> on_report = {};
};

// Serves the modules this store owns to the given workers until every worker said bye or died
// (and none can come back), or stop() is called. workers: id → the module ids it pushes.
template <net::Transport T, class OuterOpt>
class server {
 public:
  // Every worker reached through one transport in which worker id w is rank w.
  server(T& t, store::module_store<OuterOpt>& store, std::map<int, std::vector<int>> workers,
         server_options o = {})
      : store_(store), workers_(std::move(workers)), o_(std::move(o)) {
    for (auto& [w, mods] : workers_) {
      links_[w] = {&t, w};
      alive_.insert(w);
    }
  }
  // Workers reached through their own links; a worker without a link yet is attached later.
  server(std::map<int, worker_link<T>> links, store::module_store<OuterOpt>& store,
         std::map<int, std::vector<int>> workers, server_options o = {})
      : store_(store), workers_(std::move(workers)), o_(std::move(o)), links_(std::move(links)) {
    // Every worker is expected until its link fails (one not connected yet is on its way).
    for (auto& [w, mods] : workers_) alive_.insert(w);
  }

  // Thread-safe: hands the server a (new) link to worker w, e.g. after it restarted and
  // reconnected. The serve loop picks it up and starts listening to it.
  void attach(int w, worker_link<T> l) {
    std::lock_guard lk(attach_mu_);
    attached_.push_back({w, l, nullptr});
  }
  // Thread-safe: as attach(w, {t, peer}), and the server owns t: it is destroyed on the serving
  // thread once a later link of w replaces it (the old conversation ended first), or with the
  // server. Requires: t is not null.
  void attach(int w, std::unique_ptr<T> t, int peer) {
    std::lock_guard lk(attach_mu_);
    T* raw = t.get();
    attached_.push_back({w, {raw, peer}, std::move(t)});
  }
  // Thread-safe: serve() returns at its next iteration.
  void stop() { stop_ = true; }
  // While true, serve() keeps running even when no worker is connected (rejoins are possible).
  void expect_rejoins(bool on) { rejoins_ = on; }
  const std::vector<store::round_summary>& history() const { return history_; }
  std::size_t bytes_received() const { return bytes_in_; }
  // Why each refused push was refused, in order.
  const std::vector<std::string>& refusals() const { return refusals_; }
  // Workers that said bye (done for good).
  std::size_t finished() const { return finished_.size(); }
  // Pushes refused although they arrived within round_timeout of their round opening.
  std::size_t ontime_refused() const { return ontime_refused_; }
  // Pushes refused because their round had closed without them (beyond the store's
  // max_staleness).
  std::size_t late_refused() const { return late_refused_; }
  // Pushes from an earlier base round merged into a module's open round.
  std::size_t late_merged() const { return late_merged_; }
  // The pace of module m's workers (store/push_pace.hpp): the median time its on-time pushes
  // arrived after their round opened, over its last 8 rounds; 0 before any. Wait replies carry
  // it (in microseconds) to workers paced by measurement.
  double push_time_s(int m) const { return pace_.seconds(m); }

  // Runs until stop(), or no worker is left (all said bye or died). Errors: none (failures of
  // single workers are handled by leaving them out).
  void serve() {
    using namespace wire;
    std::map<int, request> hdr;
    std::map<int, typename T::request> pending;
    auto post = [&](int w) {
      auto& l = links_.at(w);
      pending[w] = l.t->recv(l.peer, request_tag, bytes_of(hdr[w]),
                             net::after(std::chrono::hours(24 * 365)));
    };
    for (auto& [w, l] : links_) post(w);
    for (int m = 0; m < store_.module_count(); ++m) opened_[m] = clock::now();
    while (!stop_ && (!pending.empty() || rejoins_) && finished_.size() < workers_.size()) {
      {
        std::lock_guard lk(attach_mu_);
        for (auto& [w, l, owned] : attached_) {
          // A new link ends the old one's conversation: its pending recv and its waits (which
          // would answer the new link with replies it never asked for); then the old transport
          // is released, if the server owns it.
          pending.erase(w);
          drop_waits(w);
          links_[w] = l;
          owned_[w] = std::move(owned);
          join(w);
          post(w);
        }
        attached_.clear();
      }
      bool any = false;
      for (auto it = pending.begin(); it != pending.end();) {
        const int w = it->first;
        if (!it->second.test()) {
          ++it;
          continue;
        }
        any = true;
        auto ec = it->second.wait();
        if (ec) {  // the link failed: the worker is dead until it says hello again
          mark_dead(w);
          it = pending.erase(it);
          continue;
        }
        const bool keep = handle(w, hdr[w]);
        if (!keep) {
          mark_dead(w);
          it = pending.erase(it);
          continue;
        }
        post(w);
        ++it;
      }
      close_due();
      answer_waits();
      if (complete()) {  // the run is over: let the workers say bye, then return
        if (!complete_at_) complete_at_ = clock::now();
        if (alive_.empty() || clock::now() - *complete_at_ > o_.io_timeout) break;
      }
      if (!any) std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  }

  // Whether every module reached server_options::rounds (false when the run has no end).
  bool complete() const {
    if (o_.rounds <= 0) return false;
    for (int m = 0; m < store_.module_count(); ++m)
      if (!ended(m)) return false;
    return true;
  }
  // Whether module m reached the run's last round (server_options::rounds; never without one).
  bool ended(int m) const { return o_.rounds > 0 && store_.round(m) >= o_.rounds; }

 private:
  using clock = std::chrono::steady_clock;

  // Returns false if the worker is gone (bye or a failed reply).
  bool handle(int w, const wire::request& rq) {
    using namespace wire;
    const auto k = static_cast<wire::kind>(rq.kind);
    if (k == wire::kind::bye) {
      alive_.erase(w);
      note({traffic::kind::live, w, -1, 0, 0, 0, false});
      finished_.insert(w);
      check_complete_all();
      return false;
    }
    if (k == wire::kind::hello) {
      if (rq.reserved != wire::protocol_version) {  // another paco: refused by name
        refusals_.push_back("worker " + std::to_string(w) + " refused: it speaks store protocol " +
                            std::to_string(rq.reserved) + ", this store " +
                            std::to_string(wire::protocol_version) +
                            " (the worker and the store are different paco versions)");
        if (o_.on_refuse) o_.on_refuse(refusals_.back());
        return send_reply(w, {int(errc::version), -1, 0, 0, wire::protocol_version});
      }
      if (!alive_.count(w)) join(w);
      return send_reply(w, {0, -1, 0, 0, wire::protocol_version});
    }
    if (k == wire::kind::report) {
      if (o_.on_report) o_.on_report({w, rq.round, rq.weight, double(rq.count)});
      return true;  // no reply: a report is news, not a question
    }
    if (k == wire::kind::describe) {
      if (!o_.describe) return send_reply(w, {int(errc::unsupported), -1, 0, 0, 0});
      const std::string d = o_.describe();
      if (!send_reply(w, {0, -1, 0, hash64(d.data(), d.size()), d.size()})) return false;
      auto& l = links_.at(w);
      return !l.t->send(l.peer, data_tag, std::as_bytes(std::span<const char>(d)), io_deadline())
                  .wait();
    }
    if (rq.module < 0 || rq.module >= store_.module_count())
      return send_reply(w, {int(errc::invalid_argument), rq.module, 0, 0, 0});
    const int m = rq.module;
    const std::size_t n = store_.info(m).size;
    if (k == wire::kind::pull) {
      buf_.resize(n);
      auto [round, hash] = store_.pull(m, buf_);
      if (!send_reply(w, {0, m, round, hash, n})) return false;
      auto& l = links_.at(w);
      auto r =
          l.t->send(l.peer, data_tag, std::as_bytes(std::span<const float>(buf_)), io_deadline());
      if (r.wait()) return false;
      note({traffic::kind::pull, w, m, round, n * sizeof(float)});
      return true;
    }
    if (k == wire::kind::push) {
      if (rq.count != n) {
        // Drain nothing: a push of the wrong size is refused before its payload is read, and the
        // worker must not send one (client checks). Treat as a protocol failure.
        return false;
      }
      buf_.resize(n);
      auto& l = links_.at(w);
      auto r = l.t->recv(l.peer, payload_tag, std::as_writable_bytes(std::span<float>(buf_)),
                         io_deadline());
      if (r.wait()) return false;
      bytes_in_ += n * sizeof(float);
      alive_.insert(w);
      auto s = push_within_run(m, w, rq.round, rq.weight);
      long stale = 0;
      if (s.ok()) {
        stale = accepted(w, m, rq.round, n * sizeof(float));
      } else {
        refuse_push(w, m, rq.round, s, n * sizeof(float));
      }
      return send_reply(
          w, {s.ok() ? 0 : s.error().code.value(), m, store_.round(m), 0, std::uint64_t(stale)});
    }
    if (k == wire::kind::push_encoded) return push_encoded(w, rq);
    if (k == wire::kind::wait) {
      waits_.push_back({w, m, rq.round});
      return true;
    }
    return send_reply(w, {int(errc::protocol), m, 0, 0, 0});
  }

  // An encoded push: a payload longer than the module's codec can produce is a protocol failure
  // (refused, the link dropped: its bytes are not read); one that fails to decode is refused
  // in the reply and the module is unchanged.
  bool push_encoded(int w, const wire::request& rq) {
    const int m = rq.module;
    const std::size_t cap = o_.codecs ? (*o_.codecs)[std::size_t(m)].max_payload_bytes() : 0;
    auto& l = links_.at(w);
    if (!o_.codecs || rq.count > cap) {
      refuse(w, m,
             o_.codecs
                 ? "a payload of " + std::to_string(rq.count) +
                       " bytes exceeds the largest this codec sends (" + std::to_string(cap) + ")"
                 : std::string("this store takes fp32 pushes only (no codecs)"));
      const errc why = o_.codecs ? errc::too_large : errc::unsupported;
      send_reply(w, {int(why), m, store_.round(m), 0, 0});
      return false;
    }
    bytes_.resize(rq.count);
    auto r = l.t->recv(l.peer, wire::payload_tag, std::span<std::byte>(bytes_), io_deadline());
    if (r.wait()) return false;
    bytes_in_ += rq.count;
    alive_.insert(w);
    buf_.resize(store_.info(m).size);
    status s = (*o_.codecs)[std::size_t(m)].decode(std::span<const std::byte>(bytes_),
                                                   slice<float>(buf_.data(), buf_.size()));
    long stale = 0;
    if (!s) {
      refuse(w, m, s.error().what());
      note({traffic::kind::push_refused, w, m, rq.round, rq.count});
    } else {
      s = push_within_run(m, w, rq.round, rq.weight);
      if (s.ok()) {
        stale = accepted(w, m, rq.round, rq.count);
      } else {
        refuse_push(w, m, rq.round, s, rq.count);
      }
    }
    return send_reply(
        w, {s.ok() ? 0 : s.error().code.value(), m, store_.round(m), 0, std::uint64_t(stale)});
  }
  // buf_ pushed to module m's round, unless the run's last round has closed.
  status push_within_run(int m, int w, long round, double weight) {
    if (ended(m))
      return {errc::mismatch, "module " + std::to_string(m) + " finished the run's " +
                                  std::to_string(o_.rounds) + " rounds"};
    return store_.push(m, w, round, buf_, weight);
  }
  // A push the module store took (into its open round: on time, or merged late).
  // Ensures: its staleness, the open round less its base round (0 on time).
  long accepted(int w, int m, long round, std::size_t bytes) {
    const long stale = store_.round(m) - round;
    const bool late = stale > 0;
    if (late) ++late_merged_;
    note({late ? traffic::kind::push_merged : traffic::kind::push_accepted, w, m, round, bytes});
    if (!late) {  // (the store counts the round's on-time pushes; this keeps their times)
      const auto now = clock::now();
      const int on_time = store_.pushed_on_time(m);
      pace_.pushed(m, std::chrono::duration<double>(now - opened_[m]).count());
      auto& q = open_[m];
      if (on_time == 1) q.first = now;
      q.last = now;
      if (on_time == o_.quorum) q.quorum_at = now;
    }
    check_complete(m);
    return stale;  // (a push the store took is at most max_staleness rounds behind)
  }
  // A push the module store refused: on time if its round opened less than round_timeout ago
  // (it closed early without this worker), late otherwise (or a duplicate, or early).
  void refuse_push(int w, int m, long round, const status& s, std::size_t bytes) {
    std::string when = "late";
    const auto it = prev_opened_.find(m);
    const bool late = s.error().code == errc::mismatch && round < store_.round(m);
    if (late) ++late_refused_;
    note({late ? traffic::kind::push_late : traffic::kind::push_refused, w, m, round, bytes});
    if (s.error().code == errc::mismatch && round == store_.round(m) - 1 &&
        it != prev_opened_.end() && clock::now() - it->second <= o_.round_timeout) {
      when = "on time";
      ++ontime_refused_;
    } else if (round == store_.round(m)) {
      when = "in its round";
    }
    refuse(w, m, "round " + std::to_string(round) + " (" + when + "): " + s.error().what());
  }
  void refuse(int w, int m, const std::string& why) {
    refusals_.push_back("push of module " + std::to_string(m) + " from worker " +
                        std::to_string(w) + " refused: " + why);
    if (o_.on_refuse) o_.on_refuse(refusals_.back());
  }

  // Tells on_traffic, with the live workers now.
  void note(traffic t) {
    if (!o_.on_traffic) return;
    t.live = alive_.size();
    o_.on_traffic(t);
  }

  bool send_reply(int w, wire::reply rp) {
    auto& l = links_.at(w);
    auto r = l.t->send(l.peer, wire::reply_tag, wire::bytes_of(rp), io_deadline());
    return !r.wait();
  }
  net::deadline io_deadline() const { return net::after(o_.io_timeout); }

  // Whether worker w takes part in module m's open round (it is through m and, after a rejoin,
  // its first round has come).
  bool takes_part(int w, int m) const {
    const auto& mods = workers_.at(w);
    if (std::find(mods.begin(), mods.end(), m) == mods.end()) return false;
    auto it = active_from_.find({w, m});
    return it == active_from_.end() || it->second <= store_.round(m);
  }
  // A worker connects. The first time, with its modules at one round, it is expected from the
  // start. After it died, or when its modules sit at different rounds (a store restarted from a
  // checkpoint written between two of their closes), it joins at round R: the first round not
  // yet started on every one of its modules (after a death, rounds with pushes already in finish
  // without it). A module of its path below R that holds no push and that no other live worker
  // trains is re-aligned to R by closing its empty rounds (no-ops on θ), so the worker can pull
  // all its modules at one round; the others reach R with their live workers.
  void join(int w) {
    alive_.insert(w);
    note({traffic::kind::live, w});
    const bool died = died_.count(w) > 0;
    long R = 0, lo = -1;
    for (int m : workers_.at(w)) {
      R = std::max(R, store_.round(m) + (died && store_.pushed(m) > 0 ? 1 : 0));
      lo = lo < 0 ? store_.round(m) : std::min(lo, store_.round(m));
    }
    if (died || lo < R) {
      for (int m : workers_.at(w)) {
        bool trained = false;
        for (auto& [v, mods] : workers_)
          trained |= v != w && alive_.count(v) && std::count(mods.begin(), mods.end(), m);
        while (!trained && store_.pushed(m) == 0 && store_.round(m) < R && !ended(m))
          close(m, false);
        active_from_[{w, m}] = R;
      }
    }
    check_complete_all();
  }
  // Closes m's round once some push is in and every contributor (live and taking part, or
  // already pushed) has pushed.
  void check_complete(int m) {
    if (store_.pushed(m) == 0) return;
    for (int w : alive_)
      if (workers_.count(w) && takes_part(w, m) && !store_.has_pushed(m, w)) {
        if (quorum_due(m)) close(m, false, true);
        return;
      }
    close(m, false);
  }
  // Whether module m's open round reached its quorum and the grace window after it passed.
  bool quorum_due(int m) const {
    const auto it = open_.find(m);
    if (o_.quorum <= 0 || it == open_.end() || store_.pushed_on_time(m) < o_.quorum) return false;
    const open_round& q = it->second;
    const auto spread = spreads_.find(m);
    const double window =
        o_.grace * (spread != spreads_.end()
                        ? spread->second.value()
                        : std::chrono::duration<double>(q.quorum_at - q.first).count());
    return std::chrono::duration<double>(clock::now() - q.quorum_at).count() >= window;
  }
  void check_complete_all() {
    for (int m = 0; m < store_.module_count(); ++m) check_complete(m);
  }
  void close(int m, bool by_deadline, bool by_quorum = false) {
    if (ended(m)) return;  // the run's end
    const auto now = clock::now();
    const int on_time = store_.pushed_on_time(m);
    history_.push_back(store_.close(m));
    history_.back().open_s = std::chrono::duration<double>(now - opened_[m]).count();
    history_.back().by_deadline = by_deadline;
    history_.back().by_quorum = by_quorum;
    if (auto q = open_.find(m); q != open_.end()) {  // the round's push spread, for grace windows
      if (on_time > 1)
        spreads_.try_emplace(m, spread_rounds, stats::recent_median::upper)
            .first->second.add(
                std::chrono::duration<double>(q->second.last - q->second.first).count());
      open_.erase(q);
    }
    pace_.closed(m);
    prev_opened_[m] = opened_[m];
    opened_[m] = now;
    if (o_.on_close) o_.on_close(history_.back());
  }
  void close_due() {
    const auto now = clock::now();
    std::vector<int> due;
    for (auto& [m, t0] : opened_)
      if (now - t0 > o_.round_timeout && !ended(m)) due.push_back(m);
    for (int m : due) close(m, true);
    if (o_.quorum > 0) {
      due.clear();
      for (auto& [m, q] : open_)
        if (quorum_due(m)) due.push_back(m);
      for (int m : due) close(m, false, true);
    }
  }
  std::uint64_t pace_micros(int m) const {
    return std::uint64_t(std::llround(std::max(0.0, pace_.seconds(m)) * 1e6));
  }
  // Answers every wait whose round has closed. A worker whose reply fails is marked dead after
  // the walk (mark_dead drops its waits and may close rounds: it must not run while waits_ is
  // being walked); its other waits in this walk are dropped unanswered.
  // Ensures: every wait of a live worker whose round closed is answered exactly once.
  void answer_waits() {
    std::vector<int> failed;
    std::vector<wait_t> open;
    open.reserve(waits_.size());
    for (const wait_t& x : waits_) {
      if (std::find(failed.begin(), failed.end(), x.worker) != failed.end()) continue;
      if (store_.round(x.module) <= x.round) {
        open.push_back(x);
      } else if (!send_reply(x.worker, {0, x.module, store_.round(x.module), store_.hash(x.module),
                                        pace_micros(x.module)})) {
        failed.push_back(x.worker);
      }
    }
    waits_ = std::move(open);
    for (int w : failed) mark_dead(w);
  }
  void mark_dead(int w) {
    alive_.erase(w);
    note({traffic::kind::live, w, -1, 0, 0, 0, false});
    if (!finished_.count(w)) died_.insert(w);
    drop_waits(w);
    check_complete_all();
  }
  void drop_waits(int w) {
    for (auto it = waits_.begin(); it != waits_.end();)
      it = it->worker == w ? waits_.erase(it) : std::next(it);
  }

  struct wait_t {
    int worker, module;
    long round;
  };
  store::module_store<OuterOpt>& store_;
  std::map<int, std::vector<int>> workers_;
  server_options o_;
  std::map<int, worker_link<T>> links_;
  std::mutex attach_mu_;
  struct attached_link {
    int worker;
    worker_link<T> link;
    std::unique_ptr<T> owned;  // null: the caller owns the transport
  };
  std::vector<attached_link> attached_;
  std::map<int, std::unique_ptr<T>> owned_;  // transports of links_ the server owns
  std::set<int> alive_, finished_, died_;
  std::map<std::pair<int, int>, long> active_from_;  // (worker, module) → first round it joins
  std::atomic<bool> rejoins_{false};
  std::map<int, clock::time_point> opened_;       // when each module's open round opened
  std::map<int, clock::time_point> prev_opened_;  // when its last closed round had opened
  // The times of a module's open round's on-time pushes: the first, the last, the quorum's.
  struct open_round {
    clock::time_point first, last, quorum_at;
  };
  static constexpr std::size_t spread_rounds = 8;  // rounds whose push spread sets the grace
  std::map<int, open_round> open_;
  // Per module, the median push spread of its last rounds with two on-time pushes or more.
  std::map<int, stats::recent_median> spreads_;
  push_pace pace_;  // when on-time pushes arrive after their round opened (wait replies carry it)
  std::size_t ontime_refused_ = 0;
  std::size_t late_refused_ = 0;
  std::size_t late_merged_ = 0;
  std::vector<wait_t> waits_;
  std::vector<float> buf_;
  std::vector<std::byte> bytes_;  // an encoded payload
  std::vector<std::string> refusals_;
  std::vector<store::round_summary> history_;
  std::size_t bytes_in_ = 0;
  std::atomic<bool> stop_{false};
  std::optional<clock::time_point> complete_at_;  // when every module reached o_.rounds
};

}  // namespace paco::store
