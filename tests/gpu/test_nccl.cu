// NCCL as the device collective: a communicator bootstrapped over a paco Transport, its
// all-reduce and all-gather, and DiLoCo's fp32 mean on the device through it. One GPU allows one
// rank (NCCL refuses two ranks on a device): the single-rank communicator runs NCCL's real
// bootstrap, kernels and stream ordering; DiLoCo over it must give the same θ, bit for bit, as
// the same run whose Δ goes down to the host transport and back, with only the fingerprint (8
// bytes a round) coming down. Exits 77 without a usable CUDA device.
#include <cstdio>
#include <vector>

#include "gpu_test.cuh"
#include "paco/arena_cuda.cuh"
#include "paco/learner_cuda.cuh"
#include "paco/nccl.cuh"
#include "paco/net/inproc.hpp"
#include "paco/nn/gpt.hpp"
#include "paco/round_planes_cuda.cuh"
#include "paco/train/round_loop.hpp"

namespace pk = paco::kernels;
using gpu_test::dev;
using gpu_test::failures;
using gpu_test::gaussian;
using gpu_test::host;

namespace {

void collectives() {
  auto world = paco::net::inproc::world(1);
  auto comm = pk::nccl_comm::make(world[0], 0).value_or_throw();
  EXPECT(comm.rank() == 0 && comm.size() == 1, "rank %d of %d", comm.rank(), comm.size());
  cudaStream_t st;
  cudaStreamCreate(&st);
  const auto x = gaussian(1000, 1);
  auto d = dev(x);
  gpu_test::ok(comm.allreduce_sum(d.data(), x.size(), st), "allreduce_sum");
  cudaStreamSynchronize(st);
  EXPECT(host(d) == x, "a one-rank sum changed the data");
  paco::buffer<float, paco::cuda> out(x.size());
  gpu_test::ok(comm.all_gather(d.data(), out.data(), x.size() * sizeof(float), st), "all_gather");
  cudaStreamSynchronize(st);
  EXPECT(host(out) == x, "a one-rank all-gather changed the data");
  cudaStreamDestroy(st);
}

// Final θ of 2 DiLoCo rounds (k = 1, fp32) with Δ summed by NCCL or by the host transport.
std::vector<float> diloco(bool nccl, std::uint64_t& down_per_round) {
  const paco::nn::gpt model({.vocab = 256, .ctx = 64, .d = 64, .layers = 2, .heads = 4});
  const auto shard = gpu_test::grammar_stream(100000, 4);
  paco::arena<paco::host> init(model.layout());
  model.init(init, 5);
  auto world = paco::net::inproc::world(1);
  paco::train::inner_config cfg{.batch = 8, .ctx = 64, .grad_clip = 1.0f};
  cfg.schedule = {.lr = 3e-3f, .min_lr = 3e-4f, .warmup = 5, .total = 20};
  pk::inner_loop_cuda<paco::nn::gpt> loop(model, cfg, shard, 6);
  paco::arena<paco::cuda> a(model.layout());
  paco::upload(init, a, paco::plane::param, loop.workspace().ctx.stream()).throw_if_error();
  std::optional<pk::nccl_comm> comm;
  std::vector<pk::device_mean> means;
  if (nccl) {
    comm.emplace(pk::nccl_comm::make(world[0], 0).value_or_throw());
    means.push_back({std::nullopt, comm->allreducer()});
  }
  pk::learner_cuda<paco::nn::gpt> learner(loop, a, paco::optim::adamw{.lr = 3e-3f}, 10);
  paco::train::round_loop<paco::net::inproc, pk::learner_cuda<paco::nn::gpt>, paco::outer::nesterov,
                          paco::train::blocking>
      rep(world[0], learner, paco::outer::nesterov{}, {}, {}, std::move(means));
  gpu_test::ok(rep.run(2, std::chrono::minutes(1)), nccl ? "rounds over NCCL" : "rounds");
  down_per_round = rep.planes().transfers().d2h_bytes / 2;
  return host(a.get(paco::plane::param).data(), a.get(paco::plane::param).size());
}

}  // namespace

int main() {
  if (!gpu_test::device_or_skip("the NCCL tests were")) return 77;
  try {
    collectives();
    std::uint64_t down_nccl = 0, down_host = 0;
    const auto with_nccl = diloco(true, down_nccl);
    const auto with_host = diloco(false, down_host);
    std::printf(
        "DiLoCo fp32, one rank: %llu B down per round over NCCL, %llu B through the host "
        "(%zu floats)\n",
        (unsigned long long)down_nccl, (unsigned long long)down_host, with_host.size());
    EXPECT(with_nccl == with_host, "θ after the NCCL rounds differs from the host-transport run");
    EXPECT(down_nccl == 8, "over NCCL %llu bytes came down per round, expected the fingerprint's 8",
           (unsigned long long)down_nccl);
  } catch (const std::exception& e) {
    EXPECT(false, "threw: %s", e.what());
  }
  std::printf("%s (%d failures)\n", failures ? "FAILED" : "all NCCL tests passed", failures.load());
  return failures ? 1 : 0;
}
