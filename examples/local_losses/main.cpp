// Local losses (Laskin et al.'s local parallelism) on a model of one's own, cut into 2 stages
// that train in 2 processes over TCP on this machine. Stage 0 trains its blocks through an
// auxiliary linear head; only activations cross the link, no gradient comes back, so each
// stage steps as soon as its own batch is done. Stage 0 then gathers the whole model.
//   example_local_losses [steps = 300]
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>

#include <paco/net/asio_tcp.hpp>
#include <paco/net/free_port.hpp>
#include <paco/paco.hpp>

using namespace paco;

// One's own block: attention, then two MLPs, each a pre-norm residual.
using my_block = nn::seq<nn::attention_block, nn::mlp_block, nn::mlp_block>;
my_block make_block(int C, int heads) {
  auto mlp = [C] {
    return nn::mlp_block{nn::seq<nn::layer_norm, nn::mlp>(
        nn::layer_norm{.C = C}, nn::mlp(nn::linear{.in = C, .out = 2 * C}, nn::gelu{.C = 2 * C},
                                        nn::linear{.in = 2 * C, .out = C}))};
  };
  return my_block(nn::attention_block{nn::seq<nn::layer_norm, nn::causal_attention>(
                      nn::layer_norm{.C = C}, nn::causal_attention{.C = C, .NH = heads})},
                  mlp(), mlp());
}

int main(int argc, char** argv) try {
  const long steps = argc > 1 ? std::atol(argv[1]) : 300;
  const int B = 8, T = 64;
  const auto brown = io::load_corpus("brown", "").value_or_throw();  // scripts/deps.sh fetches it
  const auto train = io::token_stream::from(brown.subset(io::split::train));
  const auto val = io::token_stream::from(brown.subset(io::split::validation));
  using model_t = nn::block_lm<my_block>;
  const model_t model({.vocab = 256, .ctx = T, .d = 64}, make_block(64, 4), 4);
  const auto plan = pipeline::stage_plan::equal(model.blocks(), 2).value_or_throw();  // 2 + 2
  const pipeline::pipeline_options opts{
      .sched = pipeline::schedule::local, .queue_depth = 2, .head = pipeline::head_kind::linear};
  const std::vector<std::string> peers{"127.0.0.1:" + std::to_string(net::free_loopback_port()),
                                       "127.0.0.1:" + std::to_string(net::free_loopback_port())};
  const pid_t child = fork();  // stage 1 runs in a process of its own
  if (child < 0) throw std::runtime_error("fork failed");
  const int k = child == 0 ? 1 : 0;
  auto net = net::asio_tcp::connect({.rank = k, .size = 2, .peers = peers, .token = "example"})
                 .value_or_throw();
  arena<host> a(model.layout());
  model.init(a, 1);  // the same θ on both stages; each trains its own span
  const optim::adamw opt{.lr = 3e-3f, .weight_decay = 0.1f};
  const optim::warmup_cosine sched{.lr = 3e-3f, .min_lr = 3e-4f, .warmup = 20, .total = steps};
  pipeline::stage_loop<model_t, net::asio_tcp> loop(model, plan, opts, B, T, sched, *net, train, 1);
  loop.train(a, opt, steps,
             [&](long t, double loss) -> status {
               if (t % 100 == 0 || t == steps)
                 std::printf("stage %d step %ld: its own loss %.3f bits/byte\n", k, t,
                             loss / std::log(2.0));
               return {};
             })
      .throw_if_error();
  auto& run = loop.runner();
  run.gather(a).throw_if_error();  // the whole model on stage 0 (the heads are training-only)
  if (k == 1) return 0;
  int st = 0;
  waitpid(child, &st, 0);
  if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) throw std::runtime_error("stage 1 failed");
  io::batch_sampler batches(val, B, T, 2);
  std::vector<std::int32_t> x(B * T), y(B * T);
  auto ws = model.make_workspace({B, T});
  double nll = 0;
  for (int i = 0; i < 16; ++i)
    batches.next(x.data(), y.data()),
        nll += model.loss(a.get(plane::param).data(), x.data(), y.data(), ws) / 16;
  std::printf("the whole model on validation: %.3f bits/byte, %zu bytes sent by stage 0\n",
              nll / std::log(2.0), run.stats().bytes_sent);
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "example_local_losses: %s\n", e.what());
  return 1;
}
