#pragma once
// The subset of cuBLASLt that the GEMM ceilings call, declared here so the native core builds
// without cublasLt.h. Types, enum values and symbol names are those of cublasLt.h,
// cublas_api.h (cuBLAS 13.1, wheel nvidia-cublas 13.10) and library_types.h (CUDA 13.0).
#include <cstddef>
#include <cstdint>
#include <string>

#include "probe/api_library.h"
#include "probe/cuda_api.h"

namespace parallax::cublaslt {

using cublasStatus_t = int;
struct cublasLtContext;
using cublasLtHandle_t = cublasLtContext*;
struct cublasLtMatmulDescOpaque_t {
  uint64_t data[32];
};
struct cublasLtMatrixLayoutOpaque_t {
  uint64_t data[14];
};
struct cublasLtMatmulPreferenceOpaque_t {
  uint64_t data[12];
};
using cublasLtMatmulDesc_t = cublasLtMatmulDescOpaque_t*;
using cublasLtMatrixLayout_t = cublasLtMatrixLayoutOpaque_t*;
using cublasLtMatmulPreference_t = cublasLtMatmulPreferenceOpaque_t*;
struct cublasLtMatmulAlgo_t {
  uint64_t data[8];
};
struct cublasLtMatmulHeuristicResult_t {
  cublasLtMatmulAlgo_t algo;
  size_t workspaceSize;
  cublasStatus_t state;
  float wavesCount;
  int reserved[4];
};

// cublasStatus_t
constexpr cublasStatus_t CUBLAS_STATUS_SUCCESS = 0;
constexpr cublasStatus_t CUBLAS_STATUS_NOT_SUPPORTED = 15;

// cudaDataType_t (library_types.h)
constexpr int CUDA_R_32F = 0;
constexpr int CUDA_R_16BF = 14;
constexpr int CUDA_R_8F_E4M3 = 28;
constexpr int CUDA_R_8F_UE4M3 = 28;  // same value: the unsigned reading of E4M3
constexpr int CUDA_R_4F_E2M1 = 33;

// cublasComputeType_t, cublasOperation_t
constexpr int CUBLAS_COMPUTE_32F = 68;
constexpr int32_t CUBLAS_OP_N = 0;
constexpr int32_t CUBLAS_OP_T = 1;

// cublasLtMatmulDescAttributes_t
constexpr int CUBLASLT_MATMUL_DESC_TRANSA = 3;
constexpr int CUBLASLT_MATMUL_DESC_TRANSB = 4;
constexpr int CUBLASLT_MATMUL_DESC_A_SCALE_POINTER = 17;
constexpr int CUBLASLT_MATMUL_DESC_B_SCALE_POINTER = 18;
constexpr int CUBLASLT_MATMUL_DESC_A_SCALE_MODE = 31;
constexpr int CUBLASLT_MATMUL_DESC_B_SCALE_MODE = 32;

// cublasLtMatmulMatrixScale_t
constexpr int32_t CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F = 0;
constexpr int32_t CUBLASLT_MATMUL_MATRIX_SCALE_VEC16_UE4M3 = 1;

// cublasLtMatmulPreferenceAttributes_t
constexpr int CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES = 1;

struct Api {
  size_t (*cublasLtGetVersion)();
  const char* (*cublasLtGetStatusName)(cublasStatus_t);
  const char* (*cublasLtGetStatusString)(cublasStatus_t);
  cublasStatus_t (*cublasLtCreate)(cublasLtHandle_t*);
  cublasStatus_t (*cublasLtDestroy)(cublasLtHandle_t);
  cublasStatus_t (*cublasLtMatmulDescCreate)(cublasLtMatmulDesc_t*, int compute_type, int scale_type);
  cublasStatus_t (*cublasLtMatmulDescDestroy)(cublasLtMatmulDesc_t);
  cublasStatus_t (*cublasLtMatmulDescSetAttribute)(cublasLtMatmulDesc_t, int attr, const void*, size_t);
  cublasStatus_t (*cublasLtMatrixLayoutCreate)(cublasLtMatrixLayout_t*, int type, uint64_t rows, uint64_t cols,
                                               int64_t ld);
  cublasStatus_t (*cublasLtMatrixLayoutDestroy)(cublasLtMatrixLayout_t);
  cublasStatus_t (*cublasLtMatmulPreferenceCreate)(cublasLtMatmulPreference_t*);
  cublasStatus_t (*cublasLtMatmulPreferenceDestroy)(cublasLtMatmulPreference_t);
  cublasStatus_t (*cublasLtMatmulPreferenceSetAttribute)(cublasLtMatmulPreference_t, int attr, const void*, size_t);
  cublasStatus_t (*cublasLtMatmulAlgoGetHeuristic)(cublasLtHandle_t, cublasLtMatmulDesc_t, cublasLtMatrixLayout_t,
                                                   cublasLtMatrixLayout_t, cublasLtMatrixLayout_t,
                                                   cublasLtMatrixLayout_t, cublasLtMatmulPreference_t, int requested,
                                                   cublasLtMatmulHeuristicResult_t* results, int* returned);
  cublasStatus_t (*cublasLtMatmul)(cublasLtHandle_t, cublasLtMatmulDesc_t, const void* alpha, const void* a,
                                   cublasLtMatrixLayout_t, const void* b, cublasLtMatrixLayout_t, const void* beta,
                                   const void* c, cublasLtMatrixLayout_t, void* d, cublasLtMatrixLayout_t,
                                   const cublasLtMatmulAlgo_t*, void* workspace, size_t workspace_bytes,
                                   cuda::CUstream stream);
};

void bind_api(SymbolBinder& binder, Api& api);

// libcublasLt.so.13, else libcublasLt.so.12, opened once per process.
LoadedApi<Api> library();

// "<call> failed: CUBLAS_STATUS_NOT_SUPPORTED (the functionality requested is not supported)".
std::string call_error(const Api& api, const char* call, cublasStatus_t rc);

}  // namespace parallax::cublaslt
