#pragma once
// replay: one iteration of a placed DT-FM workload executed as its cost model describes it ("as
// modelled", LOCAL_PARALLELISM.md §7.5), over any Transport whose rank d is device d and whose
// links are shaped like the scenario's (asio_tcp with tcp_options::peer_shapers from
// place::scaled_scenario). Compute is ignored, as the model ignores it. Three phases:
//
//   forward    hop by hop (s → s+1 for s = 0 … K−2): every pipeline sends its whole activation
//              (pp_bytes) to its next stage at once, store-and-forward; the next hop starts when
//              the slowest pipeline's transfer is done (PP = Σ over hops of the slowest)
//   backward   the same, hop by hop from the last stage back
//   dp         in every stage's group, each device sends a 1/D shard (dp_bytes / D) to every
//              peer, one peer after another, twice, while it receives the peers' shards
//              (COST_DP = the slowest device's Σ over peers of 2 (α + c_dp/(D β)))
//
// A second transport (`control`, unshaped) holds the barriers between hops and phases and
// gathers the timings, so that neither adds to what is measured: a hop's time is the longest
// send or receive of its participants, each from its own release from the barrier.
//
// replay_native runs the same placement as a user of paco would ("native"): every pipeline a
// GPipe step of M micro-batches (activations and gradients of pp_bytes / M each, compute a fixed
// sleep per micro-batch), all pipelines at once; then each stage group's ring all-reduce of its
// gradient (collectives::allreduce_ring over a net::subgroup, in pipeline order). Its
// predictions are paco's own models: pipeline::predict_step and the ring's
// 2 (D − 1) · max over the ring's links of (α + (c/D) / β). With zero compute DT-FM's cost bounds
// the pipeline from above (it pipelines nothing), and with D = 2 the ring too (the same two
// exchanges); with D ≥ 3 a ring paced by one slow link can take longer than DT-FM's pairwise sum.

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <thread>
#include <vector>

#include "paco/collectives/all_gather.hpp"
#include "paco/collectives/allreduce_ring.hpp"
#include "paco/collectives/barrier.hpp"
#include "paco/core/error.hpp"
#include "paco/net/concepts.hpp"
#include "paco/net/subgroup.hpp"
#include "paco/pipeline/schedule.hpp"
#include "paco/pipeline/time_model.hpp"
#include "paco/place/placement_file.hpp"

namespace paco::place {

struct replay_options {
  std::size_t pp_bytes = 0;  // one activation, sent per hop and pipeline
  std::size_t dp_bytes = 0;  // one stage's gradient (each peer gets dp_bytes / D per exchange)
  std::chrono::milliseconds timeout{120000};  // every wait
  net::tag_t tag_base = 0x50000000;
  net::tag_t control_tag = 0x51000000;
};

// One iteration's measured times, seconds (the same on every rank).
struct replay_times {
  std::vector<double> forward_hops, backward_hops;  // (K − 1): the slowest participant's
  double forward_s = 0, backward_s = 0, dp_s = 0;
  double total_s() const noexcept { return forward_s + backward_s + dp_s; }
};

namespace detail {
inline double since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}
// Every rank's `mine` to every rank over `control`; the largest of each entry.
template <net::Transport Control>
result<std::vector<double>> slowest(Control& control, const std::vector<double>& mine,
                                    net::deadline until, net::tag_t tag) {
  const std::size_t m = mine.size(), n = std::size_t(control.size());
  std::vector<double> all(m * n, 0.0);
  std::copy(mine.begin(), mine.end(),
            all.begin() + std::ptrdiff_t(m * std::size_t(control.rank())));
  if (auto g =
          collectives::all_gather(control, std::span<double>(all), {.until = until, .tag = tag});
      !g)
    return g.error();
  std::vector<double> worst(m, 0.0);
  for (std::size_t q = 0; q < n; ++q)
    for (std::size_t i = 0; i < m; ++i) worst[i] = std::max(worst[i], all[q * m + i]);
  return worst;
}
}  // namespace detail

