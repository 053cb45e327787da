#pragma once
// local_store: a module_store shared by worker threads of one process. A round of module m
// closes as soon as every expected worker pushed, or when a waiter's deadline passes (then it
// closes with what arrived: a late or dead worker is left out). Waiters block on a condition
// variable until the round they pushed to is closed.
//
// Pushes are fp32 spans (push) or, after set_compression, module_codec payloads (push_encoded)
// that the store decodes in the pushing thread: the bytes are really produced and counted.
// bytes_sent(w) is what client would have put on the wire for worker w's pushes.

#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "paco/outer/nesterov.hpp"
#include "paco/store/compression.hpp"
#include "paco/store/concepts.hpp"
#include "paco/store/module_store.hpp"
#include "paco/store/push_pace.hpp"
#include "paco/store/wire.hpp"

namespace paco::store {

template <class OuterOpt>
class local_store {
 public:
  using module_store_tag = void;

  local_store(std::vector<store::module_info> modules, OuterOpt opt, outer::delta_options d = {})
      : store_(std::move(modules), opt, d) {}
  // One outer optimizer per module (module_store's requirements).
  local_store(std::vector<store::module_info> modules, outer::per_module<OuterOpt> opts,
              outer::delta_options d = {})
      : store_(std::move(modules), std::move(opts), d) {}

  store::module_store<OuterOpt>& store() noexcept { return store_; }
  const store::module_store<OuterOpt>& store() const noexcept { return store_; }

  // Encoded pushes from now on: one decoder per module, built from c and the model as the
  // workers build their encoders (module_spans[m] is module m's level span). run_local gives
  // its workers codecs of the same compression. Errors: check_store_compression's, a span of
  // another size than its module, make_codecs'.
  template <class Model>
  status set_compression(const compression& c, const Model& model,
                         const std::vector<path::level_span>& module_spans) {
    if (auto s = check_store_compression(c); !s) return s;
    if (int(module_spans.size()) != store_.module_count())
      return {errc::mismatch, "local_store: " + std::to_string(module_spans.size()) +
                                  " module spans for " + std::to_string(store_.module_count()) +
                                  " modules"};
    for (int m = 0; m < store_.module_count(); ++m)
      if (module_spans[std::size_t(m)].size != store_.info(m).size)
        return {errc::mismatch, "local_store: span of module " + std::to_string(m) + " has " +
                                    std::to_string(module_spans[std::size_t(m)].size) +
                                    " elements, the module " + std::to_string(store_.info(m).size)};
    auto codecs = make_codecs(c, model, module_spans);
    if (!codecs) return codecs.error();
    compression_ = c;
    decoders_ = std::make_shared<const std::vector<compress::module_codec>>(std::move(*codecs));
    return {};
  }
  // Whether pushes are encoded (set_compression was called), and with what.
  bool encoded() const noexcept { return decoders_ != nullptr; }
  const compression& compress_config() const noexcept { return compression_; }
  // The decoders, one per module (null before set_compression).
  std::shared_ptr<const std::vector<compress::module_codec>> decoders() const { return decoders_; }

  result<pulled> pull(int m, std::span<float> dst) const {
    auto [round, hash] = store_.pull(m, dst);
    return pulled{round, hash};
  }

  // Pushes and, if that completes the round, closes it and wakes the waiters.
  status push(int m, int worker, long round, std::span<const float> delta, double weight) {
    std::unique_lock lk(mu_);
    sent_[worker] += wire::push_bytes(delta.size_bytes());
    return push_locked(m, worker, round, delta, weight);
  }

  // Decodes a module_codec payload (in the calling thread) and pushes it. Errors: invalid_argument
  // before set_compression or for a module out of range; the decoder's (corrupt, mismatch,
  // version), prefixed with the module: the module is then unchanged; then push's.
  status push_encoded(int m, int worker, long round, std::span<const std::byte> payload,
                      double weight) {
    {
      std::lock_guard lk(mu_);
      sent_[worker] += wire::push_bytes(payload.size());
    }
    if (!decoders_)
      return {errc::invalid_argument, "local_store: an encoded push before set_compression"};
    if (m < 0 || m >= store_.module_count())
      return {errc::invalid_argument, "local_store: module " + std::to_string(m) + " out of range"};
    std::vector<float> delta(store_.info(m).size);
    const auto& codec = (*decoders_)[std::size_t(m)];
    if (auto s = codec.decode(payload, slice<float>(delta.data(), delta.size())); !s)
      return paco::error{s.error().code, "push of module " + std::to_string(m) + " from worker " +
                                             std::to_string(worker) +
                                             " refused: " + s.error().message};
    std::unique_lock lk(mu_);
    return push_locked(m, worker, round, delta, weight);
  }

  // Blocks until round `round` of module m is closed; at `until` closes it with what arrived.
  // Ensures: on return store().round(m) > round.
  status wait_closed(int m, long round, std::chrono::steady_clock::time_point until) {
    std::unique_lock lk(mu_);
    if (!cv_.wait_until(lk, until, [&] { return store_.round(m) > round; }) &&
        store_.round(m) == round)
      close_locked(m);
    return {};
  }

  // Module m's push pace (store/push_pace.hpp); 0 before any round closed with a push.
  double push_time_s(int m) const {
    std::lock_guard lk(mu_);
    return pace_.seconds(m);
  }

  // Summaries of every closed round, in closing order.
  std::vector<store::round_summary> history() const {
    std::lock_guard lk(mu_);
    return history_;
  }

  // Bytes worker w's pushes would have put on the wire (wire::push_bytes per push:
  // request header + payload), the figure client::bytes_sent() reports over a transport.
  std::size_t bytes_sent(int worker) const {
    std::lock_guard lk(mu_);
    auto it = sent_.find(worker);
    return it == sent_.end() ? 0 : it->second;
  }

 private:
  status push_locked(int m, int worker, long round, std::span<const float> delta, double weight) {
    auto s = store_.push(m, worker, round, delta, weight);
    if (s.ok() && round == store_.round(m))
      pace_.pushed(m, std::chrono::duration<double>(clock::now() - opened_.at(m)).count());
    if (s.ok() && store_.complete(m)) close_locked(m);
    return s;
  }
  static std::map<int, std::chrono::steady_clock::time_point> opened_now(
      const store::module_store<OuterOpt>& s) {
    std::map<int, std::chrono::steady_clock::time_point> at;
    for (int m = 0; m < s.module_count(); ++m) at[m] = std::chrono::steady_clock::now();
    return at;
  }
  void close_locked(int m) {
    history_.push_back(store_.close(m));
    pace_.closed(m);
    opened_[m] = clock::now();
    cv_.notify_all();
  }
  using clock = std::chrono::steady_clock;
  store::module_store<OuterOpt> store_;
  mutable std::mutex mu_;
  push_pace pace_;
  // When each module's open round opened (the first: when the store was made).
  std::map<int, std::chrono::steady_clock::time_point> opened_ = opened_now(store_);
  std::condition_variable cv_;
  std::vector<store::round_summary> history_;
  compression compression_{};
  std::shared_ptr<const std::vector<compress::module_codec>> decoders_;
  std::map<int, std::size_t> sent_;
};

static_assert(EncodedModuleStore<local_store<outer::nesterov>>);

}  // namespace paco::store
