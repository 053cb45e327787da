#pragma once
// inproc: a Transport whose ranks are threads of one process (tests, single-machine runs).
// Sends copy eagerly into the receiver's mailbox (or straight into a posted recv), so a send
// completes at once; a recv completes when a matching message arrives or its deadline passes.

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <span>
#include <vector>

#include "paco/core/error.hpp"
#include "paco/net/concepts.hpp"

namespace paco::net {

namespace detail {

struct inproc_op {
  int peer = 0;
  tag_t tag = 0;
  std::span<std::byte> buf;
  bool done = false;
  std::error_code ec;
};

struct inproc_hub {
  struct message {
    int src;
    tag_t tag;
    std::vector<std::byte> bytes;
  };
  struct mailbox {
    std::deque<std::shared_ptr<inproc_op>> posted;  // recvs waiting, in posting order
    std::deque<message> unexpected;                 // messages waiting, in arrival order
    bool closed = false;
  };
  explicit inproc_hub(int p) : boxes(static_cast<std::size_t>(p)) {}

  std::mutex mu;
  std::condition_variable cv;
  std::vector<mailbox> boxes;

  // Requires: mu held. Completes op with ec and wakes waiters.
  void complete(inproc_op& op, std::error_code ec) {
    op.done = true;
    op.ec = ec;
    cv.notify_all();
  }
  // Requires: mu held. Removes op from rank r's posted list (if still there).
  void unpost(int r, const inproc_op* op) {
    auto& q = boxes[static_cast<std::size_t>(r)].posted;
    auto it = std::find_if(q.begin(), q.end(), [&](auto& p) { return p.get() == op; });
    if (it != q.end()) q.erase(it);
  }
};

}  // namespace detail

// One rank's endpoint of an in-process world. Models Transport.
// Requires: endpoints of one world are used by distinct threads (or one thread, non-blocking).
class inproc {
 public:
  // A pending inproc operation. Ensures: wait() returns by the op's deadline.
  class request {
   public:
    request() = default;
    request(request&&) noexcept = default;
    request& operator=(request&& o) noexcept {
      if (this != &o) {
        cancel();
        hub_ = std::move(o.hub_);
        op_ = std::move(o.op_);
        owner_ = o.owner_;
        d_ = o.d_;
      }
      return *this;
    }
    ~request() { cancel(); }

    // Blocks until complete or the deadline; then the buffer is no longer touched.
    std::error_code wait() {
      if (!op_) return {};
      std::unique_lock lk(hub_->mu);
      if (!hub_->cv.wait_until(lk, d_, [&] { return op_->done; })) {
        hub_->unpost(owner_, op_.get());
        hub_->complete(*op_, errc::timeout);
      }
      return op_->ec;
    }
    bool test() {
      if (!op_) return true;
      std::lock_guard lk(hub_->mu);
      return op_->done;
    }
    // Ensures: a pending op completes with errc::cancelled.
    void cancel() {
      if (!op_) return;
      std::lock_guard lk(hub_->mu);
      if (!op_->done) {
        hub_->unpost(owner_, op_.get());
        hub_->complete(*op_, errc::cancelled);
      }
    }

   private:
    friend class inproc;
    request(std::shared_ptr<detail::inproc_hub> h, std::shared_ptr<detail::inproc_op> op, int owner,
            deadline d)
        : hub_(std::move(h)), op_(std::move(op)), owner_(owner), d_(d) {}
    std::shared_ptr<detail::inproc_hub> hub_;
    std::shared_ptr<detail::inproc_op> op_;
    int owner_ = 0;
    deadline d_{};
  };

  // p connected endpoints, endpoint i has rank i. Requires: p >= 1.
  static std::vector<inproc> world(int p) {
    PACO_ASSERT(p >= 1, "inproc::world needs p >= 1");
    auto hub = std::make_shared<detail::inproc_hub>(p);
    std::vector<inproc> w;
    for (int r = 0; r < p; ++r) w.push_back(inproc(hub, r, p));
    return w;
  }

  int rank() const { return rank_; }
  int size() const { return size_; }

