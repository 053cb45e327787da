#pragma once
// stage_runner: one stage of a pipeline over any net::Transport (rank k runs stage k). Each call
// to step() is one optimizer step of this stage on a batch every stage reads from the same
// deterministic stream (targets never cross the wire; only activations, and for global backprop
// their gradients, do).
//
//   schedule::gpipe / one_f_one_b  global backprop: the batch is M micro-batches run in the
//       schedule's order (schedule.hpp); activations go forward, ∂/∂activation back; then the
//       gradient's global norm is summed along the stages in plane order (a partial sum passed
//       from stage to stage, so the clip equals one process's) and every stage steps AdamW on its
//       span. Equal to one process accumulating the micro-batches in the same order.
//   schedule::local  local losses (Laskin et al.): stage k trains on its own head's loss, sends
//       its output forward and never waits for anything from downstream but a credit (a 0-byte
//       message saying the next stage took step t's activation): a stage runs at most q steps
//       ahead, so memory stays bounded on a slow link. With no gradient crossing a boundary, the
//       run is bit-identical to local_reference whatever the link or q. A shared_readout head
//       reads a copy of the last stage's final norm and head sent before its first step (the
//       initial one) and after its steps S, 2S, …, applied from step u + D + 1 on (u the step it
//       was taken after): fixed steps, so timing cannot change the result.
//
// A run resumes from checkpoints of one step t on every stage (resume_at; pipeline/stage_file.hpp
// writes and reads them): each step depends only on the stage's state and the activations of
// the same step, never on timing, so the resumed run is the uninterrupted one bit for bit.
//
// Every wait has the options' deadline; a lost or silent neighbour is an error naming the stage,
// the step and what it waited for, never a hang.

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <deque>
#include <functional>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "paco/core/arena.hpp"
#include "paco/core/buffer.hpp"
#include "paco/core/error.hpp"
#include "paco/net/concepts.hpp"
#include "paco/optim/adamw.hpp"
#include "paco/pipeline/activation_codec.hpp"
#include "paco/pipeline/aux_head.hpp"
#include "paco/pipeline/local_learner.hpp"
#include "paco/pipeline/schedule.hpp"
#include "paco/pipeline/stage.hpp"
#include "paco/pipeline/stage_plan.hpp"

namespace paco::pipeline {

struct pipeline_options {
  schedule sched = schedule::local;
  int micro_batches = 1;  // M (gpipe, 1f1b): a batch of B sequences is M micro-batches of B/M
  int queue_depth = 2;    // q (local): a stage runs at most q steps ahead of the next
  head_kind head = head_kind::linear;  // local: the auxiliary head of stages 0 … K−2
  int readout_refresh = 10;            // shared_readout: S, steps between copies
  int readout_delay = 2;               // shared_readout: D, steps a copy takes to apply
  float grad_clip = 1.0f;              // global-norm clip (per stage in local mode); 0: off
  wire_format activations = wire_format::fp32;  // activations (and gradients) on the links
  std::chrono::milliseconds timeout{60000};     // every wait
  net::tag_t tag_base = 0x40000000;

