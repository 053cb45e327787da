#pragma once
// mpi: a Transport over MPI (Open MPI on clusters). Point-to-point MPI_Isend/MPI_Irecv on a
// duplicated communicator with MPI_ERRORS_RETURN; waits poll MPI_Test until the deadline, so
// a hung peer becomes errc::timeout instead of a hang. Link with paco::mpi.
//
// Tags: MPI guarantees only tags up to MPI_TAG_UB (>= 32767); a paco tag maps to
// tag % (MPI_TAG_UB + 1). Deadline on a send: MPI cannot always cancel a send already matched,
// so a send that timed out is cancelled if MPI allows and otherwise released (its buffer must
// then stay alive until MPI_Finalize; documented, rare: it needs a receiver that stopped
// mid-message).

#include <mpi.h>

#include <atomic>
#include <memory>
#include <span>
#include <thread>

#include "paco/core/error.hpp"
#include "paco/net/concepts.hpp"

namespace paco::net {

// MPI_Init_thread / MPI_Finalize for the lifetime of the object (unless MPI was already up).
class mpi_environment {
 public:
  mpi_environment(int* argc, char*** argv) {
    int inited = 0;
    MPI_Initialized(&inited);
    if (!inited) {
      int provided = 0;
      MPI_Init_thread(argc, argv, MPI_THREAD_SERIALIZED, &provided);
      owner_ = true;
    }
  }
  ~mpi_environment() {
    int fin = 0;
    MPI_Finalized(&fin);
    if (owner_ && !fin) MPI_Finalize();
  }
  mpi_environment(const mpi_environment&) = delete;
  mpi_environment& operator=(const mpi_environment&) = delete;

  // Ends every process of the job: MPI_Abort(MPI_COMM_WORLD, code), so that mpirun stops the
  // ranks still waiting in a collective (or stopped, or hung) instead of waiting for them, and
  // exits with `code`. For a program's error path, after it printed its error: paco's library
  // code never calls it (nothing in the library ends the process on its own).
  // Requires: MPI initialised and not finalised. Ensures: does not return (unless MPI_Abort
  // fails, which the MPI standard leaves to the implementation).
  void abort(int code) const { MPI_Abort(MPI_COMM_WORLD, code); }

 private:
  bool owner_ = false;
};

// One rank of an MPI communicator. Models Transport.
// Requires: MPI initialised (mpi_environment); one thread calls send/recv/wait at a time
// (cancel_all may come from any thread).
class mpi {
 public:
  class request {
   public:
    request() = default;
    request(request&& o) noexcept { *this = std::move(o); }
    request& operator=(request&& o) noexcept {
      if (this != &o) {
        cancel();
        r_ = std::exchange(o.r_, MPI_REQUEST_NULL);
        d_ = o.d_;
        len_ = o.len_;
        send_ = o.send_;
        ec_ = o.ec_;
        epoch_ = o.epoch_;
        cancels_ = o.cancels_;
      }
      return *this;
    }
    ~request() { cancel(); }

    std::error_code wait() {
      int spins = 0;
      while (r_ != MPI_REQUEST_NULL) {
        if (test()) break;
        if (cancels_ && cancels_->load() != epoch_) return abandon(errc::cancelled);
        if (clock::now() >= d_) return abandon(errc::timeout);
        if (++spins < 64)
          std::this_thread::yield();
        else
          std::this_thread::sleep_for(std::chrono::microseconds(20));
      }
      return ec_;
    }
    bool test() {
      if (r_ == MPI_REQUEST_NULL) return true;
      int flag = 0;
      MPI_Status st;
      int rc = MPI_Test(&r_, &flag, &st);
      if (rc != MPI_SUCCESS) {
        r_ = MPI_REQUEST_NULL;
        ec_ = classify(rc);
        return true;
      }
      if (!flag) return false;
      if (!send_) {
        int count = 0;
        MPI_Get_count(&st, MPI_BYTE, &count);
        if (static_cast<std::size_t>(count) != len_) ec_ = errc::mismatch;
      }
      return true;
    }
    void cancel() {
      if (r_ != MPI_REQUEST_NULL) abandon(errc::cancelled);
    }

