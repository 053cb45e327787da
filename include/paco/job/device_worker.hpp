#pragma once
// Workers on a device behind plain C++ virtual calls, so that a job's translation units need no
// device headers and the device's own need no Asio:
//   device_path_worker  a DiPaCo worker's path (job.mode = "dipaco")
//   device_lm           the LM job's one model (job.mode = "lm", job/lm_job.hpp)
//
// device_path_worker: a path worker on a device behind plain C++ virtual calls, so that a job's
// translation units need no device headers and the device's own need no Asio. It models
// train::PathWorker itself (its store traffic goes through its host-side path_buffers, which
// the job's code drives with any store), so the library's round body (train::run_worker) drives
// it as it drives the host worker, under every sync rule. A job makes one through its
// dipaco_job::make_device_worker (paco_train's: the GPT on CUDA, kernels::path_worker_cuda).
#include <cstddef>
#include <string>
#include <vector>

#include "paco/core/arena.hpp"
#include "paco/core/error.hpp"
#include "paco/optim/adamw.hpp"
#include "paco/train/path_buffers.hpp"

namespace paco::job {

class device_path_worker {
 public:
  using path_worker_tag = void;  // models train::PathWorker
  virtual ~device_path_worker() = default;
  // train::PathWorker's members (train/concepts.hpp); train and land_level throw
  // error_exception on a failed device call.
  virtual train::path_buffers& buffers() = 0;
  virtual double train(int n) = 0;
  virtual int steps_per_round() const = 0;
  virtual status prepare_level(std::size_t l) = 0;
  virtual void land_level(std::size_t l, bool fetched, float sigma, float alpha) = 0;
  virtual void weigh_from_here() = 0;
  virtual long inner_step() const = 0;
  // The worker's planes (θ, anchor, moments, residual) into / from a host arena of the model's
  // layout: its checkpoint and its resume.
  virtual status download(arena<host>& a) = 0;
  virtual status restore(const arena<host>& a) = 0;
  virtual std::string describe() const = 0;
};

// device_lm: the LM job's inner loop on a device (paco_train's: kernels::inner_loop_cuda), sampling
// its shard as train::inner_loop does. A job makes one through its dipaco_job::make_device_lm.
class device_lm {
 public:
  virtual ~device_lm() = default;
  // One inner step at learning rate lr on the device's θ; returns the batch's mean loss.
  virtual double step(const optim::adamw& opt, float lr) = 0;
  // θ and the AdamW moments between the host arena and the device (whole planes).
  virtual status upload(const arena<host>& a) = 0;
  virtual status download(arena<host>& a) = 0;
  // The device's name and the GEMM arithmetic, for the job's banner.
  virtual std::string describe() const = 0;
};

}  // namespace paco::job