  // Ensures: ok, or invalid_argument naming the field (pipeline.<field>).
  status validate(int batch) const {
    auto bad = [](const std::string& f, const std::string& why) {
      return status(errc::invalid_argument, "pipeline." + f + ": " + why);
    };
    if (sched != schedule::local) {
      if (micro_batches < 1 || micro_batches > 256)
        return bad("micro_batches", "must be in [1, 256], got " + std::to_string(micro_batches));
      if (batch % micro_batches != 0)
        return bad("micro_batches", std::to_string(micro_batches) + " does not divide the batch (" +
                                        std::to_string(batch) + " sequences)");
    }
    if (queue_depth < 1)
      return bad("queue_depth",
                 "must be >= 1 (steps a stage may run ahead), got " + std::to_string(queue_depth));
    if (readout_refresh < 1)
      return bad("readout_refresh", "must be >= 1, got " + std::to_string(readout_refresh));
    if (readout_delay < 0)
      return bad("readout_delay", "must be >= 0, got " + std::to_string(readout_delay));
    if (timeout.count() <= 0) return bad("timeout", "must be > 0");
    return {};
  }
  // shared_readout: the step whose copy of the last stage's readout stage k takes before step t
  // (copies are sent after steps S, 2S, … and apply D steps later), or 0 when none is due.
  long readout_copy_before(long t) const noexcept {
    const long u = t - 1 - readout_delay;
    return u >= readout_refresh && u % readout_refresh == 0 ? u : 0;
  }
  // Micro-batches a step runs (1 in local mode).
  int micro() const noexcept { return sched == schedule::local ? 1 : micro_batches; }
};

// What one stage has done so far.
struct stage_stats {
  long steps = 0;
  std::size_t bytes_sent = 0;      // activations and gradients to the neighbouring stages
  std::size_t bytes_received = 0;  // the same, received
  int stash_high_water = 0;        // most micro-batches held between F and B
  double wait_s = 0;               // time spent waiting on the neighbours
};

// A copy of the last stage's final norm and head (shared_readout), taken after step `after`
// (0: before the first step).
struct readout_copy {
  long after = 0;
  std::vector<float> values;
};

template <nn::BlockModel M, net::Transport T>
class stage_runner {
 public:
  // Stage net.rank() of plan on batches of `batch` sequences of `ctx` tokens.
  // Requires (checked: throws error_exception naming the field): options valid, plan valid for
  // the model with plan.stages() == net.size(). seed: the auxiliary heads' initialisation.
  stage_runner(const M& model, const stage_plan& plan, const pipeline_options& o, int batch,
               int ctx, T& net, std::uint64_t seed)
      : model_(model),
        o_(checked(o, batch)),
        net_(net),
        k_(net.rank()),
        K_(plan.stages()),
        batch_(batch),
        ctx_(ctx),
        ops_(o_.sched == schedule::local
                 ? std::vector<op>{}
                 : stage_ops(o_.sched, plan.stages(), net.rank(), o_.micro())),
        stage_(model, plan, net.rank(), {batch / o_.micro(), ctx},
               o_.sched == schedule::local ? 1 : std::max(1, stash_needed(ops_))),
        learner_(model, stage_, o_.head, seed, o_.sched == schedule::local),
        codec_(o_.activations, stage_.activation_size()) {
    if (plan.stages() != net.size())
      throw error_exception(
          {errc::invalid_argument, "pipeline: the plan has " + std::to_string(plan.stages()) +
                                       " stages, the transport " + std::to_string(net.size()) +
                                       " ranks (one stage per rank)"});
    const std::size_t n = stage_.activation_size(), w = codec_.wire_bytes();
    const int slots = stage_.slots();
    if (o.sched == schedule::local) {
      ring_.assign(std::size_t(o.queue_depth), std::vector<std::byte>(w));
      ring_sends_.resize(std::size_t(o.queue_depth));
    } else {
      act_wire_.assign(std::size_t(slots), std::vector<std::byte>(w));
      dx_wire_.assign(std::size_t(slots), std::vector<std::byte>(stage_.first() ? 0 : w));
      act_sends_.resize(std::size_t(slots));
      grad_sends_.resize(std::size_t(slots));
    }
    for (int k = 0; k < K_; ++k) spans_.push_back(param_span(model, plan, k));
    in_.resize(n);
    dy_.resize(n);
    dx_.resize(n);
    in_wire_.resize(w);
    slot_of_.assign(std::size_t(o.micro()), -1);
    losses_.assign(std::size_t(o.micro()), 0.0);
  }

  stage_runner(const stage_runner&) = delete;
  stage_runner& operator=(const stage_runner&) = delete;
  // Cancels what this stage still has in flight (each request its own: the transport may serve
  // others too) before its buffers go.
  ~stage_runner() {
    act_sends_.clear();
    grad_sends_.clear();
    ring_sends_.clear();
    credit_sends_.clear();
    readout_sends_.clear();
  }

