#include "kernels/cuda/fp8_lt_linear.h"

#include <cublasLt.h>
#include <fmt/format.h>

#include <algorithm>
#include <climits>
#include <cstdint>

#include "kernels/cuda/cublas_linear.h"
#include "kernels/cuda/cublaslt_api.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/model_ops.h"
#include "util/error.h"

namespace spindle::kernels::cuda {
namespace {

#define CUBLASLT_CHECK(expr)                                                                              \
  do {                                                                                                    \
    const cublasStatus_t spindle_lt_status_ = (expr);                                                     \
    SPINDLE_CHECK(spindle_lt_status_ == CUBLAS_STATUS_SUCCESS, "cuBLASLt error {} ({})",                 \
                  static_cast<int>(spindle_lt_status_), #expr);                                           \
  } while (0)

const char* mode_name(Fp8Scale mode) {
  switch (mode) {
    case Fp8Scale::kPerTensor: return "per-tensor";
    case Fp8Scale::kPerChannel: return "per-channel";
    case Fp8Scale::kBlock128: return "128x128-block";
  }
  return "?";
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

}  // namespace

struct Fp8LtLinear::Plan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulAlgo_t algo{};
  bool bf16_out = false;  // D (and C) bf16: no f32-output algorithm
  ~Plan() {
    const CublasLtApi& lt = cublaslt_api();
    if (d != nullptr) lt.MatrixLayoutDestroy(d);
    if (b != nullptr) lt.MatrixLayoutDestroy(b);
    if (a != nullptr) lt.MatrixLayoutDestroy(a);
    if (desc != nullptr) lt.MatmulDescDestroy(desc);
  }
};

std::vector<std::string> fp8_lt_unsupported_reasons(int cc_major, int cc_minor, Fp8Scale mode, int64_t out,
                                                    int64_t in) {
  std::vector<std::string> reasons;
  if (cc_major != 9 || cc_minor != 0) {
    reasons.push_back(fmt::format("compute capability {}.{}: the FP8 products with these scale modes are cuBLASLt's "
                                  "Hopper (SM 9.0) kernels",
                                  cc_major, cc_minor));
  }
  std::string why;
  if (const CublasLtApi* lt = try_cublaslt_api(&why); lt == nullptr) {
    reasons.push_back(why);
  } else if (lt->version < kCublasLtMinVersion) {
    reasons.push_back(fmt::format("cuBLASLt {} ({}) is older than 12.9, the first with per-channel and block FP8 scales",
                                  lt->version, lt->path));
  }
  if (out <= 0 || in <= 0 || out > INT_MAX || in > INT_MAX) {
    reasons.push_back(fmt::format("weight [{}, {}] outside cuBLASLt's int sizes", out, in));
  }
  if (in % 16 != 0 || out % 16 != 0) {
    reasons.push_back(fmt::format("weight [{}, {}]: FP8 products need out and in multiples of 16", out, in));
  }
  if (mode == Fp8Scale::kBlock128) {
    const int64_t blocks = (in + kFp8ScaleBlock - 1) / kFp8ScaleBlock;
    if (in % kFp8ActBlock != 0) reasons.push_back(fmt::format("{}-block weight with in = {} (not a multiple of 128)", mode_name(mode), in));
    if (blocks % 4 != 0) {
      reasons.push_back(fmt::format("{} weight with {} column blocks: cuBLASLt reads each row of block scales "
                                    "16-byte aligned (a multiple of 4 blocks)",
                                    mode_name(mode), blocks));
    }
  }
  return reasons;
}

Fp8ActScale fp8_lt_activation_scale(Fp8Scale mode) {
  switch (mode) {
    case Fp8Scale::kPerTensor: return Fp8ActScale::kPerToken;
    case Fp8Scale::kPerChannel: return Fp8ActScale::kPerToken;
    case Fp8Scale::kBlock128: return Fp8ActScale::kPerToken128;
  }
  SPINDLE_FAIL("unknown FP8 scale mode");
}

Fp8LtLinear::Fp8LtLinear(cudaStream_t stream, bool fast_accum) : stream_(stream), fast_accum_(fast_accum) {
  const CublasLtApi& lt = cublaslt_api();  // throws when cuBLASLt cannot be loaded
  cublasLtHandle_t handle = nullptr;
  CUBLASLT_CHECK(lt.Create(&handle));
  handle_ = handle;
  try {
    workspace_.reserve(kCublasWorkspaceBytes);
    query_scales_.reserve(16 * sizeof(float));
  } catch (...) {
    lt.Destroy(handle);
    throw;
  }
}

Fp8LtLinear::~Fp8LtLinear() {
  plans_.clear();
  if (handle_ != nullptr) cublaslt_api().Destroy(static_cast<cublasLtHandle_t>(handle_));
}

void Fp8LtLinear::reserve(int64_t max_rows, int64_t max_in, int64_t max_out) {
  SPINDLE_CHECK(max_rows >= 0 && max_in >= 0 && max_out >= 0, "cuBLASLt FP8: negative scratch size");
  out16_.reserve(static_cast<size_t>(std::max(max_rows, kBlockRowAlign) * max_out) * sizeof(uint16_t));
  tail_x_.reserve(static_cast<size_t>(kBlockRowAlign * max_in) * sizeof(float));
  tail_y_.reserve(static_cast<size_t>(kBlockRowAlign * max_out) * sizeof(float));
  tail_codes_.reserve(static_cast<size_t>(kBlockRowAlign * max_in));
  tail_scales_.reserve(static_cast<size_t>(std::max<int64_t>(
                           fp8_activation_scale_count(Fp8ActScale::kPerToken128, kBlockRowAlign, max_in), 1)) *
                       sizeof(float));
  wscale_.reserve(static_cast<size_t>(std::max<int64_t>(max_out, 1)) * sizeof(float));
  codes_.reserve(static_cast<size_t>(max_rows * max_in));
  const int64_t max_scales = std::max<int64_t>(fp8_activation_scale_count(Fp8ActScale::kPerToken128, max_rows, max_in),
                                               std::max<int64_t>(max_rows, 1));
  scales_.reserve(static_cast<size_t>(max_scales) * sizeof(float));
}

Fp8LtLinear::Plan& Fp8LtLinear::plan_for(Fp8Scale mode, int64_t out, int64_t in, int64_t rows) {
  auto& slot = plans_[{static_cast<int>(mode), out, in, rows}];
  if (slot) return *slot;
  const CublasLtApi& lt = cublaslt_api();
  auto plan = std::make_unique<Plan>();
  CUBLASLT_CHECK(lt.MatmulDescCreate(&plan->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t trans_a = CUBLAS_OP_T, trans_b = CUBLAS_OP_N;
  CUBLASLT_CHECK(lt.MatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_TRANSA, &trans_a, sizeof(trans_a)));
  CUBLASLT_CHECK(lt.MatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_TRANSB, &trans_b, sizeof(trans_b)));
  const int8_t fast = fast_accum_ ? 1 : 0;
  CUBLASLT_CHECK(lt.MatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast, sizeof(fast)));
  int32_t a_mode = CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F, b_mode = CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
  if (mode == Fp8Scale::kBlock128) {
    a_mode = CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F;
    b_mode = CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;
  }
  CUBLASLT_CHECK(lt.MatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &a_mode, sizeof(a_mode)));
  CUBLASLT_CHECK(lt.MatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &b_mode, sizeof(b_mode)));
  // With any scale mode but SCALAR_32F, the heuristic answers CUBLAS_STATUS_INVALID_VALUE unless the
  // scale pointers are set (measured on an H100, cuBLASLt 13.1); any device address will do here.
  const void* query_scales = query_scales_.data();
  CUBLASLT_CHECK(lt.MatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &query_scales,
                                           sizeof(query_scales)));
  CUBLASLT_CHECK(lt.MatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &query_scales,
                                           sizeof(query_scales)));
  // A: W stored [out, in] row-major = col-major [in, out] (ld in), op T; B: x col-major [in, rows];
  // D: y col-major [out, rows] (ld out) = row-major [rows, out].
  CUBLASLT_CHECK(lt.MatrixLayoutCreate(&plan->a, CUDA_R_8F_E4M3, in, out, in));
  CUBLASLT_CHECK(lt.MatrixLayoutCreate(&plan->b, CUDA_R_8F_E4M3, in, rows, in));
  cublasLtMatmulPreference_t pref = nullptr;
  CUBLASLT_CHECK(lt.MatmulPreferenceCreate(&pref));
  const uint64_t max_workspace = workspace_.size();
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  cublasStatus_t status = lt.MatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                          &max_workspace, sizeof(max_workspace));
  cublasStatus_t last = status;  // the last heuristic's answer, for the error
  for (const cudaDataType_t d_type : {CUDA_R_32F, CUDA_R_16BF}) {  // f32 output, else bf16 (the fallback)
    if (status != CUBLAS_STATUS_SUCCESS) break;  // the preference itself failed
    if (plan->d != nullptr) lt.MatrixLayoutDestroy(plan->d);
    plan->d = nullptr;
    CUBLASLT_CHECK(lt.MatrixLayoutCreate(&plan->d, d_type, out, rows, out));
    found = 0;
    last = lt.MatmulAlgoGetHeuristic(static_cast<cublasLtHandle_t>(handle_), plan->desc, plan->a, plan->b, plan->d,
                                     plan->d, pref, 1, &result, &found);
    plan->bf16_out = d_type == CUDA_R_16BF;
    if (last == CUBLAS_STATUS_SUCCESS && found > 0) break;  // else (not supported, invalid): the next type
  }
  lt.MatmulPreferenceDestroy(pref);
  SPINDLE_CHECK(status == CUBLAS_STATUS_SUCCESS && last == CUBLAS_STATUS_SUCCESS && found > 0,
                "cuBLASLt FP8: no algorithm for a {} weight [{}, {}] x {} rows{} with an f32 or bf16 output (status "
                "{}, cuBLASLt {})",
                mode_name(mode), out, in, rows, fast_accum_ ? " with fast accumulation" : "",
                static_cast<int>(status != CUBLAS_STATUS_SUCCESS ? status : last), lt.version);
  plan->algo = result.algo;
  slot = std::move(plan);
  return *slot;
}

