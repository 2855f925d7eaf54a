// CUDA error checks that raise through TORCH_CHECK (never exit()).
#pragma once

#include <cuda_runtime.h>
#include <c10/util/Exception.h>

#define SNAPMLA_CUDA_CHECK(expr)                                                                   \
  do {                                                                                             \
    cudaError_t err_ = (expr);                                                                     \
    TORCH_CHECK(err_ == cudaSuccess, "CUDA error ", cudaGetErrorString(err_), " at ", __FILE__, ":", \
                __LINE__, " in ", #expr);                                                          \
  } while (0)

// After a kernel launch: a launch-configuration error becomes a Python exception.
#define SNAPMLA_CHECK_LAUNCH() SNAPMLA_CUDA_CHECK(cudaGetLastError())
