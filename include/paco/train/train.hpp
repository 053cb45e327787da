#pragma once
// paco/train: the one inner loop, the in-process trainer, DiPaCo's routed training and the
// round loop of a path worker against a shared store.
#include "paco/train/concepts.hpp"
#include "paco/train/diloco_replica.hpp"
#include "paco/train/inner_loop.hpp"
#include "paco/train/local_trainer.hpp"
#include "paco/train/routing.hpp"
#include "paco/train/worker_file.hpp"
#include "paco/train/worker_loop.hpp"
