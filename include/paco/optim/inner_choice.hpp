#pragma once
// inner_choice: the inner optimizer a run names ("adamw" | "muon"), one type for both, so that a
// worker, a rank or a bench row takes the choice from its settings:
//
//   auto opt = optim::inner_by_name("muon", model, optim::adamw{.lr = 2e-3f}, {.lr = 0.02f});
//   train::path_worker<nn::gpt, optim::inner_choice> w(rank, model, levels, {0}, *opt, …);
//
// Muon takes the given AdamW for every parameter outside its hidden matrices (optim/muon.hpp).

#include <string>
#include <string_view>

#include "paco/core/error.hpp"
#include "paco/optim/adamw.hpp"
#include "paco/optim/muon.hpp"
#include "paco/optim/one_of.hpp"

namespace paco::optim {

using inner_choice = one_of<adamw, muon>;

// The names inner_by_name accepts, for help texts and errors.
inline constexpr std::string_view inner_names = "adamw | muon";

// `name`'s optimizer for `model`: adamw → a; muon → m over the model's hidden matrices with a
// for the rest. Errors: invalid_argument naming an unknown name or a bad hyper-parameter.
template <class Model>
result<inner_choice> inner_by_name(std::string_view name, const Model& model, const adamw& a,
                                   muon m = {}) {
  inner_choice out;
  if (name == "adamw") {
    out = a;
  } else if (name == "muon") {
    m.aux = a;
    out = muon_for(model, std::move(m));
  } else {
    return error(errc::invalid_argument, "optimizer \"" + std::string(name) + "\" is not one of " +
                                             std::string(inner_names));
  }
  if (auto s = out.validate(); !s) return s.error();
  return out;
}

}  // namespace paco::optim