// Iteration `it` of p on this rank. Requires: p valid for data.size() devices
// (validate_placement), control.size() == data.size() and the same ranks; every rank calls it
// with the same p, o and it. Errors: a transfer's or a barrier's (timeout, peer_lost), naming
// the phase and the peer.
template <net::Transport Data, net::Transport Control>
result<replay_times> replay_as_modelled(Data& data, Control& control, const placement& p,
                                        const replay_options& o, long it) {
  if (auto s = validate_placement(p, data.size()); !s) return s.error();
  const int r = data.rank(), K = p.d_pp, D = p.d_dp;
  // Plain ints, not a structured binding: the lambdas below capture them (clang 14 cannot
  // capture a binding).
  const int j = p.where(r).first, s = p.where(r).second;
  const auto until = [&] { return net::after(o.timeout); };
  net::tag_t ctl = o.control_tag + (net::tag_t(it & 0xFF) << 12);
  const auto barrier = [&]() -> status {
    return collectives::barrier(control, {.until = until(), .tag = ctl++});
  };
  const auto tag = [&](int kind, int x) {
    return o.tag_base + (net::tag_t(kind) << 20) + (net::tag_t(it & 0xFF) << 8) + net::tag_t(x);
  };
  const auto fail = [&](const char* phase, int peer, std::error_code ec) {
    return error(ec, std::string("replay, ") + phase + ", device " + std::to_string(r) +
                         " with device " + std::to_string(peer) + ": " + ec.message());
  };
  std::vector<std::byte> buf(std::max<std::size_t>(o.pp_bytes, 1));
  std::vector<double> mine;  // this rank's hop and phase times, then every rank's
  // One hop of activations: pipeline j's stage `from` sends to its stage `to`.
  const auto hop = [&](int kind, int from, int to, int h) -> status {
    if (auto b = barrier(); !b) return b;
    const auto t0 = std::chrono::steady_clock::now();
    const int pj_from = p.pipelines[std::size_t(j)][std::size_t(from)];
    const int pj_to = p.pipelines[std::size_t(j)][std::size_t(to)];
    if (s == from) {
      auto q = data.send(pj_to, tag(kind, h), std::span<const std::byte>(buf.data(), o.pp_bytes),
                         until());
      if (auto ec = q.wait()) return fail(kind == 1 ? "forward" : "backward", pj_to, ec);
    } else if (s == to) {
      auto q =
          data.recv(pj_from, tag(kind, h), std::span<std::byte>(buf.data(), o.pp_bytes), until());
      if (auto ec = q.wait()) return fail(kind == 1 ? "forward" : "backward", pj_from, ec);
    }
    mine.push_back(s == from || s == to ? detail::since(t0) : 0.0);
    return {};
  };
  for (int h = 0; h + 1 < K; ++h)
    if (auto st = hop(1, h, h + 1, h); !st) return st.error();
  for (int h = K - 2; h >= 0; --h)
    if (auto st = hop(2, h + 1, h, h); !st) return st.error();
  // Data-parallel exchanges in this stage's group.
  {
    if (auto b = barrier(); !b) return b.error();
    const auto t0 = std::chrono::steady_clock::now();
    const std::size_t shard = o.dp_bytes / std::size_t(D);
    const auto group = p.group(s);
    std::vector<std::vector<std::byte>> in;
    std::vector<typename Data::request> recvs;
    std::vector<int> from;
    in.reserve(std::size_t(2 * D));
    for (int rep = 0; rep < 2; ++rep)
      for (int peer : group)
        if (peer != r) {
          in.emplace_back(std::max<std::size_t>(shard, 1));
          recvs.push_back(
              data.recv(peer, tag(3, rep), std::span<std::byte>(in.back().data(), shard), until()));
          from.push_back(peer);
        }
    std::vector<std::byte> out(std::max<std::size_t>(shard, 1));
    for (int rep = 0; rep < 2; ++rep)
      for (int peer : group)
        if (peer != r) {
          auto q =
              data.send(peer, tag(3, rep), std::span<const std::byte>(out.data(), shard), until());
          if (auto ec = q.wait()) return fail("data-parallel send", peer, ec);
        }
    for (std::size_t i = 0; i < recvs.size(); ++i)
      if (auto ec = recvs[i].wait()) return fail("data-parallel receive", from[i], ec);
    mine.push_back(detail::since(t0));
  }
  // Every rank's times to every rank (control), then the slowest participant of each entry.
  auto slow = detail::slowest(control, mine, until(), ctl++);
  if (!slow) return slow.error();
  const auto& worst = *slow;
  replay_times t;
  for (int h = 0; h + 1 < K; ++h) {
    t.forward_hops.push_back(worst[std::size_t(h)]);
    t.forward_s += worst[std::size_t(h)];
  }
  for (int h = 0; h + 1 < K; ++h) {  // stored from the last hop back
    t.backward_hops.push_back(worst[std::size_t(K - 1 + h)]);
    t.backward_s += worst[std::size_t(K - 1 + h)];
  }
  t.dp_s = worst.back();
  return t;
}

