#pragma once
// paced_learner: a path worker as the round body's learner (train/round_body.hpp) under a train
// budget and a throttle (worker_loop_options::train_budget, ::throttle; train/worker_loop.hpp).
// train(n) runs n inner steps — with a budget as many as fit in it (checked before each step: the
// next one is taken if the time trained plus the round's mean step so far stays within it; at
// least one), with a throttle each followed by (throttle − 1) times its duration asleep
// (experiments: a worker `throttle` times slower) — and books their seconds and their mean loss.
// Budget and throttle need a worker that trains step by step (train(1)); without either, train(n)
// is the worker's own.
//
//   train::paced_learner<W> l(w, std::chrono::seconds(2), 1.0);
//   train::round_body<X, train::paced_learner<W>> body(x, l, plan, fragments);

#include <chrono>
#include <thread>
#include <utility>

namespace paco::train {

template <class W>
class paced_learner {
 public:
  using clock = std::chrono::steady_clock;
  // Requires: w outlives the learner; throttle ≥ 1 (1: none); budget zero: none.
  paced_learner(W& w, clock::duration budget, double throttle)
      : w_(&w), budget_(budget), throttle_(throttle) {}
  int steps_per_round() const noexcept { return w_->steps_per_round(); }
  // The budget of the next rounds (zero: none).
  void set_budget(clock::duration budget) noexcept { budget_ = budget; }
  double train(int n) {
    const auto t0 = clock::now();
    const bool budget = budget_ > clock::duration::zero();
    if (!budget && throttle_ <= 1) {
      last_ = w_->train(n);
    } else {
      double sum = 0;
      int steps = 0;
      while (steps < n) {
        const auto s0 = clock::now();
        sum += w_->train(1);
        if (throttle_ > 1)
          std::this_thread::sleep_for(
              std::chrono::duration_cast<clock::duration>((clock::now() - s0) * (throttle_ - 1)));
        ++steps;
        const auto spent = clock::now() - t0;
        if (budget && spent + spent / steps > budget_) break;  // the next step would not fit
      }
      last_ = sum / steps;
    }
    train_s_ += std::chrono::duration<double>(clock::now() - t0).count();
    return last_;
  }
  double last_loss() const noexcept { return last_; }
  // The seconds trained since the last call.
  double take_train_seconds() noexcept { return std::exchange(train_s_, 0.0); }

 private:
  W* w_;
  clock::duration budget_;
  double throttle_;
  double last_ = 0;
  double train_s_ = 0;
};

}  // namespace paco::train
