#include "kernels/cuda/cublaslt_api.h"

#include <fmt/format.h>

#include <vector>

#include "util/error.h"
#include "util/shared_library.h"

namespace spindle::kernels::cuda {
namespace {

using Loaded = LoadedApi<CublasLtApi>;

Loaded load() {
  const ApiLibrary library{{"libcublasLt.so.13", "libcublasLt.so"}, "cuBLASLt", "put its lib/ folder on LD_LIBRARY_PATH",
                           "libcublasLt"};
  return load_api<CublasLtApi>(library, [](void* handle, CublasLtApi& a, std::string& e) {
    decltype(&cublasLtGetVersion) get_version = nullptr;
    const bool all = resolve_symbol(handle, "cublasLtGetVersion", get_version, e) &&
                     resolve_symbol(handle, "cublasLtCreate", a.Create, e) &&
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
    if (all) a.version = get_version();
  });
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
