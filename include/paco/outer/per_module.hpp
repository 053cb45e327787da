#pragma once
// per_module<O>: one outer optimizer per module of a store, of one type with per-module
// hyper-parameters — e.g. a lower outer learning rate for the shared level than for the expert
// levels (path::path_plan::per_level builds one from a list per level). Explicit, so that a
// store built with `{}` still means one default optimizer for every module.

#include <utility>
#include <vector>

namespace paco::outer {

template <class O>
struct per_module {
  explicit per_module(std::vector<O> o) : opts(std::move(o)) {}
  std::vector<O> opts;
};

}  // namespace paco::outer
