#pragma once
// A path worker on a device, behind plain C++ interfaces, so that a job's translation units need
// no device headers and the device's own needs no Asio:
//   store_ref            a module store seen through virtual calls (store_ref_of<S> wraps one)
//   device_path_worker   a device worker's round steps, checkpoint planes and inner step
//   device_worker_ref    models train::PathWorker over a device_path_worker, so the library's
//                        round loop (train::run_worker) drives it as it drives the host worker
// A job makes one through its dipaco_job::make_device_worker (paco_train's: the GPT on CUDA,
// kernels::path_worker_cuda).
#include <chrono>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "paco/core/arena.hpp"
#include "paco/core/error.hpp"
#include "paco/store/concepts.hpp"

namespace paco::job {

class store_ref {
 public:
  using module_store_tag = void;  // models store::EncodedModuleStore
  virtual ~store_ref() = default;
  virtual result<store::pulled> pull(int m, std::span<float> dst) = 0;
  virtual status push(int m, int worker, long round, std::span<const float> delta,
                      double weight) = 0;
  virtual status push_encoded(int m, int worker, long round, std::span<const std::byte> payload,
                              double weight) = 0;
  virtual status wait_closed(int m, long round, std::chrono::steady_clock::time_point until) = 0;
};

template <store::EncodedModuleStore S>
class store_ref_of final : public store_ref {
 public:
  explicit store_ref_of(S& s) : s_(s) {}
  result<store::pulled> pull(int m, std::span<float> dst) override { return s_.pull(m, dst); }
  status push(int m, int worker, long round, std::span<const float> delta, double weight) override {
    return s_.push(m, worker, round, delta, weight);
  }
  status push_encoded(int m, int worker, long round, std::span<const std::byte> payload,
                      double weight) override {
    return s_.push_encoded(m, worker, round, payload, weight);
  }
  status wait_closed(int m, long round, std::chrono::steady_clock::time_point until) override {
    return s_.wait_closed(m, round, until);
  }

 private:
  S& s_;
};

class device_path_worker {
 public:
  virtual ~device_path_worker() = default;
  virtual status pull(store_ref& s) = 0;
  virtual double train() = 0;  // throws error_exception on a CUDA error
  virtual status push(store_ref& s) = 0;
  virtual long round() const = 0;
  virtual const std::vector<int>& modules() const = 0;
  virtual long inner_step() const = 0;
  // The worker's planes (θ, anchor, moments, residual) into / from a host arena of the model's
  // layout: its checkpoint and its resume.
  virtual status download(arena<host>& a) = 0;
  virtual status restore(const arena<host>& a) = 0;
  virtual std::string describe() const = 0;
};

// train::PathWorker over a device_path_worker (which must outlive it).
class device_worker_ref {
 public:
  using path_worker_tag = void;
  explicit device_worker_ref(device_path_worker& w) : w_(w) {}
  template <store::EncodedModuleStore S>
  status pull(S& s) {
    store_ref_of<S> r(s);
    return w_.pull(r);
  }
  double train() { return w_.train(); }
  template <store::EncodedModuleStore S>
  status push(S& s) {
    store_ref_of<S> r(s);
    return w_.push(r);
  }
  long round() const { return w_.round(); }
  const std::vector<int>& modules() const { return w_.modules(); }

 private:
  device_path_worker& w_;
};

}  // namespace paco::job
