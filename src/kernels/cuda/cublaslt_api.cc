#include "kernels/cuda/cublaslt_api.h"

#include <dlfcn.h>
#include <fmt/format.h>

#include <vector>

#include "util/error.h"

namespace spindle::kernels::cuda {
namespace {

struct Loaded {
  CublasLtApi api;
  std::string error;  // empty when api is usable
};

template <typename Fn>
bool resolve(void* handle, const char* symbol, Fn& fn, std::string& error) {
  fn = reinterpret_cast<Fn>(dlsym(handle, symbol));
  if (fn == nullptr) error = fmt::format("libcublasLt has no symbol {}", symbol);
  return fn != nullptr;
}

Loaded load() {
  Loaded out;
  void* handle = nullptr;
  std::string failures;
  for (const char* name : {"libcublasLt.so.13", "libcublasLt.so"}) {
    handle = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (handle != nullptr) {
      out.api.path = name;
      break;
    }
    const char* why = dlerror();
    failures += fmt::format("{}{}: {}", failures.empty() ? "" : "; ", name, why != nullptr ? why : "not found");
  }
  if (handle == nullptr) {
    out.error = fmt::format("cuBLASLt not found ({}); put its lib/ folder on LD_LIBRARY_PATH", failures);
    return out;
  }
  CublasLtApi& a = out.api;
  std::string& e = out.error;
  decltype(&cublasLtGetVersion) get_version = nullptr;
  resolve(handle, "cublasLtGetVersion", get_version, e) && resolve(handle, "cublasLtCreate", a.Create, e) &&
      resolve(handle, "cublasLtDestroy", a.Destroy, e) &&
      resolve(handle, "cublasLtMatmulDescCreate", a.MatmulDescCreate, e) &&
      resolve(handle, "cublasLtMatmulDescDestroy", a.MatmulDescDestroy, e) &&
      resolve(handle, "cublasLtMatmulDescSetAttribute", a.MatmulDescSetAttribute, e) &&
      resolve(handle, "cublasLtMatrixLayoutCreate", a.MatrixLayoutCreate, e) &&
      resolve(handle, "cublasLtMatrixLayoutDestroy", a.MatrixLayoutDestroy, e) &&
      resolve(handle, "cublasLtMatmulPreferenceCreate", a.MatmulPreferenceCreate, e) &&
      resolve(handle, "cublasLtMatmulPreferenceDestroy", a.MatmulPreferenceDestroy, e) &&
      resolve(handle, "cublasLtMatmulPreferenceSetAttribute", a.MatmulPreferenceSetAttribute, e) &&
      resolve(handle, "cublasLtMatmulAlgoGetHeuristic", a.MatmulAlgoGetHeuristic, e) &&
      resolve(handle, "cublasLtMatmul", a.Matmul, e);
  if (!e.empty()) {
    e = fmt::format("{} ({})", e, a.path);
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
