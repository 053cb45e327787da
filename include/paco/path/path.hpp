#pragma once
// paco/path: DiPaCo's grid of modules, level maps, and the plan that lays a grid over a model.
// The store that holds the modules is paco/store.
#include "paco/path/level_map.hpp"
#include "paco/path/module_grid.hpp"
#include "paco/path/path_plan.hpp"
