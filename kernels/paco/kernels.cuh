#pragma once
// paco CUDA kernel headers: blockwise quantisation, casts, fused outer Nesterov and AdamW steps,
// error-feedback passes and top-k, each with a host twin in include/paco/compress/; arena<cuda>
// and its counted copies. context_cuda.cuh (cuda_context) is included on its own: it needs
// cuBLAS (link CUDA::cublas).
#include "paco/arena_cuda.cuh"
#include "paco/cuda_buffer.cuh"
#include "paco/cuda_check.cuh"
#include "paco/elementwise.cuh"
#include "paco/quantize.cuh"
#include "paco/scratch.cuh"
#include "paco/topk.cuh"
