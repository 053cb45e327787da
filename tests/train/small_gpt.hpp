#pragma once
// The small GPT several tests of tests/train train (one definition: the folder's sources are
// compiled together as unity units).

#include "paco/nn/gpt.hpp"

namespace paco::train_tests {

inline nn::gpt_config small_gpt() {
  return {.vocab = 64, .ctx = 16, .d = 16, .layers = 2, .heads = 2};
}

}  // namespace paco::train_tests