  // Copies `bytes` to `peer`. Ensures: the request is complete on return (eager copy);
  // errc::peer_lost if peer closed, errc::cancelled if this endpoint closed.
  request send(int peer, tag_t tag, std::span<const std::byte> bytes, deadline d) {
    auto op = std::make_shared<detail::inproc_op>();
    op->peer = peer;
    op->tag = tag;
    std::lock_guard lk(hub_->mu);
    if (peer < 0 || peer >= size_ || peer == rank_) {
      hub_->complete(*op, errc::invalid_argument);
    } else if (hub_->boxes[static_cast<std::size_t>(rank_)].closed) {
      hub_->complete(*op, errc::cancelled);
    } else if (hub_->boxes[static_cast<std::size_t>(peer)].closed) {
      hub_->complete(*op, errc::peer_lost);
    } else {
      auto& box = hub_->boxes[static_cast<std::size_t>(peer)];
      auto it = std::find_if(box.posted.begin(), box.posted.end(),
                             [&](auto& p) { return p->peer == rank_ && p->tag == tag; });
      if (it != box.posted.end()) {
        auto r = *it;
        box.posted.erase(it);
        if (r->buf.size() != bytes.size()) {
          hub_->complete(*r, errc::mismatch);
        } else {
          if (!bytes.empty()) std::memcpy(r->buf.data(), bytes.data(), bytes.size());
          hub_->complete(*r, {});
        }
      } else {
        box.unexpected.push_back({rank_, tag, std::vector<std::byte>(bytes.begin(), bytes.end())});
      }
      hub_->complete(*op, {});
    }
    return request(hub_, std::move(op), rank_, d);
  }

  // Receives the next message from `peer` with `tag` into `bytes`.
  request recv(int peer, tag_t tag, std::span<std::byte> bytes, deadline d) {
    auto op = std::make_shared<detail::inproc_op>();
    op->peer = peer;
    op->tag = tag;
    op->buf = bytes;
    std::lock_guard lk(hub_->mu);
    auto& box = hub_->boxes[static_cast<std::size_t>(rank_)];
    if (peer < 0 || peer >= size_ || peer == rank_) {
      hub_->complete(*op, errc::invalid_argument);
    } else if (box.closed) {
      hub_->complete(*op, errc::cancelled);
    } else {
      auto it = std::find_if(box.unexpected.begin(), box.unexpected.end(),
                             [&](auto& m) { return m.src == peer && m.tag == tag; });
      if (it != box.unexpected.end()) {
        if (it->bytes.size() != bytes.size()) {
          hub_->complete(*op, errc::mismatch);
        } else {
          if (!bytes.empty()) std::memcpy(bytes.data(), it->bytes.data(), bytes.size());
          hub_->complete(*op, {});
        }
        box.unexpected.erase(it);
      } else if (hub_->boxes[static_cast<std::size_t>(peer)].closed) {
        hub_->complete(*op, errc::peer_lost);
      } else {
        box.posted.push_back(op);
      }
    }
    return request(hub_, std::move(op), rank_, d);
  }

  // Ensures: every pending recv of this endpoint completes with errc::cancelled.
  void cancel_all() {
    std::lock_guard lk(hub_->mu);
    auto& box = hub_->boxes[static_cast<std::size_t>(rank_)];
    for (auto& op : box.posted) hub_->complete(*op, errc::cancelled);
    box.posted.clear();
  }

  // This rank leaves the world (as if it crashed). Ensures: its pending recvs complete with
  // cancelled; peers' pending and future recvs from it (beyond messages already sent) and sends
  // to it complete with errc::peer_lost.
  void close() {
    std::lock_guard lk(hub_->mu);
    auto& me = hub_->boxes[static_cast<std::size_t>(rank_)];
    if (me.closed) return;
    me.closed = true;
    for (auto& op : me.posted) hub_->complete(*op, errc::cancelled);
    me.posted.clear();
    me.unexpected.clear();
    for (auto& box : hub_->boxes) {
      for (auto it = box.posted.begin(); it != box.posted.end();) {
        if ((*it)->peer == rank_) {
          hub_->complete(**it, errc::peer_lost);
          it = box.posted.erase(it);
        } else {
          ++it;
        }
      }
    }
  }

 private:
  inproc(std::shared_ptr<detail::inproc_hub> h, int r, int p)
      : hub_(std::move(h)), rank_(r), size_(p) {}
  std::shared_ptr<detail::inproc_hub> hub_;
  int rank_ = 0;
  int size_ = 1;
};

static_assert(Transport<inproc>);

}  // namespace paco::net
