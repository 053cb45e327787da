#pragma once
// paco/outer: outer optimizers (sgd, nesterov, co2, one_of several, per_module), delta
// transforms, and the host twin of the outer Nesterov kernel (nesterov_update).
#include "paco/outer/co2.hpp"
#include "paco/outer/concepts.hpp"
#include "paco/outer/delta.hpp"
#include "paco/outer/formulas.hpp"
#include "paco/outer/nesterov.hpp"
#include "paco/outer/nesterov_update.hpp"
#include "paco/outer/one_of.hpp"
#include "paco/outer/per_module.hpp"
#include "paco/outer/sgd.hpp"
