#pragma once
// paco's job layer: a DiPaCo / DiLoCo job of any nn::BlockModel as real processes over TCP,
// store and workers, from a program's own main() (job/main.hpp). See job/dipaco_job.hpp.
#include "paco/job/data.hpp"
#include "paco/job/device_worker.hpp"
#include "paco/job/dipaco_job.hpp"
#include "paco/job/export.hpp"
#include "paco/job/launcher.hpp"
#include "paco/job/main.hpp"
#include "paco/job/prepare.hpp"
#include "paco/job/ranks.hpp"
#include "paco/job/results.hpp"
#include "paco/job/run_files.hpp"
#include "paco/job/score.hpp"
#include "paco/job/settings.hpp"
#include "paco/job/stage_role.hpp"
#include "paco/job/stages.hpp"
#include "paco/job/store_role.hpp"
#include "paco/job/worker_role.hpp"