// ---- native: GPipe along every pipeline, then a ring all-reduce in every stage group ----

struct native_options {
  std::size_t pp_bytes = 0;  // one activation (a step's, cut into M micro-batches)
  std::size_t dp_bytes = 0;  // one stage's gradient (fp32: dp_bytes / 4 floats all-reduced)
  int micro_batches = 4;     // M
  std::chrono::microseconds forward_compute{0}, backward_compute{0};  // per micro-batch
  std::chrono::milliseconds timeout{120000};
  net::tag_t tag_base = 0x52000000;
  net::tag_t control_tag = 0x53000000;
};

// One native iteration's measured times, seconds (the same on every rank).
struct native_times {
  double pipeline_s = 0;  // the GPipe step of the slowest pipeline (forward and backward)
  double dp_s = 0;        // the slowest stage group's ring all-reduce
  double total_s() const noexcept { return pipeline_s + dp_s; }
};

// Iteration `it` of p, natively, on this rank. Requires: as replay_as_modelled's; M ≥ 1.
template <net::Transport Data, net::Transport Control>
result<native_times> replay_native(Data& data, Control& control, const placement& p,
                                   const native_options& o, long it) {
  if (auto s = validate_placement(p, data.size()); !s) return s.error();
  if (o.micro_batches < 1) return error(errc::invalid_argument, "replay_native: M must be ≥ 1");
  const int r = data.rank(), K = p.d_pp, M = o.micro_batches;
  const auto [j, s] = p.where(r);
  const auto until = [&] { return net::after(o.timeout); };
  net::tag_t ctl = o.control_tag + (net::tag_t(it & 0xFF) << 12);
  const auto tag = [&](int kind, int m) {
    return o.tag_base + (net::tag_t(kind) << 20) + (net::tag_t(it & 0xFF) << 8) + net::tag_t(m);
  };
  const auto fail = [&](const char* what, int peer, std::error_code ec) {
    return error(ec, std::string("native replay, ") + what + ", device " + std::to_string(r) +
                         " with device " + std::to_string(peer) + ": " + ec.message());
  };
  const std::size_t a = o.pp_bytes / std::size_t(M);
  const int prev = s > 0 ? p.pipelines[std::size_t(j)][std::size_t(s - 1)] : -1;
  const int next = s + 1 < K ? p.pipelines[std::size_t(j)][std::size_t(s + 1)] : -1;
  std::vector<std::byte> in(std::max<std::size_t>(a, 1));
  std::vector<std::vector<std::byte>> out(std::size_t(2 * M),
                                          std::vector<std::byte>(std::max<std::size_t>(a, 1)));
  std::vector<typename Data::request> sends;
  std::vector<double> mine;
  if (auto b = collectives::barrier(control, {.until = until(), .tag = ctl++}); !b)
    return b.error();
  auto t0 = std::chrono::steady_clock::now();
  for (const auto& op : pipeline::stage_ops(pipeline::schedule::gpipe, K, s, M)) {
    const int m = op.micro;
    if (op.kind == pipeline::op::forward) {
      if (prev >= 0) {
        auto q = data.recv(prev, tag(1, m), std::span<std::byte>(in.data(), a), until());
        if (auto ec = q.wait()) return fail("activation", prev, ec);
      }
      std::this_thread::sleep_for(o.forward_compute);
      if (next >= 0)
        sends.push_back(data.send(
            next, tag(1, m), std::span<const std::byte>(out[std::size_t(m)].data(), a), until()));
    } else {
      if (next >= 0) {
        auto q = data.recv(next, tag(2, m), std::span<std::byte>(in.data(), a), until());
        if (auto ec = q.wait()) return fail("gradient", next, ec);
      }
      std::this_thread::sleep_for(o.backward_compute);
      if (prev >= 0)
        sends.push_back(data.send(prev, tag(2, m),
                                  std::span<const std::byte>(out[std::size_t(M + m)].data(), a),
                                  until()));
    }
  }
  for (auto& q : sends)
    if (auto ec = q.wait()) return fail("a pipeline send", -1, ec);
  mine.push_back(detail::since(t0));
  // The stage group's ring all-reduce of its gradient, in pipeline order.
  if (auto b = collectives::barrier(control, {.until = until(), .tag = ctl++}); !b)
    return b.error();
  t0 = std::chrono::steady_clock::now();
  if (p.d_dp > 1) {
    net::subgroup<Data> group(data, p.group(s));
    std::vector<float> g(o.dp_bytes / sizeof(float), 1.0f);
    if (auto st = collectives::allreduce_ring(group, std::span<float>(g),
                                              {.until = until(), .tag = tag(3, 0)});
        !st)
      return error(st.error().code, "native replay, device " + std::to_string(r) +
                                        ", the stage group's all-reduce: " + st.error().message);
  }
  mine.push_back(detail::since(t0));
  auto slow = detail::slowest(control, mine, until(), ctl++);
  if (!slow) return slow.error();
  return native_times{(*slow)[0], (*slow)[1]};
}

