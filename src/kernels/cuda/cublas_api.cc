#include "kernels/cuda/cublas_api.h"

#include <cstdlib>
#include <vector>

#include "util/error.h"
#include "util/shared_library.h"
#include "util/switches.h"

namespace spindle::kernels::cuda {
namespace {

LoadedApi<CublasApi> load() {
  ApiLibrary library{{"libcublas.so.13", "libcublas.so"}, "cuBLAS",
                     "put its lib/ folder on LD_LIBRARY_PATH or set SPINDLE_CUBLAS_LIBRARY", "libcublas"};
  if (const std::string& file = switches().cublas_library; !file.empty()) library.files = {file};
  return load_api<CublasApi>(library, [](void* handle, CublasApi& a, std::string& e) {
    resolve_symbol(handle, "cublasCreate_v2", a.Create, e) && resolve_symbol(handle, "cublasDestroy_v2", a.Destroy, e) &&
        resolve_symbol(handle, "cublasSetStream_v2", a.SetStream, e) &&
        resolve_symbol(handle, "cublasSetWorkspace_v2", a.SetWorkspace, e) &&
        resolve_symbol(handle, "cublasSetMathMode", a.SetMathMode, e) && resolve_symbol(handle, "cublasGemmEx", a.GemmEx, e) &&
        resolve_symbol(handle, "cublasGetStatusString", a.GetStatusString, e);
  });
}

}  // namespace

const CublasApi& cublas_api() {
  static const LoadedApi<CublasApi> loaded = load();
  SPINDLE_CHECK(loaded.error.empty(), "{}", loaded.error);
  return loaded.api;
}

}  // namespace spindle::kernels::cuda
