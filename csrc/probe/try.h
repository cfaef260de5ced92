// The probe's early returns: a step that fails returns its error message from the enclosing
// function (which returns std::string). PX_TRY takes an expression that yields a message (empty:
// success); PX_TRY_CU a CUDA driver call, named in the message, of a class holding the driver API
// as cu_. Included by the .cpp files of a measurement (gemm.cpp, copy_bandwidth.cpp) only.
#pragma once

#include <string>

#include "probe/cuda_api.h"

#define PX_TRY(expr)                     \
  do {                                   \
    std::string error_ = (expr);         \
    if (!error_.empty()) return error_;  \
  } while (0)
#define PX_TRY_CU(call, expr)                                               \
  do {                                                                      \
    const cuda::CUresult rc_ = (expr);                                      \
    if (rc_ != cuda::CUDA_SUCCESS) return cuda::call_error(cu_, call, rc_); \
  } while (0)
