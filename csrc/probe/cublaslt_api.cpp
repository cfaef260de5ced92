#include "probe/cublaslt_api.h"

namespace parallax::cublaslt {

void bind_api(SymbolBinder& b, Api& a) {
  b.bind(a.cublasLtGetVersion, {"cublasLtGetVersion"});
  b.bind(a.cublasLtGetStatusName, {"cublasLtGetStatusName"});
  b.bind(a.cublasLtGetStatusString, {"cublasLtGetStatusString"});
  b.bind(a.cublasLtCreate, {"cublasLtCreate"});
  b.bind(a.cublasLtDestroy, {"cublasLtDestroy"});
  b.bind(a.cublasLtMatmulDescCreate, {"cublasLtMatmulDescCreate"});
  b.bind(a.cublasLtMatmulDescDestroy, {"cublasLtMatmulDescDestroy"});
  b.bind(a.cublasLtMatmulDescSetAttribute, {"cublasLtMatmulDescSetAttribute"});
  b.bind(a.cublasLtMatrixLayoutCreate, {"cublasLtMatrixLayoutCreate"});
  b.bind(a.cublasLtMatrixLayoutDestroy, {"cublasLtMatrixLayoutDestroy"});
  b.bind(a.cublasLtMatmulPreferenceCreate, {"cublasLtMatmulPreferenceCreate"});
  b.bind(a.cublasLtMatmulPreferenceDestroy, {"cublasLtMatmulPreferenceDestroy"});
  b.bind(a.cublasLtMatmulPreferenceSetAttribute, {"cublasLtMatmulPreferenceSetAttribute"});
  b.bind(a.cublasLtMatmulAlgoGetHeuristic, {"cublasLtMatmulAlgoGetHeuristic"});
  b.bind(a.cublasLtMatmul, {"cublasLtMatmul"});
}

LoadedApi<Api> library() {
  static ApiLibrary<Api> lib({"libcublasLt.so.13", "libcublasLt.so.12"}, bind_api);
  return lib.get();
}

std::string call_error(const Api& api, const char* call, cublasStatus_t rc) {
  const char* name = api.cublasLtGetStatusName(rc);
  const char* text = api.cublasLtGetStatusString(rc);
  std::string out = std::string(call) + " failed: " + (name != nullptr ? name : "cublasStatus_t " + std::to_string(rc));
  if (text != nullptr) out += std::string(" (") + text + ")";
  return out;
}

}  // namespace parallax::cublaslt
