#pragma once
// paco/outer: outer optimizers (sgd, nesterov, co2, one_of several, per_module) and delta
// transforms.
#include "paco/outer/co2.hpp"
#include "paco/outer/concepts.hpp"
#include "paco/outer/delta.hpp"
#include "paco/outer/formulas.hpp"
#include "paco/outer/nesterov.hpp"
#include "paco/outer/one_of.hpp"
#include "paco/outer/per_module.hpp"
#include "paco/outer/sgd.hpp"
