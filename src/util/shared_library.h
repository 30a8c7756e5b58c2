// Libraries loaded at run time (dlopen) and their symbols resolved into typed function pointers:
// what the cuBLAS, cuBLASLt and cuDNN loaders (kernels/cuda/*_api.cc) share. A library opened here
// is never closed (the vendor libraries keep process-wide state).
#pragma once

#include <dlfcn.h>
#include <fmt/format.h>

#include <string>
#include <string_view>
#include <vector>

namespace spindle {

struct OpenedLibrary {
  void* handle = nullptr;  // null when no name could be opened
  std::string path;        // the name that opened
  std::string failures;    // "name: dlerror; name: dlerror" for the names tried before it
};

// Opens the first of `names` that dlopen (RTLD_NOW | RTLD_LOCAL) finds.
OpenedLibrary open_first_library(const std::vector<std::string>& names);

// The dlerror text of a failed dlsym of `symbol` ("no symbol <symbol>" when dlerror says nothing).
std::string missing_symbol_text(const char* symbol);

// Resolves `symbol` of `handle` into `fn`. On a miss: false, and `error` names the symbol.
template <typename Fn>
bool resolve_symbol(void* handle, const char* symbol, Fn& fn, std::string& error) {
  dlerror();
  void* address = dlsym(handle, symbol);
  if (address == nullptr) {
    error = missing_symbol_text(symbol);
    return false;
  }
  fn = reinterpret_cast<Fn>(address);
  return true;
}

// Where a vendor API comes from, and the words of its errors.
struct ApiLibrary {
  std::vector<std::string> files;  // dlopen names, tried in order
  std::string_view name;           // "cuBLAS": "cuBLAS not found (<failures>); <hint>"
  std::string_view hint;           // what to do when no file opens
  std::string_view stem;           // "libcublas": "libcublas: no symbol cublasGemmEx (...) (<path>)"
};

// A vendor API (a struct of typed function pointers and its `path`), or why it is unusable.
template <typename Api>
struct LoadedApi {
  Api api;
  std::string error;  // empty when api is usable
};

// Opens the first of library.files (api.path: the one that opened) and fills the API with
// resolve(handle, api, error): a chain of resolve_symbol, which may finish the API (read its
// version) once every symbol is there. Never throws; the error says what went wrong.
template <typename Api, typename Resolve>
LoadedApi<Api> load_api(const ApiLibrary& library, Resolve&& resolve) {
  LoadedApi<Api> out;
  const OpenedLibrary lib = open_first_library(library.files);
  if (lib.handle == nullptr) {
    out.error = fmt::format("{} not found ({}); {}", library.name, lib.failures, library.hint);
    return out;
  }
  out.api.path = lib.path;
  resolve(lib.handle, out.api, out.error);
  if (!out.error.empty()) out.error = fmt::format("{}: {} ({})", library.stem, out.error, lib.path);
  return out;  // the handle stays open for the life of the process
}

}  // namespace spindle
