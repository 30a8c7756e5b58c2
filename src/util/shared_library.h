// Libraries loaded at run time (dlopen) and their symbols resolved into typed function pointers:
// what the cuBLAS, cuBLASLt and cuDNN loaders (kernels/cuda/*_api.cc) share. A library opened here
// is never closed (the vendor libraries keep process-wide state).
#pragma once

#include <dlfcn.h>

#include <string>
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

}  // namespace spindle