void Fp8LtLinear::forward_quantized(const DeviceFp8Weight& w, const uint8_t* x_codes, const float* x_scales,
                                    int64_t rows, float* y, const float* bias) {
  const int64_t out = w.out_features, in = w.in_features;
  SPINDLE_CHECK(out > 0 && in > 0 && out <= INT_MAX && in <= INT_MAX && rows >= 0 && rows <= INT_MAX &&
                    in % 16 == 0 && out % 16 == 0,
                "cuBLASLt FP8: a [{}, {}] weight x {} rows is not a shape it takes (out, in multiples of 16)", out, in,
                rows);
  SPINDLE_CHECK(aligned16(w.codes) && aligned16(x_codes) && aligned16(y),
                "cuBLASLt FP8: the weight, activations and output must be 16-byte aligned");
  if (rows == 0) return;
  Plan& plan = plan_for(w.mode, out, in, rows);
  const CublasLtApi& lt = cublaslt_api();
  const float* a_scale = w.scales;
  if (w.mode == Fp8Scale::kPerTensor) {  // OUTER_VEC_32F: the one scale as `out` floats
    SPINDLE_CHECK(wscale_.size() >= static_cast<size_t>(out) * sizeof(float),
                  "cuBLASLt FP8: scale scratch for {} outputs not reserved", out);
    launch_broadcast_scale(w.scales, out, wscale_.as<float>(), stream_);
    a_scale = wscale_.as<float>();
  }
  CUBLASLT_CHECK(lt.MatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &a_scale,
                                           sizeof(a_scale)));
  CUBLASLT_CHECK(lt.MatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &x_scales,
                                           sizeof(x_scales)));
  const float alpha = 1.0f, beta = 0.0f;
  void* d = y;
  if (plan.bf16_out) {
    SPINDLE_CHECK(out16_.size() >= static_cast<size_t>(rows * out) * sizeof(uint16_t),
                  "cuBLASLt FP8: bf16 output scratch for {} x {} not reserved", rows, out);
    d = out16_.data();
  }
  CUBLASLT_CHECK(lt.Matmul(static_cast<cublasLtHandle_t>(handle_), plan.desc, &alpha, w.codes, plan.a, x_codes,
                           plan.b, &beta, d, plan.d, d, plan.d, &plan.algo, workspace_.data(), workspace_.size(),
                           stream_));
  if (plan.bf16_out) {
    launch_bf16_to_f32_bias(out16_.as<uint16_t>(), rows, out, bias, y, stream_);
  } else if (bias != nullptr) {
    launch_add_bias(y, bias, rows, out, stream_);
  }
}