  int index() const noexcept { return k_; }
  const stage<M>& stage_of() const noexcept { return stage_; }
  const stage_stats& stats() const noexcept { return stats_; }
  const pipeline_options& options() const noexcept { return o_; }
  // The auxiliary head (local mode, stages 0 … K−2): training only.
  local_learner<M>& learner() noexcept { return learner_; }

  // The last stage under shared_readout: the copies it sent that a stage may not have applied
  // when every stage stands at the step this stage has taken (a copy after u applies at step
  // u + D + 1, the first at step 1) — what its checkpoint keeps, so that a resumed run sends
  // them again. Empty on the other stages and heads.
  std::vector<readout_copy> readouts_in_flight() const {
    std::vector<readout_copy> out;
    for (const auto& c : sent_)
      if (applies_at(c.after) > stats_.steps) out.push_back(c);
    return out;
  }

  // Continues from a checkpoint of step t, which every stage resumes at the same t: the next
  // step() is t + 1, no activation or credit of a step ≤ t is expected, and the last stage sends
  // `in_flight` again (its checkpoint's readouts_in_flight()). The caller has restored a's span,
  // the head (learner().head_arena()) and its readout copy.
  // Requires: no step taken. Errors: invalid_argument for t < 0 or a step already taken.
  status resume_at(long t, std::vector<readout_copy> in_flight = {}) {
    if (t < 0 || stats_.steps != 0)
      return {errc::invalid_argument, "pipeline stage " + std::to_string(k_) + ": resume_at(" +
                                          std::to_string(t) +
                                          ") needs t >= 0 and a stage that took no step"};
    stats_.steps = resumed_ = t;
    for (auto& c : in_flight) {
      if (applies_at(c.after) <= t) continue;
      if (c.values.size() != learner_.readout_size())
        return {errc::mismatch, "pipeline stage " + std::to_string(k_) + ": a readout copy of " +
                                    std::to_string(c.values.size()) + " floats, the head reads " +
                                    std::to_string(learner_.readout_size())};
      sent_.push_back(std::move(c));
      post_readout(sent_.back());
    }
    return {};
  }

  // Global backprop with data parallelism (pipelines side by side, each stage's replicas joined):
  // after a step's backward passes and before the clip, reduce(g, t) replaces this stage's
  // gradient span g by what the replicas agree on (pipeline::replica_mean: their mean, by ring
  // all-reduce). Then the chained clip sees the global gradient, as one process on the global
  // batch would. Ignored in local mode.
  using gradient_reducer = std::function<status(std::span<float>, long)>;
  void reduce_gradients_with(gradient_reducer reduce) { reducer_ = std::move(reduce); }

  // One optimizer step of this stage on the batch (tokens, targets: batch × ctx, the same on
  // every stage) at learning rate lr. a: the whole model's arena (only this stage's span is
  // read for its passes and stepped). Returns this stage's mean loss in nats per token: its own
  // head's in local mode; in global mode the model's on the last stage and NaN on the others.
  result<double> step(arena<host>& a, const optim::adamw& opt, float lr, const std::int32_t* tokens,
                      const std::int32_t* targets) {
    ++stats_.steps;
    auto r = o_.sched == schedule::local ? local_step(a, opt, lr, tokens, targets)
                                         : global_step(a, opt, lr, tokens, targets);
    if (r) stats_.stash_high_water = std::max(stats_.stash_high_water, high_water_);
    return r;
  }

  // Waits for every send this stage posted (the end of training: a stage must not close its
  // transport before its last activation left).
  status drain() {
    for (auto& r : ring_sends_)
      if (auto s = wait(r, "its last activations to leave"); !s) return s;
    for (auto& r : readout_sends_)
      if (auto s = wait(r, "its last readout copies to leave"); !s) return s;
    readout_sends_.clear();
    for (auto& r : credit_sends_)
      if (auto s = wait(r, "its last credits to leave"); !s) return s;
    credit_sends_.clear();
    return {};
  }

  // Gathers every stage's span of the param plane into `a` on rank root (the others send theirs):
  // the whole model, for the one scorer and for export; then close()'s barrier.
  // Requires: every stage calls it, after drain().
  status gather(arena<host>& a, int root = 0) { return finish(a.get(plane::param).data(), root); }

