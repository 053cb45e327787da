#pragma once
// paco/optim: inner optimizers (AdamW, SGD, Muon, one_of), schedules, clipping, and the host twin
// of the AdamW kernel (adamw_update).
#include "paco/optim/adamw.hpp"
#include "paco/optim/adamw_update.hpp"
#include "paco/optim/clip.hpp"
#include "paco/optim/concepts.hpp"
#include "paco/optim/formulas.hpp"
#include "paco/optim/inner_choice.hpp"
#include "paco/optim/muon.hpp"
#include "paco/optim/one_of.hpp"
#include "paco/optim/schedule.hpp"
#include "paco/optim/sgd.hpp"
