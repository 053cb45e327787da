#pragma once
// paco CUDA kernel headers: blockwise quantisation, casts, fused outer Nesterov and AdamW steps,
// error-feedback passes and top-k, each with a host twin in include/paco/compress/.
#include "paco/cuda_buffer.cuh"
#include "paco/cuda_check.cuh"
#include "paco/elementwise.cuh"
#include "paco/quantize.cuh"
#include "paco/scratch.cuh"
#include "paco/topk.cuh"