  // The run's closing barrier: root tells every stage once it heard from them all, and a stage
  // returns only then, so no stage closes its transport while a neighbour may still send to it
  // (its last credits, a readout copy). Requires: every stage calls it (all close, or all gather),
  // after drain().
  status close(int root = 0) { return finish(nullptr, root); }

 private:
  static const pipeline_options& checked(const pipeline_options& o, int batch) {
    o.validate(batch).throw_if_error();
    return o;
  }
  enum kind_t : net::tag_t {
    kind_act = 0,
    kind_grad,
    kind_credit,
    kind_norm_up,
    kind_norm_down,
    kind_readout,
    kind_gather
  };
  net::tag_t tag_of(kind_t kind, long t, int m) const {
    return o_.tag_base + (net::tag_t(kind) << 24) + (net::tag_t(t & 0xFFFF) << 8) + net::tag_t(m);
  }
  net::deadline deadline() const { return net::after(o_.timeout); }
  // gather (th: the param plane) or close (th null: a 0-byte message stands for the span).
  status finish(float* th, int root) {
    const net::tag_t tag = tag_of(kind_gather, stats_.steps, 0);
    const net::tag_t done = tag_of(kind_gather, stats_.steps, 1);
    const auto part = [&](int k) {
      const auto [b, e] = span_of(k);
      return th ? std::span<float>(th + b, e - b) : std::span<float>{};
    };
    if (k_ != root) {
      auto r = net_.send(root, tag, net::as_bytes(std::span<const float>(part(k_))), deadline());
      if (auto s = wait(r, stage_name(root) + (th ? " to take its parameters"
                                                  : " to hear that this stage is done"));
          !s)
        return s;
      auto d = net_.recv(root, done, {}, deadline());
      return wait(d, stage_name(root) + " to close the run");
    }
    for (int k = 0; k < K_; ++k) {
      if (k == root) continue;
      auto r = net_.recv(k, tag, net::as_writable_bytes(part(k)), deadline());
      if (auto s = wait(r, stage_name(k) + (th ? "'s parameters" : " to be done")); !s) return s;
    }
    std::vector<typename T::request> closing;
    for (int k = 0; k < K_; ++k)
      if (k != root) closing.push_back(net_.send(k, done, {}, deadline()));
    for (auto& r : closing)
      if (auto s = wait(r, "the stages to hear that the run is closed"); !s) return s;
    return {};
  }

  std::pair<std::size_t, std::size_t> span_of(int k) const { return spans_.at(std::size_t(k)); }

  template <class R>
  status wait(R& r, const std::string& what) {
    const auto t0 = std::chrono::steady_clock::now();
    const auto ec = r.wait();
    stats_.wait_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    r = R{};
    if (!ec) return {};
    return status(paco::error(ec, "pipeline stage " + std::to_string(k_) + ", step " +
                                      std::to_string(stats_.steps) + ": waiting for " + what +
                                      ": " + ec.message() + links_down()));
  }
  // What the transport says of its failed links, when it says (asio_tcp: failure(peer)).
  std::string links_down() const {
    std::string why;
    if constexpr (requires(const T& n) { n.failure(0); })
      for (int k = 0; k < K_; ++k)
        if (k != k_)
          if (auto w = net_.failure(k); !w.empty()) why += "; " + w;
    return why;
  }
  status recv_floats(int peer, net::tag_t tag, float* p, std::size_t n, const std::string& what) {
    auto r = net_.recv(peer, tag, net::as_writable_bytes(std::span<float>(p, n)), deadline());
    auto s = wait(r, what);
    if (s) stats_.bytes_received += n * sizeof(float);
    return s;
  }
  std::string stage_name(int k) const { return "stage " + std::to_string(k); }

