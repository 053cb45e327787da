#pragma once
// paco/sync: collectives over any net::Transport (trainers join this folder later).
#include "paco/sync/collectives.hpp"
