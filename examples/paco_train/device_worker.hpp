#pragma once
// device_worker: the DiPaCo worker role's path worker for paco_train's GPT on a CUDA device
// (kernels::path_worker_cuda), behind the job layer's interfaces (job/device_worker.hpp) so that
// paco_train's other translation units need no CUDA headers and the device one needs no Asio.
// device_worker.cu implements make_device_path_worker when CMake finds nvcc; otherwise
// device_none.cpp says so when asked.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "paco/core/arena.hpp"
#include "paco/core/error.hpp"
#include "paco/io/batches.hpp"
#include "paco/job/device_worker.hpp"
#include "paco/nn/gpt.hpp"
#include "paco/optim/adamw.hpp"
#include "paco/path/level_map.hpp"
#include "paco/store/compression.hpp"
#include "paco/train/inner_loop.hpp"

namespace paco_train {

using device_path_worker = paco::job::device_path_worker;

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