  // Receives one message of the activation format from peer and decodes it into y (n floats).
  status recv_activation(int peer, net::tag_t tag, float* y, const std::string& what) {
    auto r = net_.recv(peer, tag, std::span<std::byte>(in_wire_), deadline());
    if (auto s = wait(r, what); !s) return s;
    stats_.bytes_received += in_wire_.size();
    if (auto s = codec_.decode(in_wire_.data(), y); !s)
      return paco::error(s.error().code, "pipeline stage " + std::to_string(k_) + ", step " +
                                             std::to_string(stats_.steps) + ": " + what + ": " +
                                             s.error().what());
    return {};
  }
  // Encodes x (n floats) into wire and starts sending it to peer; the request goes to `into`.
  status send_activation(int peer, net::tag_t tag, const float* x, std::vector<std::byte>& wire,
                         typename T::request& into) {
    if (auto s = codec_.encode(x, wire.data()); !s)
      return paco::error(s.error().code, "pipeline stage " + std::to_string(k_) + ", step " +
                                             std::to_string(stats_.steps) +
                                             ": cannot encode an activation for " +
                                             stage_name(peer) + ": " + s.error().what());
    into = net_.send(peer, tag, std::span<const std::byte>(wire), deadline());
    stats_.bytes_sent += wire.size();
    return {};
  }

  // ---- local losses ----
  result<double> local_step(arena<host>& a, const optim::adamw& opt, float lr,
                            const std::int32_t* tokens, const std::int32_t* targets) {
    const long t = stats_.steps;
    const float* theta = a.get(plane::param).data();
    high_water_ = 1;
    if (!stage_.first()) {
      if (auto s =
              recv_activation(k_ - 1, tag_of(kind_act, t, 0), in_.data(),
                              stage_name(k_ - 1) + "'s activation of step " + std::to_string(t));
          !s)
        return s.error();
      credit_sends_.push_back(net_.send(k_ - 1, tag_of(kind_credit, t, 0), {}, deadline()));
      if (auto s = reap(credit_sends_, "a credit to leave"); !s) return s.error();
    }
    const double fl = stage_.forward(0, theta, tokens, in_.data(), targets, 1.0f);
    if (!stage_.last()) {
      const std::size_t q = std::size_t(o_.queue_depth);
      // The next stage took step t − q (a resumed run waits for none of the steps it resumed
      // after): this stage may run ahead again.
      if (t - long(q) > resumed_) {
        auto r = net_.recv(k_ + 1, tag_of(kind_credit, t - long(q), 0), {}, deadline());
        if (auto s = wait(r, stage_name(k_ + 1) + " to take step " + std::to_string(t - long(q)) +
                                 " (queue depth " + std::to_string(q) + ")");
            !s)
          return s.error();
      }
      auto& slot = ring_sends_[std::size_t(t) % q];
      if (auto s = wait(slot, "an earlier activation to leave"); !s) return s.error();
      if (auto s = send_activation(k_ + 1, tag_of(kind_act, t, 0), stage_.output(0),
                                   ring_[std::size_t(t) % q], slot);
          !s)
        return s.error();
    }
    const bool sends_readout = stage_.last() && o_.head == head_kind::shared_readout && K_ > 1;
    // The initial readout goes out before the last stage's first step: the stages of a path cut
    // across processes hold only their own modules, so the last stage's is the one to share.
    if (sends_readout && t == 1)
      if (auto s = send_readout(a, 0); !s) return s.error();
    if (learner_.shares_readout()) {
      const long u = t == 1 ? 0 : o_.readout_copy_before(t);
      if (t == 1 || u)
        if (auto s = recv_floats(K_ - 1, tag_of(kind_readout, u, 0), learner_.readout(),
                                 learner_.readout_size(),
                                 "the last stage's readout after step " + std::to_string(u));
            !s)
          return s.error();
    }
    const double loss = learner_.learn(a, opt, lr, t, targets, fl, o_.grad_clip);
    if (sends_readout && t % o_.readout_refresh == 0)
      if (auto s = send_readout(a, t); !s) return s.error();
    return loss;
  }
  // The last stage: a copy of its final norm and head after step u (0: before the first) to every
  // other stage, once the previous copy left.
  // The copies every stage has applied are dropped; the latest are kept (readouts_in_flight).
  status send_readout(const arena<host>& a, long u) {
    for (auto& r : readout_sends_)
      if (auto s = wait(r, "an earlier readout copy to leave"); !s) return s;
    readout_sends_.clear();
    while (!sent_.empty() && applies_at(sent_.front().after) <= stats_.steps) sent_.pop_front();
    sent_.push_back({u, std::vector<float>(learner_.readout_size())});
    copy_readout(model_, a.get(plane::param).data(), sent_.back().values.data());
    post_readout(sent_.back());
    return {};
  }
  // Starts sending c to every other stage (c lives in sent_ until its sends completed).
  void post_readout(const readout_copy& c) {
    for (int k = 0; k + 1 < K_; ++k)
      readout_sends_.push_back(net_.send(k, tag_of(kind_readout, c.after, 0),
                                         net::as_bytes(std::span<const float>(c.values)),
                                         deadline()));
    stats_.bytes_sent += std::size_t(K_ - 1) * c.values.size() * sizeof(float);
  }
  // The step from which a readout copy taken after step u is applied.
  long applies_at(long u) const noexcept { return u == 0 ? 1 : u + o_.readout_delay + 1; }
  // Forgets the completed requests at the front of a queue of small sends.
  template <class Q>
  status reap(Q& q, const std::string& what) {
    while (!q.empty() && q.front().test()) {
      if (auto s = wait(q.front(), what); !s) return s;
      q.pop_front();
    }
    return {};
  }

