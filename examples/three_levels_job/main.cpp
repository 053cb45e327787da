// The three-level model of examples/three_levels (its block of its own, ../three_levels/
// my_block.hpp: two attention sublayers per MLP sublayer), trained as a DiPaCo job of real
// processes: a store and one worker process per path over TCP, with checkpoints, resume, restarts
// and the results table (job/main.hpp). Grid [1, 5, 1]: level 0 (embedding + block 0) and level 2
// (block 2 + norm + head) are shared by every path, level 1 (block 1) has 5 experts: 5 paths, 7
// modules, 5 workers.
//   example_three_levels_job [--run-dir DIR] [--fresh | --resume]   the launcher, on this machine
//   example_three_levels_job --role store | --role worker --worker N   one process (manual)
//   example_three_levels_job -c job.toml --set dipaco.rounds=8        settings over the values
//                                                                     below, no recompiling
//   example_three_levels_job --help                                   every flag and setting
#include <paco/job/job.hpp>
#include <paco/paco.hpp>

#include "../three_levels/my_block.hpp"

using namespace paco;

int main(int argc, char** argv) {
  using model_t = nn::block_lm<my_block>;
  job::dipaco_job<model_t> dipaco{
      {}, model_t({.vocab = 256, .ctx = 64, .d = 64}, make_my_block(64, 4), 3)};
  dipaco.program = "example_three_levels_job";
  dipaco.model_fingerprint = "model=three_levels block=attention,attention,mlp d=64 heads=4 ctx=64";
  dipaco.output.dir = "out/three_levels_job";
  dipaco.dipaco.grid = {1, 5, 1};
  dipaco.dipaco.rounds = 4;
  dipaco.dipaco.inner_steps = 25;
  dipaco.dipaco.pretrain_steps = 50;
  dipaco.dipaco.reroute_every = 0;
  dipaco.train.batch = 8;
  dipaco.train.lr = 1e-3f;
  dipaco.train.min_lr = 1e-4f;
  dipaco.train.warmup = 10;
  dipaco.train.threads = 1;
  return job::run_main(dipaco, argc, argv);
}
