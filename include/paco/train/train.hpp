#pragma once
// paco/train: the one inner loop, the path worker and its round loop against a shared store,
// the in-process trainer and runner, the round loop over an all-reduce and its sync rules
// (DiLoCo, resumable from per-rank checkpoints; Streaming DiLoCo, CO2, eager updates, the naïve
// delayed rule), dense runs and the shared base model, DiPaCo's held-out documents, routed
// training and a routed comparison's shared setup.
#include "paco/train/base_model.hpp"
#include "paco/train/concepts.hpp"
#include "paco/train/dense_run.hpp"
#include "paco/train/diloco_allreduce.hpp"
#include "paco/train/dipaco_local.hpp"
#include "paco/train/early_stopping.hpp"
#include "paco/train/fragments.hpp"
#include "paco/train/held_out.hpp"
#include "paco/train/inner_loop.hpp"
#include "paco/train/learning_curve.hpp"
#include "paco/train/local_trainer.hpp"
#include "paco/train/mean_in_flight.hpp"
#include "paco/train/paced_learner.hpp"
#include "paco/train/path_buffers.hpp"
#include "paco/train/path_worker.hpp"
#include "paco/train/replica_file.hpp"
#include "paco/train/round_body.hpp"
#include "paco/train/round_loop.hpp"
#include "paco/train/routed_setup.hpp"
#include "paco/train/routed_training.hpp"
#include "paco/train/routing.hpp"
#include "paco/train/stage_worker.hpp"
#include "paco/train/store_exchange.hpp"
#include "paco/train/sync.hpp"
#include "paco/train/worker_file.hpp"
#include "paco/train/worker_loop.hpp"
