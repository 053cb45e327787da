#pragma once
// paco/optim: inner optimizers, schedules and clipping.
#include "paco/optim/adamw.hpp"
#include "paco/optim/clip.hpp"
#include "paco/optim/concepts.hpp"
#include "paco/optim/formulas.hpp"
#include "paco/optim/schedule.hpp"
#include "paco/optim/sgd.hpp"
