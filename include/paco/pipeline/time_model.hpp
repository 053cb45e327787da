#pragma once
// time_model: the predicted time of one step of a global schedule (GPipe, 1F1B) over K stages
// and M micro-batches on given links — a discrete-event run of the schedule as the stages and a
// sender-side α–β shaper execute it (paco's per-peer shaper in asio_tcp):
//
//   stage k runs its ops (stage_ops) in order; F(m) starts when the stage is free and the
//   activation of m has arrived (stage 0: at once), B(m) when the gradient of m has arrived from
//   stage k+1 (the last stage: after its F(m)); each takes the stage's forward_s / backward_s;
//   a message posted at time t on a link is ready at t + latency and transmitted at the link's
//   rate after the link's previous message (FIFO per direction): it arrives at
//   max(t + latency, previous arrival) + bytes / rate.
//
// What it leaves out: compute of the optimizer step, frame headers and the shaper's burst (a few
// kB sent at once), and the kernel's own queues (loopback: none that matter).
//
//   auto t = pipeline::predict_step(schedule::gpipe, 4, 8, stages, fwd_links, bwd_links, bytes);

#include <algorithm>
#include <cstddef>
#include <span>
#include <string>
#include <vector>

#include "paco/core/error.hpp"
#include "paco/pipeline/schedule.hpp"

namespace paco::pipeline {

struct link_time {
  double latency_s = 0;
  double bytes_per_s = 0;  // 0: no limit
};
struct stage_time {
  double forward_s = 0, backward_s = 0;  // one micro-batch
};

// The time from the step's start to the last stage's last op (every stage's end: the step's
// end). stages: (K); forward[k], backward[k]: the links k → k+1 and k+1 → k (K − 1 each); bytes:
// one micro-batch's activation (its gradient is as large). Errors: invalid_argument for sizes or
// a schedule that is not global.
inline result<double> predict_step(schedule sched, int K, int M, std::span<const stage_time> stages,
                                   std::span<const link_time> forward,
                                   std::span<const link_time> backward, std::size_t bytes) {
  if (sched == schedule::local || K < 1 || M < 1 || int(stages.size()) != K ||
      int(forward.size()) != K - 1 || int(backward.size()) != K - 1)
    return error(errc::invalid_argument,
                 "predict_step: a global schedule, K ≥ 1 stages, M ≥ 1 and one time per stage, "
                 "K − 1 links each way");
  std::vector<std::vector<op>> ops;
  for (int k = 0; k < K; ++k) ops.push_back(stage_ops(sched, K, k, M));
  constexpr double unknown = -1;
  // act[k][m]: when m's activation reaches stage k; grad[k][m]: when m's gradient reaches k.
  std::vector<std::vector<double>> act(std::size_t(K),
                                       std::vector<double>(std::size_t(M), unknown));
  auto grad = act;
  std::vector<double> free_at(std::size_t(K), 0.0);
  std::vector<double> fwd_busy(std::size_t(std::max(K - 1, 0)), 0.0), bwd_busy = fwd_busy;
  std::vector<std::vector<double>> f_done = act;  // F(m) end at stage k (for the last stage's B)
  const auto transmit = [&](const link_time& l, double& busy, double posted) {
    const double start = std::max(posted + l.latency_s, busy);
    busy = start + (l.bytes_per_s > 0 ? double(bytes) / l.bytes_per_s : 0.0);
    return busy;
  };
  std::vector<std::size_t> pc(std::size_t(K), 0);
  std::fill(act[0].begin(), act[0].end(), 0.0);  // stage 0's inputs are there at the start
  for (bool moved = true; moved;) {
    moved = false;
    for (int k = 0; k < K; ++k) {
      const auto uk = std::size_t(k);
      while (pc[uk] < ops[uk].size()) {
        const op o = ops[uk][pc[uk]];
        const auto um = std::size_t(o.micro);
        double ready;
        if (o.kind == op::forward) {
          ready = act[uk][um];
        } else {
          ready = k + 1 == K ? f_done[uk][um] : grad[uk][um];
        }
        if (ready == unknown) break;
        const double start = std::max(free_at[uk], ready);
        const double end =
            start + (o.kind == op::forward ? stages[uk].forward_s : stages[uk].backward_s);
        free_at[uk] = end;
        if (o.kind == op::forward) {
          f_done[uk][um] = end;
          if (k + 1 < K) act[uk + 1][um] = transmit(forward[uk], fwd_busy[uk], end);
        } else if (k > 0) {
          grad[uk - 1][um] = transmit(backward[uk - 1], bwd_busy[uk - 1], end);
        }
        ++pc[uk];
        moved = true;
      }
    }
  }
  for (int k = 0; k < K; ++k)
    if (pc[std::size_t(k)] < ops[std::size_t(k)].size())
      return error(errc::invalid_argument,
                   "predict_step: stage " + std::to_string(k) + " never finishes (not a schedule)");
  return *std::max_element(free_at.begin(), free_at.end());
}

}  // namespace paco::pipeline
