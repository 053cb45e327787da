// DiLoCo on the Brown corpus (ALGORITHMS.md §2): 4 workers each train the same GPT on a quarter of
// the training documents; every H = 50 inner AdamW steps their pseudo-gradients θ_start − θ_end
// are averaged and one outer Nesterov step (lr 0.7, momentum 0.9) moves the shared model.
//   example_diloco [rounds = 20]
#include <cstdio>
#include <cstdlib>

#include <paco/paco.hpp>

using namespace paco;

int main(int argc, char** argv) try {
  const int rounds = argc > 1 ? std::atoi(argv[1]) : 20, workers = 4;
  const auto brown = io::load_corpus("brown", "").value_or_throw();  // scripts/deps.sh fetches it

  // Worker k's shard: every 4th training document from the k-th.
  const io::corpus train = brown.subset(io::split::train);
  std::vector<io::token_stream> shards;
  for (int k = 0; k < workers; ++k) {
    io::corpus part;
    for (std::size_t i = std::size_t(k); i < train.docs.size(); i += workers)
      part.docs.push_back(train.docs[i]);
    shards.push_back(io::token_stream::from(part));
  }

  nn::gpt model({.ctx = 64, .d = 64, .layers = 2, .heads = 4});
  arena<host> theta0(model.layout());
  model.init(theta0, 1);
  // DiLoCo is the grid of one module that every worker trains: 1 path, 4 workers on it.
  const auto plan = path::path_plan::make(path::module_grid<1>::experts({1}),
                                          *path::split_gpt_levels(model.layout(), 2, 1), workers)
                        .value_or_throw();
  auto diloco =
      train::local_trainer<nn::gpt, optim::adamw, outer::nesterov>::make(
          model, plan, theta0.get(plane::param), std::move(shards), optim::adamw{.lr = 1e-3f},
          {.inner = {.batch = 8, .ctx = 64, .steps = 50},
           .outer = {.lr = 0.7f, .momentum = 0.9f},
           .rounds = rounds})
          .value_or_throw();
  diloco
      ->run({},
            [](const train::round_report& r) {
              double loss = 0;
              for (double l : r.worker_loss) loss += l / double(r.worker_loss.size());
              std::printf("round %3ld  mean inner loss %.3f nats/byte\n", r.round + 1, loss);
            })
      .throw_if_error();

  // The shared model after the last outer step, scored on the validation documents.
  const auto val = route::scored_docs::of(brown.subset(io::split::validation));
  const auto theta = diloco->path_thetas()[0];
  auto ws = model.make_workspace({8, 64});
  const auto n = route::assigned_nll(model, std::vector{theta.data()}, {val.spans},
                                     *route::sliding_window::make(64), ws);
  std::printf("validation: %.4f bits/byte over %zu documents; %.1f MB sent per worker\n",
              n.bits_per_token(), val.size(), diloco->fp32_bytes_per_worker() / 1e6);
} catch (const std::exception& e) {
  std::fprintf(stderr, "example_diloco: %s\n", e.what());
  return 1;
}
