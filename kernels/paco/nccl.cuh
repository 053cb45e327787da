#pragma once
// nccl_comm: NCCL as paco's collective backend for device buffers, for GPUs that share a machine
// (NVLink, PCIe) or a cluster (InfiniBand, RoCE): the all-reduce GPU users expect, with the
// data never leaving device memory. Bootstrapped over any paco Transport: rank 0 draws NCCL's
// unique id and broadcasts it (128 bytes) over the transport the job already has (TCP, MPI,
// threads), then every rank joins the communicator on its device. Link with libnccl (shipped
// with the CUDA toolkit: ${CUDAToolkit_LIBRARY_DIR}/libnccl.so).
//
//   auto comm = kernels::nccl_comm::make(transport, /*device=*/local_rank).value_or_throw();
//   comm.allreduce_sum(delta_d, n, stream);   // in place, on the device
//
// One rank per GPU: NCCL refuses two ranks of a communicator on one device ("duplicate GPU").
// Errors name the NCCL call and NCCL's message.
#include <cuda_runtime.h>
#include <nccl.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>

#include "paco/collectives/broadcast.hpp"
#include "paco/core/error.hpp"
#include "paco/core/slice.hpp"
#include "paco/cuda_check.cuh"
#include "paco/net/concepts.hpp"

namespace paco::kernels {

// Ensures: ok iff r == ncclSuccess; otherwise errc::unsupported naming `what` and NCCL's message.
inline status nccl_status(ncclResult_t r, const char* what) {
  if (r == ncclSuccess) return {};
  return {errc::unsupported, std::string(what) + ": " + ncclGetErrorString(r)};
}

class nccl_comm {
 public:
  // Every rank of t calls it with its own device. Errors: the broadcast's (timeout, peer_lost),
  // or the NCCL/CUDA call that failed (errc::unsupported).
  template <net::Transport T>
  static result<nccl_comm> make(T& t, int device, const collectives::collective_options& o = {}) {
    ncclUniqueId id{};
    if (t.rank() == 0)
      if (auto s = nccl_status(ncclGetUniqueId(&id), "ncclGetUniqueId"); !s) return s.error();
    std::uint8_t raw[sizeof id];
    std::memcpy(raw, &id, sizeof id);
    if (auto s = collectives::broadcast(t, slice<std::uint8_t>(raw, sizeof raw), 0, o); !s)
      return s.error();
    std::memcpy(&id, raw, sizeof id);
    if (auto s = cuda_status(cudaSetDevice(device), "cudaSetDevice"); !s) return s.error();
    nccl_comm c;
    c.rank_ = t.rank();
    c.size_ = t.size();
    if (auto s =
            nccl_status(ncclCommInitRank(&c.comm_, t.size(), id, t.rank()), "ncclCommInitRank");
        !s)
      return s.error();
    return result<nccl_comm>(std::move(c));
  }

  nccl_comm(nccl_comm&& o) noexcept
      : comm_(std::exchange(o.comm_, nullptr)), rank_(o.rank_), size_(o.size_) {}
  nccl_comm& operator=(nccl_comm&& o) noexcept {
    std::swap(comm_, o.comm_);
    std::swap(rank_, o.rank_);
    std::swap(size_, o.size_);
    return *this;
  }
  nccl_comm(const nccl_comm&) = delete;
  nccl_comm& operator=(const nccl_comm&) = delete;
  ~nccl_comm() {
    if (comm_) ncclCommDestroy(comm_);
  }

  int rank() const noexcept { return rank_; }
  int size() const noexcept { return size_; }

  // data (device, n floats) ← Σ over the ranks, in place, enqueued on `stream`. Every rank calls
  // it with the same n. NCCL's ring/tree sums in an order of its choosing, the same on every
  // rank of one communicator, so every rank gets the same bits.
  status allreduce_sum(float* data, std::size_t n, cudaStream_t stream) {
    return nccl_status(ncclAllReduce(data, data, n, ncclFloat32, ncclSum, comm_, stream),
                       "ncclAllReduce");
  }
  // allreduce_sum as a callable (kernels::device_allreduce, round_planes_cuda.cuh). Requires: *this
  // outlives it.
  auto allreducer() {
    return [this](float* data, std::size_t n, cudaStream_t stream) {
      return allreduce_sum(data, n, stream);
    };
  }
  // out (device, n·size() bytes) ← every rank's `in` (n bytes) in rank order.
  status all_gather(const void* in, void* out, std::size_t n, cudaStream_t stream) {
    return nccl_status(ncclAllGather(in, out, n, ncclUint8, comm_, stream), "ncclAllGather");
  }

 private:
  nccl_comm() = default;
  ncclComm_t comm_ = nullptr;
  int rank_ = 0;
  int size_ = 1;
};

}  // namespace paco::kernels
