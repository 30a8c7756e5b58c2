#include "kernels/cuda/cublas_api.h"

#include <dlfcn.h>

#include <cstdlib>
#include <vector>

#include "util/error.h"
#include "util/switches.h"

namespace spindle::kernels::cuda {
namespace {

struct Loaded {
  CublasApi api;
  std::string error;  // empty when api is usable
};

template <typename Fn>
bool resolve(void* handle, const char* symbol, Fn& fn, std::string& error) {
  fn = reinterpret_cast<Fn>(dlsym(handle, symbol));
  if (fn == nullptr) error = fmt::format("{} has no symbol {}", "libcublas", symbol);
  return fn != nullptr;
}

Loaded load() {
  Loaded out;
  std::vector<std::string> candidates;
  if (const std::string& file = switches().cublas_library; !file.empty()) {
    candidates.push_back(file);
  } else {
    candidates = {"libcublas.so.13", "libcublas.so"};
  }
  void* handle = nullptr;
  std::string failures;
  for (const auto& name : candidates) {
    handle = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle != nullptr) {
      out.api.path = name;
      break;
    }
    const char* why = dlerror();
    failures += fmt::format("{}{}: {}", failures.empty() ? "" : "; ", name, why != nullptr ? why : "not found");
  }
  if (handle == nullptr) {
    out.error = fmt::format("cuBLAS not found ({}); put its lib/ folder on LD_LIBRARY_PATH or set "
                            "SPINDLE_CUBLAS_LIBRARY",
                            failures);
    return out;
  }
  CublasApi& a = out.api;
  std::string& e = out.error;
  resolve(handle, "cublasCreate_v2", a.Create, e) && resolve(handle, "cublasDestroy_v2", a.Destroy, e) &&
      resolve(handle, "cublasSetStream_v2", a.SetStream, e) &&
      resolve(handle, "cublasSetWorkspace_v2", a.SetWorkspace, e) &&
      resolve(handle, "cublasSetMathMode", a.SetMathMode, e) && resolve(handle, "cublasGemmEx", a.GemmEx, e) &&
      resolve(handle, "cublasGetStatusString", a.GetStatusString, e);
  if (!e.empty()) e = fmt::format("{} ({})", e, a.path);
  return out;  // the handle stays open for the life of the process
}

}  // namespace

const CublasApi& cublas_api() {
  static const Loaded loaded = load();
  SPINDLE_CHECK(loaded.error.empty(), "{}", loaded.error);
  return loaded.api;
}

}  // namespace spindle::kernels::cuda
