#include "kernels/cuda/cublas_linear.h"

#include <cublas_v2.h>
#include <fmt/format.h>

#include <algorithm>
#include <climits>
#include <cstdlib>

#include "kernels/cuda/cublas_api.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/gemv16.h"
#include "kernels/cuda/model_ops.h"
#include "util/error.h"

namespace spindle::kernels::cuda {
namespace {

#define CUBLAS_CHECK(expr)                                                                                   \
  do {                                                                                                       \
    const cublasStatus_t spindle_cublas_status_ = (expr);                                                    \
    SPINDLE_CHECK(spindle_cublas_status_ == CUBLAS_STATUS_SUCCESS, "cuBLAS error: {} ({})",                 \
                  cublas_api().GetStatusString(spindle_cublas_status_), #expr);                                    \
  } while (0)

cudaDataType_t cuda_type(DType dtype) {
  switch (dtype) {
    case DType::kF32: return CUDA_R_32F;
    case DType::kBF16: return CUDA_R_16BF;
    case DType::kF16: return CUDA_R_16F;
    default: break;
  }
  SPINDLE_FAIL("cuBLAS linear: weights of dtype {} are not supported (F32, BF16, F16)", dtype_name(dtype));
}

WeightType weight_type(DType dtype) { return dtype == DType::kBF16 ? WeightType::kBF16 : WeightType::kF16; }

void check_int(int64_t v, const char* what) {
  SPINDLE_CHECK(v >= 0 && v <= INT_MAX, "cuBLAS linear: {} = {} does not fit cuBLAS's int", what, v);
}

}  // namespace

CublasLinear::CublasLinear(cudaStream_t stream, bool allow_16bit_activations, bool small_batch_kernel)
    : stream_(stream), round_(allow_16bit_activations) {
  gemv16_ = round_ && small_batch_kernel;
  const CublasApi& cublas = cublas_api();  // throws when cuBLAS cannot be loaded
  cublasHandle_t handle = nullptr;
  CUBLAS_CHECK(cublas.Create(&handle));
  handle_ = handle;
  try {
    // Setting the stream resets the workspace to cuBLAS's default pool: stream first.
    CUBLAS_CHECK(cublas.SetStream(handle, stream_));
    workspace_.reserve(kCublasWorkspaceBytes);
    CUBLAS_CHECK(cublas.SetWorkspace(handle, workspace_.data(), workspace_.size()));
    // Default math: f32 products stay f32 (TF32 only with CUBLAS_TF32_TENSOR_OP_MATH).
    CUBLAS_CHECK(cublas.SetMathMode(handle, CUBLAS_DEFAULT_MATH));
  } catch (...) {
    cublas.Destroy(handle);
    throw;
  }
}

CublasLinear::~CublasLinear() {
  if (handle_ != nullptr) cublas_api().Destroy(handle_);  // no throw from a destructor (loaded: handle_ exists)
}

void CublasLinear::reserve(int64_t max_rows, int64_t max_in, int64_t max_out) {
  SPINDLE_CHECK(max_rows >= 0 && max_in >= 0 && max_out >= 0, "cuBLAS linear: negative scratch size");
  converted_.reserve(static_cast<size_t>(2 * max_rows * max_in) * sizeof(uint16_t));
  if (!round_) {
    const int64_t fused_rows = std::min(max_rows, kFusedSplitMaxRows);
    product_.reserve(static_cast<size_t>(2 * fused_rows * max_out) * sizeof(float));
  }
}

CublasLinear::Input CublasLinear::prepare(const float* x, int64_t rows, int64_t cols, DType dtype) {
  Input in;
  in.x = x;
  in.dtype = dtype;
  in.rows = rows;
  in.cols = cols;
  if (dtype == DType::kF32) return in;
  cuda_type(dtype);  // throws for other dtypes
  in.split = !round_;
  const size_t bytes = static_cast<size_t>((in.split ? 2 : 1) * rows * cols) * sizeof(uint16_t);
  SPINDLE_CHECK(bytes <= converted_.size(), "cuBLAS linear: {} x {} activations need {} bytes of scratch, {} reserved",
                rows, cols, bytes, converted_.size());
  if (in.split) {
    launch_split_to_16bit(x, rows, cols, weight_type(dtype), converted_.data(), stream_);
  } else {
    launch_f32_to_16bit(x, rows * cols, weight_type(dtype), converted_.data(), stream_);
  }
  in.converted = converted_.data();
  return in;
}

void* CublasLinear::input16_target(int64_t rows, int64_t cols, int slot) const {
  if (!round_ || rows <= 0 || cols <= 0 || slot < 0 || slot > 1) return nullptr;
  // Slot 1 starts halfway (reserve() made room for 2 * max_rows * max_in values), 256-byte aligned.
  const size_t slot1 = converted_.size() / 2 / 256 * 256;
  const size_t offset = slot == 0 ? 0 : slot1;
  const size_t limit = slot == 0 ? (slot1 > 0 ? slot1 : converted_.size()) : converted_.size() - slot1;
  if (static_cast<size_t>(rows * cols) * sizeof(uint16_t) > limit) return nullptr;
  return static_cast<unsigned char*>(converted_.data()) + offset;
}

CublasLinear::Input CublasLinear::adopt(const float* x, int64_t rows, int64_t cols, DType dtype,
                                        const void* target) const {
  SPINDLE_CHECK(dtype == DType::kBF16 || dtype == DType::kF16, "cuBLAS linear: adopt() is for 16-bit weights, not {}",
                dtype_name(dtype));
  SPINDLE_CHECK(
      target != nullptr && (target == input16_target(rows, cols, 0) || target == input16_target(rows, cols, 1)),
      "cuBLAS linear: adopt() of {} x {} activations without a 16-bit target for them", rows, cols);
  Input in;
  in.x = x;
  in.dtype = dtype;
  in.rows = rows;
  in.cols = cols;
  in.converted = target;
  return in;
}

void CublasLinear::gemm(const DeviceWeight& w, const void* b, int64_t n, float* c, float beta) {
  // Column-major view: W^T is [in, out] with ld in, so C (col-major [out, n], ld out) =
  // op(A) . B with A = W, op = T; B = x^T ([in, n] col-major, ld in).
  check_int(w.out_features, "out_features");
  check_int(w.in_features, "in_features");
  check_int(n, "rows");
  const float alpha = 1.0f;
  const cudaDataType_t type = cuda_type(w.dtype);
  CUBLAS_CHECK(cublas_api().GemmEx(handle_, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(w.out_features), static_cast<int>(n),
                            static_cast<int>(w.in_features), &alpha, w.data, type, static_cast<int>(w.in_features), b,
                            type, static_cast<int>(w.in_features), &beta, c, CUDA_R_32F,
                            static_cast<int>(w.out_features), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

void CublasLinear::forward(const DeviceWeight& w, const Input& x, float* y, const float* bias) {
  SPINDLE_CHECK(x.dtype == w.dtype && x.cols == w.in_features,
                "cuBLAS linear: input prepared for {} x {} ({}) used with a [{}, {}] {} weight", x.rows, x.cols,
                dtype_name(x.dtype), w.out_features, w.in_features, dtype_name(w.dtype));
  SPINDLE_CHECK(w.data != nullptr && w.out_features > 0 && w.in_features > 0, "cuBLAS linear: empty weight");
  if (x.rows == 0) return;
  const int64_t out = w.out_features;
  if (w.dtype == DType::kF32) {
    gemm(w, x.x, x.rows, y, 0.0f);
  } else if (!x.split) {
    if (use_gemv16(w, x)) {  // the bias added in the same launch
      launch_gemv16(w.data, x.converted, x.rows, w.in_features, out, w.dtype == DType::kBF16, bias, y, stream_);
      return;
    }
    gemm(w, x.converted, x.rows, y, 0.0f);
  } else if (x.rows <= kFusedSplitMaxRows) {
    // One product over [hi; lo] (the weight is read once), then y = hi part + lo part (+ bias).
    const size_t bytes = static_cast<size_t>(2 * x.rows * out) * sizeof(float);
    SPINDLE_CHECK(bytes <= product_.size(), "cuBLAS linear: a {} x {} product needs {} bytes of scratch, {} reserved",
                  x.rows, out, bytes, product_.size());
    gemm(w, x.converted, 2 * x.rows, product_.as<float>(), 0.0f);
    launch_sum_halves(product_.as<float>(), bias, x.rows, out, y, stream_);
    return;
  } else {
    const auto* lo = static_cast<const uint16_t*>(x.converted) + x.rows * x.cols;
    gemm(w, x.converted, x.rows, y, 0.0f);
    gemm(w, lo, x.rows, y, 1.0f);
  }
  if (bias != nullptr) launch_add_bias(y, bias, x.rows, out, stream_);
}

void CublasLinear::accumulate(const DeviceWeight& w, const Input& x, float* y) {
  SPINDLE_CHECK(x.dtype == w.dtype && x.cols == w.in_features && w.dtype != DType::kF32,
                "cuBLAS linear: accumulate() of {} x {} ({}) activations with a [{}, {}] {} weight (16-bit only)",
                x.rows, x.cols, dtype_name(x.dtype), w.out_features, w.in_features, dtype_name(w.dtype));
  SPINDLE_CHECK(w.data != nullptr && w.out_features > 0 && w.in_features > 0, "cuBLAS linear: empty weight");
  if (x.rows == 0) return;
  gemm(w, x.converted, x.rows, y, 1.0f);
  if (x.split) gemm(w, static_cast<const uint16_t*>(x.converted) + x.rows * x.cols, x.rows, y, 1.0f);
}

void CublasLinear::forward(const DeviceWeight& w, const float* x, int64_t rows, float* y, const float* bias) {
  forward(w, prepare(x, rows, w.in_features, w.dtype), y, bias);
}

bool CublasLinear::forward_swiglu(const DeviceWeight& gate_up, const Input& x, float* act, Out16 act16) {
  if (x.split || gate_up.dtype == DType::kF32 || x.dtype != gate_up.dtype || x.cols != gate_up.in_features ||
      gate_up.out_features % 2 != 0 || x.rows > gemv16_fused_use_max_rows() || !use_gemv16(gate_up, x) ||
      !gemv16_swiglu_supports(x.rows, x.cols, gate_up.data, x.converted)) {
    return false;
  }
  if (act16.out != nullptr) {  // written while x.converted is read: the two must not overlap
    const auto* a = static_cast<const unsigned char*>(act16.out);
    const auto* b = static_cast<const unsigned char*>(x.converted);
    const size_t a_bytes = static_cast<size_t>(x.rows * (gate_up.out_features / 2)) * sizeof(uint16_t);
    const size_t b_bytes = static_cast<size_t>(x.rows * x.cols) * sizeof(uint16_t);
    SPINDLE_CHECK(a + a_bytes <= b || b + b_bytes <= a,
                  "cuBLAS linear: forward_swiglu's 16-bit output overlaps its input");
  }
  launch_gemv16_swiglu(gate_up.data, x.converted, x.rows, x.cols, gate_up.out_features / 2,
                       gate_up.dtype == DType::kBF16, act, act16.out, act16.bf16, stream_);
  return true;
}

bool CublasLinear::gemv16_takes(const DeviceWeight& w, int64_t rows) const {
  return gemv16_ && w.dtype != DType::kF32 && rows >= 1 && rows <= kGemv16UseMaxRows &&
         w.out_features * w.in_features <= kGemv16MaxWeightElements;
}

bool CublasLinear::use_gemv16(const DeviceWeight& w, const Input& x) const {
  return gemv16_takes(w, x.rows) && gemv16_supports(x.rows, w.in_features, w.data, x.converted);
}

const char* CublasLinear::name() const {
  if (!round_) return "cublas_split";
  return gemv16_ ? "cublas_round16+gemv16" : "cublas_round16";
}

uint64_t CublasLinear::workspace_bytes() const { return workspace_.size() + converted_.size() + product_.size(); }

}  // namespace spindle::kernels::cuda