   private:
    friend class mpi;
    static std::error_code classify(int rc) {
      int cls = 0;
      MPI_Error_class(rc, &cls);
      if (cls == MPI_ERR_TRUNCATE) return errc::mismatch;
      return errc::peer_lost;
    }
    std::error_code abandon(errc why) {
      MPI_Cancel(&r_);
      auto until = clock::now() + std::chrono::milliseconds(100);
      int flag = 0;
      MPI_Status st;
      while (r_ != MPI_REQUEST_NULL && clock::now() < until) {
        MPI_Test(&r_, &flag, &st);
        if (flag) break;
        std::this_thread::yield();
      }
      if (r_ != MPI_REQUEST_NULL) MPI_Request_free(&r_);
      r_ = MPI_REQUEST_NULL;
      ec_ = why;
      return ec_;
    }
    MPI_Request r_ = MPI_REQUEST_NULL;
    deadline d_{};
    std::size_t len_ = 0;
    bool send_ = false;
    std::error_code ec_;
    std::uint64_t epoch_ = 0;
    const std::atomic<std::uint64_t>* cancels_ = nullptr;
  };

  // Wraps a duplicate of comm. Requires: MPI initialised.
  explicit mpi(MPI_Comm comm = MPI_COMM_WORLD)
      : cancels_(std::make_unique<std::atomic<std::uint64_t>>(0)) {
    MPI_Comm_dup(comm, &comm_);
    MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
    int* ub = nullptr;
    int flag = 0;
    MPI_Comm_get_attr(comm_, MPI_TAG_UB, &ub, &flag);
    tag_ub_ = flag && ub ? *ub : 32767;
  }
  ~mpi() {
    int fin = 0;
    MPI_Finalized(&fin);
    if (comm_ != MPI_COMM_NULL && !fin) MPI_Comm_free(&comm_);
  }
  mpi(const mpi&) = delete;
  mpi& operator=(const mpi&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }

  request send(int peer, tag_t tag, std::span<const std::byte> bytes, deadline d) {
    request q = make(d, bytes.size(), true);
    if (peer < 0 || peer >= size_ || peer == rank_) {
      q.ec_ = errc::invalid_argument;
      return q;
    }
    int rc = MPI_Isend(bytes.data(), static_cast<int>(bytes.size()), MPI_BYTE, peer, map(tag),
                       comm_, &q.r_);
    if (rc != MPI_SUCCESS) q.ec_ = request::classify(rc);
    return q;
  }
  request recv(int peer, tag_t tag, std::span<std::byte> bytes, deadline d) {
    request q = make(d, bytes.size(), false);
    if (peer < 0 || peer >= size_ || peer == rank_) {
      q.ec_ = errc::invalid_argument;
      return q;
    }
    int rc = MPI_Irecv(bytes.data(), static_cast<int>(bytes.size()), MPI_BYTE, peer, map(tag),
                       comm_, &q.r_);
    if (rc != MPI_SUCCESS) q.ec_ = request::classify(rc);
    return q;
  }
  // Ensures: every request posted before this call returns cancelled from its wait().
  void cancel_all() { cancels_->fetch_add(1); }

 private:
  request make(deadline d, std::size_t len, bool send) const {
    request q;
    q.d_ = d;
    q.len_ = len;
    q.send_ = send;
    q.cancels_ = cancels_.get();
    q.epoch_ = cancels_->load();
    return q;
  }
  int map(tag_t t) const { return static_cast<int>(t % (static_cast<tag_t>(tag_ub_) + 1)); }
  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0, size_ = 1, tag_ub_ = 32767;
  std::unique_ptr<std::atomic<std::uint64_t>> cancels_;
};

static_assert(Transport<mpi>);

}  // namespace paco::net
