#pragma once
// paco/core: backend tags, slices and buffers, tensor views, the arena and its layout, rng, errors,
// PACO_HD, the nearest name to a mistyped one.
#include "paco/core/arena.hpp"
#include "paco/core/backend.hpp"
#include "paco/core/buffer.hpp"
#include "paco/core/error.hpp"
#include "paco/core/hash.hpp"
#include "paco/core/host_device.hpp"
#include "paco/core/param_layout.hpp"
#include "paco/core/rng.hpp"
#include "paco/core/slice.hpp"
#include "paco/core/spelling.hpp"
#include "paco/core/tensor_view.hpp"
#include "paco/core/thread_pool.hpp"
