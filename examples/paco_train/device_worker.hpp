#pragma once
// device_worker: the DiPaCo worker role's path worker on a CUDA device
// (kernels::path_worker_cuda), behind plain C++ interfaces so that paco_train's other translation
// units need no CUDA headers and the device one needs no Asio:
//   store_ref            a module store seen through virtual calls (store_ref_of<S> wraps one)
//   device_path_worker   the device worker's round steps, checkpoint planes and inner step
//   device_worker_ref    models train::PathWorker over a device_path_worker, so the library's
//                        round loop (train::run_worker) drives it as it drives the host worker
// device_worker.cu implements make_device_path_worker when CMake finds nvcc; otherwise
// device_none.cpp says so when asked.
#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "paco/core/arena.hpp"
#include "paco/core/error.hpp"
#include "paco/io/batches.hpp"
#include "paco/nn/gpt.hpp"
#include "paco/optim/adamw.hpp"
#include "paco/path/level_map.hpp"
#include "paco/store/compression.hpp"
#include "paco/store/concepts.hpp"
#include "paco/train/concepts.hpp"
#include "paco/train/inner_loop.hpp"

namespace paco_train {

class store_ref {
 public:
  using module_store_tag = void;  // models store::EncodedModuleStore
  virtual ~store_ref() = default;
  virtual paco::result<paco::store::pulled> pull(int m, std::span<float> dst) = 0;
  virtual paco::status push(int m, int worker, long round, std::span<const float> delta,
                            double weight) = 0;
  virtual paco::status push_encoded(int m, int worker, long round,
                                    std::span<const std::byte> payload, double weight) = 0;
  virtual paco::status wait_closed(int m, long round,
                                   std::chrono::steady_clock::time_point until) = 0;
};

template <paco::store::EncodedModuleStore S>
class store_ref_of final : public store_ref {
 public:
  explicit store_ref_of(S& s) : s_(s) {}
  paco::result<paco::store::pulled> pull(int m, std::span<float> dst) override {
    return s_.pull(m, dst);
  }
  paco::status push(int m, int worker, long round, std::span<const float> delta,
                    double weight) override {
    return s_.push(m, worker, round, delta, weight);
  }
  paco::status push_encoded(int m, int worker, long round, std::span<const std::byte> payload,
                            double weight) override {
    return s_.push_encoded(m, worker, round, payload, weight);
  }
  paco::status wait_closed(int m, long round,
                           std::chrono::steady_clock::time_point until) override {
    return s_.wait_closed(m, round, until);
  }

 private:
  S& s_;
};

class device_path_worker {
 public:
  virtual ~device_path_worker() = default;
  virtual paco::status pull(store_ref& s) = 0;
  virtual double train() = 0;  // throws error_exception on a CUDA error
  virtual paco::status push(store_ref& s) = 0;
  virtual long round() const = 0;
  virtual const std::vector<int>& modules() const = 0;
  virtual long inner_step() const = 0;
  // The worker's planes (θ, anchor, moments, residual) into / from a host arena of the model's
  // layout: its checkpoint and its resume.
  virtual paco::status download(paco::arena<paco::host>& a) = 0;
  virtual paco::status restore(const paco::arena<paco::host>& a) = 0;
  virtual std::string describe() const = 0;
};

// train::PathWorker over a device_path_worker (which must outlive it).
class device_worker_ref {
 public:
  using path_worker_tag = void;
  explicit device_worker_ref(device_path_worker& w) : w_(w) {}
  template <paco::store::EncodedModuleStore S>
  paco::status pull(S& s) {
    store_ref_of<S> r(s);
    return w_.pull(r);
  }
  double train() { return w_.train(); }
  template <paco::store::EncodedModuleStore S>
  paco::status push(S& s) {
    store_ref_of<S> r(s);
    return w_.push(r);
  }
  long round() const { return w_.round(); }
  const std::vector<int>& modules() const { return w_.modules(); }

 private:
  device_path_worker& w_;
};

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
