#pragma once
// device_lm: the LM job's inner loop on a CUDA device (kernels::inner_loop_cuda), behind a plain
// C++ interface so that paco_train's other translation units need no CUDA headers. device_lm.cu
// implements it when CMake finds nvcc; otherwise device_lm_none.cpp says so when asked for one.
#include <cstdint>
#include <memory>
#include <string>

#include "paco/core/arena.hpp"
#include "paco/core/error.hpp"
#include "paco/io/batches.hpp"
#include "paco/nn/gpt.hpp"
#include "paco/optim/adamw.hpp"
#include "paco/train/inner_loop.hpp"

namespace paco_train {

class device_lm {
 public:
  virtual ~device_lm() = default;
  // One inner step at learning rate lr on the device's θ; returns the batch's mean loss.
  virtual double step(const paco::optim::adamw& opt, float lr) = 0;
  // θ and the AdamW moments between the host arena and the device (whole planes).
  virtual paco::status upload(const paco::arena<paco::host>& a) = 0;
  virtual paco::status download(paco::arena<paco::host>& a) = 0;
  // The device's name and the GEMM arithmetic, for the job's banner.
  virtual std::string describe() const = 0;
};

// ok when this build has CUDA and device 0 is usable; otherwise unsupported naming why (checked
// before a job starts, so that a DiPaCo launch fails before it spawns anything).
paco::status device_available();

// A device trainer for `model` (which must outlive it) on CUDA device 0, sampling `shard` as
// train::inner_loop does; gemm is "bf16", "tf32" or "fp32". Errors: unsupported when this build has
// no CUDA or no device is usable (naming why); invalid_argument for another gemm.
paco::result<std::unique_ptr<device_lm>> make_device_lm(const paco::nn::gpt& model,
                                                        const paco::train::inner_config& cfg,
                                                        const paco::io::token_stream& shard,
                                                        std::uint64_t seed,
                                                        const std::string& gemm);

}  // namespace paco_train