// paco's own prediction of a native iteration: the slowest pipeline's predict_step (each with
// its own links), and the slowest group's ring: 2 (D − 1) · max over its ring's links of
// α + (c/D)/β. link(i, j): the emulated link from device i to j (place::emulated_link).
template <class Link>
native_times predict_native(const placement& p, const native_options& o, Link link) {
  native_times t;
  const int K = p.d_pp, M = o.micro_batches;
  const std::vector<pipeline::stage_time> st(
      std::size_t(K), {std::chrono::duration<double>(o.forward_compute).count(),
                       std::chrono::duration<double>(o.backward_compute).count()});
  for (const auto& pl : p.pipelines) {
    std::vector<pipeline::link_time> fw, bw;
    for (int s = 0; s + 1 < K; ++s) {
      const auto f = link(pl[std::size_t(s)], pl[std::size_t(s) + 1]);
      const auto b = link(pl[std::size_t(s) + 1], pl[std::size_t(s)]);
      fw.push_back({f.latency_s, f.rate_bytes_per_s});
      bw.push_back({b.latency_s, b.rate_bytes_per_s});
    }
    auto step = pipeline::predict_step(pipeline::schedule::gpipe, K, M, st, fw, bw,
                                       o.pp_bytes / std::size_t(M));
    t.pipeline_s = std::max(t.pipeline_s, std::move(step).value_or_throw());
  }
  const int D = p.d_dp;
  if (D > 1)
    for (int s = 0; s < K; ++s) {
      const auto g = p.group(s);
      double worst = 0;
      for (int i = 0; i < D; ++i) {
        const auto l = link(g[std::size_t(i)], g[std::size_t((i + 1) % D)]);
        worst = std::max(worst, l.latency_s + double(o.dp_bytes) / D / l.rate_bytes_per_s);
      }
      t.dp_s = std::max(t.dp_s, 2.0 * (D - 1) * worst);
    }
  return t;
}

}  // namespace paco::place