std::string Fp8LtLinear::why_unsupported(Fp8Scale mode, int64_t out, int64_t in, int64_t rows) {
  try {
    plan_for(mode, out, in, rows);
    return {};
  } catch (const Error& e) {
    return e.what();
  }
}

bool Fp8LtLinear::output_bf16(Fp8Scale mode, int64_t out, int64_t in, int64_t rows) {
  return plan_for(mode, out, in, rows).bf16_out;
}

void Fp8LtLinear::quantize_and_multiply(const DeviceFp8Weight& w, const float* x, int64_t rows, float* y,
                                        const float* bias, DeviceBuffer& codes, DeviceBuffer& scales) {
  const Fp8ActScale act = fp8_lt_activation_scale(w.mode);
  const int64_t in = w.in_features;
  SPINDLE_CHECK(codes.size() >= static_cast<size_t>(rows * in) &&
                    scales.size() >= static_cast<size_t>(fp8_activation_scale_count(act, rows, in)) * sizeof(float),
                "cuBLASLt FP8: scratch for {} x {} activations not reserved", rows, in);
  launch_quantize_fp8_activations(x, rows, in, act, codes.as<uint8_t>(), scales.as<float>(), stream_);
  forward_quantized(w, codes.as<uint8_t>(), scales.as<float>(), rows, y, bias);
}