  // ---- global backprop (gpipe, 1f1b) ----
  result<double> global_step(arena<host>& a, const optim::adamw& opt, float lr,
                             const std::int32_t* tokens, const std::int32_t* targets) {
    const long t = stats_.steps;
    const int Mb = o_.micro();
    const float scale = 1.0f / float(Mb);
    const std::size_t rows = std::size_t(batch_ / Mb) * ctx_;
    const float* theta = a.get(plane::param).data();
    float* grad = a.get(plane::grad).data();
    const auto [b, e] = stage_.span();
    std::fill(grad + b, grad + e, 0.0f);
    std::vector<int> free_slots;
    for (int s = stage_.slots() - 1; s >= 0; --s) free_slots.push_back(s);
    high_water_ = 0;
    for (const op& o : ops_) {
      const int m = o.micro;
      if (o.kind == op::forward) {
        const int slot = free_slots.back();
        free_slots.pop_back();
        slot_of_[std::size_t(m)] = slot;
        high_water_ = std::max(high_water_, stage_.slots() - int(free_slots.size()));
        if (!stage_.first())
          if (auto s = recv_activation(
                  k_ - 1, tag_of(kind_act, t, m), in_.data(),
                  stage_name(k_ - 1) + "'s activation of micro-batch " + std::to_string(m));
              !s)
            return s.error();
        losses_[std::size_t(m)] =
            stage_.forward(slot, theta, tokens + rows * m, in_.data(), targets + rows * m, scale);
        if (!stage_.last())
          if (auto s = send_activation(k_ + 1, tag_of(kind_act, t, m), stage_.output(slot),
                                       act_wire_[std::size_t(slot)], act_sends_[std::size_t(slot)]);
              !s)
            return s.error();
      } else {
        const int slot = slot_of_[std::size_t(m)];
        if (!stage_.last())
          if (auto s = recv_activation(
                  k_ + 1, tag_of(kind_grad, t, m), dy_.data(),
                  stage_name(k_ + 1) + "'s gradient of micro-batch " + std::to_string(m));
              !s)
            return s.error();
        if (!stage_.first())
          if (auto s = wait(grad_sends_[std::size_t(slot)], "an earlier gradient to leave"); !s)
            return s.error();
        stage_.backward(slot, theta, grad, dy_.data(), stage_.first() ? nullptr : dx_.data());
        if (!stage_.first())
          if (auto s = send_activation(k_ - 1, tag_of(kind_grad, t, m), dx_.data(),
                                       dx_wire_[std::size_t(slot)], grad_sends_[std::size_t(slot)]);
              !s)
            return s.error();
        // The activation sent from this slot must have left before the slot is reused.
        if (auto s = wait(act_sends_[std::size_t(slot)], "an activation to leave"); !s)
          return s.error();
        free_slots.push_back(slot);
      }
    }
    if (reducer_)
      if (auto s = reducer_(std::span<float>(grad + b, e - b), t); !s) return s.error();
    if (auto s = clip_along_stages(grad + b, e - b, t); !s) return s.error();
    opt.step(a, b, e, t, lr);
    for (auto& r : grad_sends_)
      if (auto s = wait(r, "the step's last gradients to leave"); !s) return s.error();
    if (!stage_.last()) return std::numeric_limits<double>::quiet_NaN();
    double loss = 0;  // summed in the order of the backward passes, as one process sums them
    for (const op& o : ops_)
      if (o.kind == op::backward) loss += losses_[std::size_t(o.micro)];
    return loss / Mb;
  }

