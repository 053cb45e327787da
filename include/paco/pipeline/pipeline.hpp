#pragma once
// pipeline/: a BlockModel cut into stages (stage_plan), each stage on its own rank over any
// net::Transport (stage_runner): global backprop as GPipe or 1F1B (schedule.hpp), and local losses
// after Laskin et al. (auxiliary heads, aux_head.hpp; forward-only messages; bit-identical to a
// one-process reference, reference.hpp); a stage as an inner loop (stage_loop) and a DiPaCo path
// cut into stages at its levels (path_stages) for local-loss DiPaCo. docs/pipeline.md explains
// the choices.

#include "paco/pipeline/aux_head.hpp"
#include "paco/pipeline/local_learner.hpp"
#include "paco/pipeline/path_stages.hpp"
#include "paco/pipeline/reference.hpp"
#include "paco/pipeline/replicas.hpp"
#include "paco/pipeline/schedule.hpp"
#include "paco/pipeline/stage.hpp"
#include "paco/pipeline/stage_file.hpp"
#include "paco/pipeline/stage_loop.hpp"
#include "paco/pipeline/stage_plan.hpp"
#include "paco/pipeline/stage_runner.hpp"
#include "paco/pipeline/time_model.hpp"
