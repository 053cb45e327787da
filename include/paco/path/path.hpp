#pragma once
// paco/path: DiPaCo's grid of modules, level maps, the plan that lays a grid over a model, and
// the module store.
#include "paco/path/level_map.hpp"
#include "paco/path/module_grid.hpp"
#include "paco/path/module_store.hpp"
#include "paco/path/path_plan.hpp"
#include "paco/path/store_file.hpp"
