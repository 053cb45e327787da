#pragma once
// PACO_HD marks a function callable from host code and from CUDA device code, so one element-wise
// formula serves both the host loop and the kernel in kernels/paco/*.cuh. Plain C++ elsewhere.

#if defined(__CUDACC__)
#define PACO_HD __host__ __device__
#else
#define PACO_HD
#endif
