#pragma once
// subgroup: a Transport over some ranks of another one. Rank i of the subgroup is rank
// members[i] of the parent; messages go through the parent's links, so a collective runs in a
// group (a pipeline stage's data-parallel replicas, a tensor-parallel set) without a transport
// of its own. Disjoint subgroups of one parent may use the same tags; overlapping ones must not.
//
//   net::subgroup g(world, {2, 5, 7});            // world.rank() must be one of them
//   collectives::allreduce_ring(g, grads, {});    // among ranks 2, 5 and 7 only

#include <algorithm>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "paco/core/error.hpp"
#include "paco/net/concepts.hpp"

namespace paco::net {

template <Transport T>
class subgroup {
 public:
  using request = typename T::request;

  // Requires (checked: throws error_exception): members distinct ranks of parent, holding
  // parent.rank(). parent outlives the subgroup.
  subgroup(T& parent, std::vector<int> members) : parent_(&parent), members_(std::move(members)) {
    for (std::size_t i = 0; i < members_.size(); ++i) {
      const int m = members_[i];
      if (m < 0 || m >= parent.size() || std::count(members_.begin(), members_.end(), m) != 1)
        throw error_exception(
            {errc::invalid_argument, "subgroup: member " + std::to_string(m) +
                                         " is not a distinct rank of a world of " +
                                         std::to_string(parent.size())});
      if (m == parent.rank()) rank_ = int(i);
    }
    if (rank_ < 0)
      throw error_exception(
          {errc::invalid_argument,
           "subgroup: rank " + std::to_string(parent.rank()) + " is not one of its members"});
  }

  int rank() const { return rank_; }
  int size() const { return int(members_.size()); }
  // The parent's rank of subgroup rank i.
  int parent_rank(int i) const { return members_[std::size_t(i)]; }

  request send(int peer, tag_t tag, std::span<const std::byte> bytes, deadline d) {
    return parent_->send(member(peer), tag, bytes, d);
  }
  request recv(int peer, tag_t tag, std::span<std::byte> bytes, deadline d) {
    return parent_->recv(member(peer), tag, bytes, d);
  }
  // Cancels every pending operation of the parent (its other groups' too).
  void cancel_all() { parent_->cancel_all(); }

 private:
  // A peer outside the group maps to an invalid rank: the parent refuses it.
  int member(int peer) const {
    return peer >= 0 && peer < size() ? members_[std::size_t(peer)] : -1;
  }
  T* parent_;
  std::vector<int> members_;
  int rank_ = -1;
};

}  // namespace paco::net
