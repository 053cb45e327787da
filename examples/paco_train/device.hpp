#pragma once
// paco_train's GPT on a CUDA device, behind the job layer's interfaces (job/device_worker.hpp) so
// that paco_train's other translation units need no CUDA headers and the device ones need no
// Asio: the LM job's inner loop (kernels::inner_loop_cuda, device_lm.cu) and the DiPaCo worker
// role's path worker (kernels::path_worker_cuda, device_worker.cu). Built when CMake finds nvcc;
// otherwise device_none.cpp says so when asked for either.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "paco/core/error.hpp"
#include "paco/io/batches.hpp"
#include "paco/job/device_worker.hpp"
#include "paco/nn/gpt.hpp"
#include "paco/optim/adamw.hpp"
#include "paco/path/level_map.hpp"
#include "paco/store/compression.hpp"
#include "paco/train/inner_loop.hpp"

namespace paco_train {

using paco::job::device_lm;
using paco::job::device_path_worker;

// ok when this build has CUDA and device 0 is usable; otherwise unsupported naming why (checked
// before a job starts, so that a DiPaCo launch fails before it spawns anything).
paco::status device_available();

// A device trainer for `model` (which must outlive it) on CUDA device 0, sampling `shard` as
// train::inner_loop does; gemm is "bf16", "tf32" or "fp32". Errors: unsupported when this build
// has no CUDA or no device is usable (naming why); invalid_argument for another gemm.
paco::result<std::unique_ptr<device_lm>> make_device_lm(const paco::nn::gpt& model,
                                                        const paco::train::inner_config& cfg,
                                                        const paco::io::token_stream& shard,
                                                        std::uint64_t seed,
                                                        const std::string& gemm);

// Worker `id` of path levels/modules on CUDA device 0 (model and shard must outlive it); pushes
// are encoded with `compression` (int8/int4/int2 on the device; fp32 as plain floats).
// Errors: unsupported when this build has no CUDA, no device is usable, or the compression has
// no device kernels (naming why); invalid_argument for another gemm.
paco::result<std::unique_ptr<device_path_worker>> make_device_path_worker(
    int id, const paco::nn::gpt& model, std::vector<paco::path::level_span> levels,
    std::vector<int> modules, paco::optim::adamw opt, const paco::train::inner_config& cfg,
    const paco::io::token_stream& shard, std::uint64_t seed, const std::string& gemm,
    const paco::store::compression& compression);

}  // namespace paco_train
