#pragma once
// paco/optim: inner optimizers, schedules, clipping, and the host twin of the AdamW kernel
// (adamw_update).
#include "paco/optim/adamw.hpp"
#include "paco/optim/adamw_update.hpp"
#include "paco/optim/clip.hpp"
#include "paco/optim/concepts.hpp"
#include "paco/optim/formulas.hpp"
#include "paco/optim/schedule.hpp"
#include "paco/optim/sgd.hpp"
