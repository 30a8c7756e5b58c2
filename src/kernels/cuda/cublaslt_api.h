// cuBLASLt loaded at run time (issue 47: the FP8 tensor-core products), as cublas_api.h loads
// cuBLAS: "libcublasLt.so.13" (the GPU host's cuBLAS wheel), then "libcublasLt.so", opened with
// dlopen on first use and the few functions Spindle calls resolved with dlsym. The headers give
// types only; the spindle binary does not link it.
#pragma once

#include <cublasLt.h>

#include <cstddef>
#include <string>

namespace spindle::kernels::cuda {

// cuBLASLt's version as cublasLtGetVersion() gives it: major * 10000 + minor * 100 + patch.
// 12.9 is the first with the VEC128_32F / BLK128x128_32F / OUTER_VEC_32F scale modes on Hopper.
inline constexpr size_t kCublasLtMinVersion = 120900;

struct CublasLtApi {
  std::string path;  // what dlopen was given
  size_t version = 0;
  decltype(&cublasLtCreate) Create = nullptr;
  decltype(&cublasLtDestroy) Destroy = nullptr;
  decltype(&cublasLtMatmulDescCreate) MatmulDescCreate = nullptr;
  decltype(&cublasLtMatmulDescDestroy) MatmulDescDestroy = nullptr;
  decltype(&cublasLtMatmulDescSetAttribute) MatmulDescSetAttribute = nullptr;
  decltype(&cublasLtMatrixLayoutCreate) MatrixLayoutCreate = nullptr;
  decltype(&cublasLtMatrixLayoutDestroy) MatrixLayoutDestroy = nullptr;
  decltype(&cublasLtMatmulPreferenceCreate) MatmulPreferenceCreate = nullptr;
  decltype(&cublasLtMatmulPreferenceDestroy) MatmulPreferenceDestroy = nullptr;
  decltype(&cublasLtMatmulPreferenceSetAttribute) MatmulPreferenceSetAttribute = nullptr;
  decltype(&cublasLtMatmulAlgoGetHeuristic) MatmulAlgoGetHeuristic = nullptr;
  decltype(&cublasLtMatmul) Matmul = nullptr;
};

// The loaded library, or null with *why_not saying what was tried and why it failed (a missing
// file or symbol; a version below kCublasLtMinVersion is reported by the callers' reasons, not
// here). Loads once, thread-safe.
const CublasLtApi* try_cublaslt_api(std::string* why_not);
// The same; throws spindle::Error with the reason.
const CublasLtApi& cublaslt_api();

}  // namespace spindle::kernels::cuda
