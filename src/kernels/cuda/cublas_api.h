// cuBLAS loaded at run time: libcublas is opened with dlopen on first use (CudaOps' first
// CublasLinear) and the few functions Spindle calls are resolved with dlsym. So the spindle binary
// neither maps cuBLAS (~600 MB with cuBLASLt) in processes that never run a GPU model -- the CPU
// server, the validation children -- nor needs it to start. The headers give types only.
//
// Library search: $SPINDLE_CUBLAS_LIBRARY when set (nothing else is tried), otherwise
// "libcublas.so.13" then "libcublas.so" (the dynamic loader's usual search: LD_LIBRARY_PATH, ...).
#pragma once

#include <cublas_v2.h>

#include <string>

namespace spindle::kernels::cuda {

struct CublasApi {
  std::string path;  // what dlopen was given
  decltype(&cublasCreate) Create = nullptr;             // cublasCreate_v2
  decltype(&cublasDestroy) Destroy = nullptr;           // cublasDestroy_v2
  decltype(&cublasSetStream) SetStream = nullptr;       // cublasSetStream_v2
  decltype(&cublasSetWorkspace) SetWorkspace = nullptr; // cublasSetWorkspace_v2
  decltype(&cublasSetMathMode) SetMathMode = nullptr;
  // C++ sees cublasGemmEx overloaded (a legacy cudaDataType compute type too): the C symbol's type.
  using GemmExFn = cublasStatus_t (*)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int,
                                      const void*, const void*, cudaDataType, int, const void*, cudaDataType, int,
                                      const void*, void*, cudaDataType, int, cublasComputeType_t, cublasGemmAlgo_t);
  GemmExFn GemmEx = nullptr;
  decltype(&cublasGetStatusString) GetStatusString = nullptr;
};

// The loaded library; throws spindle::Error saying what was tried and why it failed. Loads once,
// thread-safe.
const CublasApi& cublas_api();

}  // namespace spindle::kernels::cuda