  // clip_grad_norm over the whole model's gradient, cut into stages: stage k adds its span's
  // squares to the partial sum of stages 0 … k−1 (in plane order: the one-process sum, bit for
  // bit), the last stage takes the root and sends the norm to every other stage.
  status clip_along_stages(float* g, std::size_t n, long t) {
    if (o_.grad_clip <= 0) return {};
    double s = 0;
    if (!stage_.first()) {
      auto r = net_.recv(k_ - 1, tag_of(kind_norm_up, t, 0),
                         net::as_writable_bytes(std::span<double>(&s, 1)), deadline());
      if (auto st = wait(r, stage_name(k_ - 1) + "'s partial gradient norm"); !st) return st;
    }
    for (std::size_t i = 0; i < n; ++i) s += double(g[i]) * g[i];
    double norm = 0;
    if (!stage_.last()) {
      auto r = net_.send(k_ + 1, tag_of(kind_norm_up, t, 0),
                         net::as_bytes(std::span<const double>(&s, 1)), deadline());
      if (auto st = wait(r, "its partial gradient norm to leave"); !st) return st;
      auto r2 = net_.recv(K_ - 1, tag_of(kind_norm_down, t, 0),
                          net::as_writable_bytes(std::span<double>(&norm, 1)), deadline());
      if (auto st = wait(r2, "the last stage's gradient norm"); !st) return st;
    } else {
      norm = std::sqrt(s);
      std::vector<typename T::request> sends;
      for (int k = 0; k + 1 < K_; ++k)
        sends.push_back(net_.send(k, tag_of(kind_norm_down, t, 0),
                                  net::as_bytes(std::span<const double>(&norm, 1)), deadline()));
      for (auto& r : sends)
        if (auto st = wait(r, "the gradient norm to leave"); !st) return st;
    }
    if (norm > o_.grad_clip) {
      const float c = float(double(o_.grad_clip) / (norm + 1e-6));
      for (std::size_t i = 0; i < n; ++i) g[i] *= c;
    }
    return {};
  }

  const M& model_;
  pipeline_options o_;
  T& net_;
  int k_, K_, batch_, ctx_;
  std::vector<op> ops_;
  stage<M> stage_;
  local_learner<M> learner_;
  std::vector<std::pair<std::size_t, std::size_t>> spans_;
  activation_codec codec_;
  buffer<float> in_, dy_, dx_;
  std::vector<std::byte> in_wire_;
  // Encoded messages in flight: local mode's ring of q, global mode's per stash slot.
  std::vector<std::vector<std::byte>> ring_, act_wire_, dx_wire_;
  std::deque<readout_copy> sent_;  // the last stage's readout copies (send_readout)
  // The requests after the buffers they send from.
  std::vector<typename T::request> act_sends_, grad_sends_, ring_sends_;
  std::deque<typename T::request> credit_sends_;
  std::vector<typename T::request> readout_sends_;
  std::vector<int> slot_of_;
  std::vector<double> losses_;  // the last stage: each micro-batch's loss
  int high_water_ = 0;
  long resumed_ = 0;  // the step a resumed run continued after (resume_at)
  stage_stats stats_;
  gradient_reducer reducer_;
};

}  // namespace paco::pipeline
