#pragma once
// counted: a Transport adaptor that counts the bytes and messages this rank sends through it,
// so a collective's traffic is measured rather than estimated (the round loop reports it).

#include <cstddef>
#include <span>

#include "paco/net/concepts.hpp"

namespace paco::collectives {

// Requires: t outlives the adaptor; one thread uses it at a time (like a rank's transport).
// Ensures: bytes() is the sum of the sizes of every send() made through it, messages() their
// count; everything else is forwarded unchanged.
template <net::Transport T>
class counted {
 public:
  using request = typename T::request;
  explicit counted(T& t) noexcept : t_(&t) {}

  int rank() const { return t_->rank(); }
  int size() const { return t_->size(); }
  request send(int peer, net::tag_t tag, std::span<const std::byte> b, net::deadline d) {
    bytes_ += b.size();
    ++messages_;
    return t_->send(peer, tag, b, d);
  }
  request recv(int peer, net::tag_t tag, std::span<std::byte> b, net::deadline d) {
    return t_->recv(peer, tag, b, d);
  }
  void cancel_all() { t_->cancel_all(); }

  std::size_t bytes() const noexcept { return bytes_; }
  std::size_t messages() const noexcept { return messages_; }

 private:
  T* t_;
  std::size_t bytes_ = 0, messages_ = 0;
};

}  // namespace paco::collectives
