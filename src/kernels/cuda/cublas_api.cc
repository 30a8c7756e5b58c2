#include "kernels/cuda/cublas_api.h"

#include <cstdlib>
#include <vector>

#include "util/error.h"
#include "util/shared_library.h"
#include "util/switches.h"

namespace spindle::kernels::cuda {
namespace {

struct Loaded {
  CublasApi api;
  std::string error;  // empty when api is usable
};

Loaded load() {
  Loaded out;
  std::vector<std::string> candidates;
  if (const std::string& file = switches().cublas_library; !file.empty()) {
    candidates.push_back(file);
  } else {
    candidates = {"libcublas.so.13", "libcublas.so"};
  }
  const OpenedLibrary lib = open_first_library(candidates);
  void* handle = lib.handle;
  if (handle == nullptr) {
    out.error = fmt::format("cuBLAS not found ({}); put its lib/ folder on LD_LIBRARY_PATH or set "
                            "SPINDLE_CUBLAS_LIBRARY",
                            lib.failures);
    return out;
  }
  out.api.path = lib.path;
  CublasApi& a = out.api;
  std::string& e = out.error;
  resolve_symbol(handle, "cublasCreate_v2", a.Create, e) && resolve_symbol(handle, "cublasDestroy_v2", a.Destroy, e) &&
      resolve_symbol(handle, "cublasSetStream_v2", a.SetStream, e) &&
      resolve_symbol(handle, "cublasSetWorkspace_v2", a.SetWorkspace, e) &&
      resolve_symbol(handle, "cublasSetMathMode", a.SetMathMode, e) && resolve_symbol(handle, "cublasGemmEx", a.GemmEx, e) &&
      resolve_symbol(handle, "cublasGetStatusString", a.GetStatusString, e);
  if (!e.empty()) e = fmt::format("libcublas: {} ({})", e, a.path);
  return out;  // the handle stays open for the life of the process
}

}  // namespace

const CublasApi& cublas_api() {
  static const Loaded loaded = load();
  SPINDLE_CHECK(loaded.error.empty(), "{}", loaded.error);
  return loaded.api;
}

}  // namespace spindle::kernels::cuda
