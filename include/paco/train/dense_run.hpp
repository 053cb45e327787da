#pragma once
// dense_run: one model trained alone by the inner loop — a dense baseline row, or the shared base
// model's pretraining (train/base_model.hpp) — reporting its learning curve.
//
//   auto curve = train::dense_run(model, a, stream, cfg, optim::adamw{.lr = 1e-3f}, 2000, seed);

#include <cstdint>
#include <functional>
#include <vector>

#include "paco/core/arena.hpp"
#include "paco/io/batches.hpp"
#include "paco/train/inner_loop.hpp"
#include "paco/train/learning_curve.hpp"

namespace paco::train {

// `steps` steps of train::inner_loop on `a` (parameters in place) from zeroed moments
// (plane::moment1, plane::moment2), batches of `stream` sampled with `seed`, the learning rate of
// cfg.schedule (cfg.steps is not used). on_step(step, loss) after each (optional).
// Requires: inner_loop's (stream longer than cfg.ctx); curve_every ≥ 1.
// Ensures: returns window_means of the steps' losses over `curve_every` steps.
template <Model M, optim::InnerOptimizer InnerOpt>
std::vector<double> dense_run(const M& model, arena<host>& a, const io::token_stream& stream,
                              const inner_config& cfg, const InnerOpt& opt, int steps,
                              std::uint64_t seed, int curve_every = 1000,
                              const std::function<void(long, double)>& on_step = {}) {
  inner_loop<M, InnerOpt> loop(model, cfg, stream, seed);
  a.zero(plane::moment1);
  a.zero(plane::moment2);
  std::vector<double> losses;
  losses.reserve(std::size_t(steps));
  loop.run(a, opt, steps, [&](long t, double l) {
    losses.push_back(l);
    if (on_step) on_step(t, l);
  });
  return window_means(losses, curve_every);
}

}  // namespace paco::train
