#include "kernels/cuda/cublaslt_api.h"

#include <fmt/format.h>

#include <vector>

#include "util/error.h"
#include "util/shared_library.h"

namespace spindle::kernels::cuda {
namespace {

struct Loaded {
  CublasLtApi api;
  std::string error;  // empty when api is usable
};

Loaded load() {
  Loaded out;
  const OpenedLibrary lib = open_first_library({"libcublasLt.so.13", "libcublasLt.so"});
  void* handle = lib.handle;
  if (handle == nullptr) {
    out.error = fmt::format("cuBLASLt not found ({}); put its lib/ folder on LD_LIBRARY_PATH", lib.failures);
    return out;
  }
  out.api.path = lib.path;
  CublasLtApi& a = out.api;
  std::string& e = out.error;
  decltype(&cublasLtGetVersion) get_version = nullptr;
  resolve_symbol(handle, "cublasLtGetVersion", get_version, e) && resolve_symbol(handle, "cublasLtCreate", a.Create, e) &&
      resolve_symbol(handle, "cublasLtDestroy", a.Destroy, e) &&
      resolve_symbol(handle, "cublasLtMatmulDescCreate", a.MatmulDescCreate, e) &&
      resolve_symbol(handle, "cublasLtMatmulDescDestroy", a.MatmulDescDestroy, e) &&
      resolve_symbol(handle, "cublasLtMatmulDescSetAttribute", a.MatmulDescSetAttribute, e) &&
      resolve_symbol(handle, "cublasLtMatrixLayoutCreate", a.MatrixLayoutCreate, e) &&
      resolve_symbol(handle, "cublasLtMatrixLayoutDestroy", a.MatrixLayoutDestroy, e) &&
      resolve_symbol(handle, "cublasLtMatmulPreferenceCreate", a.MatmulPreferenceCreate, e) &&
      resolve_symbol(handle, "cublasLtMatmulPreferenceDestroy", a.MatmulPreferenceDestroy, e) &&
      resolve_symbol(handle, "cublasLtMatmulPreferenceSetAttribute", a.MatmulPreferenceSetAttribute, e) &&
      resolve_symbol(handle, "cublasLtMatmulAlgoGetHeuristic", a.MatmulAlgoGetHeuristic, e) &&
      resolve_symbol(handle, "cublasLtMatmul", a.Matmul, e);
  if (!e.empty()) {
    e = fmt::format("libcublasLt: {} ({})", e, a.path);
    return out;
  }
  a.version = get_version();
  return out;  // the handle stays open for the life of the process
}

const Loaded& loaded() {
  static const Loaded l = load();
  return l;
}

}  // namespace

const CublasLtApi* try_cublaslt_api(std::string* why_not) {
  const Loaded& l = loaded();
  if (!l.error.empty()) {
    if (why_not != nullptr) *why_not = l.error;
    return nullptr;
  }
  return &l.api;
}

const CublasLtApi& cublaslt_api() {
  std::string why;
  const CublasLtApi* api = try_cublaslt_api(&why);
  SPINDLE_CHECK(api != nullptr, "{}", why);
  return *api;
}

}  // namespace spindle::kernels::cuda
