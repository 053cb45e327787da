#pragma once
// The nn modules' device twins (kernels on a stream, device pointers, the host modules' layouts
// of θ, cache and activations): each tested against its host module in tests/gpu.
#include "paco/nn/cross_entropy.cuh"
#include "paco/nn/embedding.cuh"
#include "paco/nn/gelu.cuh"
#include "paco/nn/layer_norm.cuh"