void Fp8LtLinear::forward(const DeviceFp8Weight& w, const float* x, int64_t rows, float* y, const float* bias) {
  if (rows == 0) return;
  const int64_t head = w.mode == Fp8Scale::kBlock128 ? rows / kBlockRowAlign * kBlockRowAlign : rows;
  if (head > 0) quantize_and_multiply(w, x, head, y, bias, codes_, scales_);
  if (head == rows) return;
  const int64_t in = w.in_features, out = w.out_features, tail = rows - head;
  SPINDLE_CHECK(tail_x_.size() >= static_cast<size_t>(kBlockRowAlign * in) * sizeof(float) &&
                    tail_y_.size() >= static_cast<size_t>(kBlockRowAlign * out) * sizeof(float),
                "cuBLASLt FP8: tail scratch for a [{}, {}] weight not reserved", out, in);
  CUDA_CHECK(cudaMemsetAsync(tail_x_.data(), 0, static_cast<size_t>(kBlockRowAlign * in) * sizeof(float), stream_));
  CUDA_CHECK(cudaMemcpyAsync(tail_x_.data(), x + head * in, static_cast<size_t>(tail * in) * sizeof(float),
                             cudaMemcpyDeviceToDevice, stream_));
  quantize_and_multiply(w, tail_x_.as<float>(), kBlockRowAlign, tail_y_.as<float>(), bias, tail_codes_, tail_scales_);
  CUDA_CHECK(cudaMemcpyAsync(y + head * out, tail_y_.data(), static_cast<size_t>(tail * out) * sizeof(float),
                             cudaMemcpyDeviceToDevice, stream_));
}

}  // namespace spindle::kernels::cuda
