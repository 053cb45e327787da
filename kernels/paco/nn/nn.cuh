#pragma once
// The nn modules' device twins (kernels on a stream, device pointers, the host modules' layouts
// of θ, cache and activations): each tested against its host module in tests/gpu.
// dispatch.cuh plugs them into the composites (cuda_context); lm_cuda.cuh runs a block_lm (and
// nn::gpt) on the device. The GEMM twins need cuBLAS (link CUDA::cublas).
#include "paco/nn/attention.cuh"
#include "paco/nn/cross_entropy.cuh"
#include "paco/nn/dispatch.cuh"
#include "paco/nn/embedding.cuh"
#include "paco/nn/gelu.cuh"
#include "paco/nn/gemm.cuh"
#include "paco/nn/layer_norm.cuh"
#include "paco/nn/linear.cuh"
#include "paco/nn/lm_cuda.cuh"
