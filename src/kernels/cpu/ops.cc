#include "kernels/cpu/ops.h"

#include <cmath>
#include <numbers>

#include "platform/cpu_info.h"
#include "util/error.h"
#include "util/half.h"

namespace spindle::kernels::cpu {
namespace {

// Element i of a typed vector as f32.
inline float load(TypedWeight w, int64_t i) {
  switch (w.dtype) {
    case DType::kF32: return static_cast<const float*>(w.data)[i];
    case DType::kBF16: return bf16_bits_to_float(static_cast<const uint16_t*>(w.data)[i]);
    default: return fp16_bits_to_float(static_cast<const uint16_t*>(w.data)[i]);
  }
}

void check_weight_dtype(TypedWeight w, const char* what) {
  SPINDLE_CHECK(w.dtype == DType::kF32 || w.dtype == DType::kBF16 || w.dtype == DType::kF16,
                "{}: weights of dtype {} are not supported (F32, BF16, F16)", what, dtype_name(w.dtype));
}

// dst[i] = src[i] as f32 for i < n.
void convert_row(TypedWeight src, int64_t offset, int64_t n, float* dst) {
  if (src.dtype == DType::kF32) {
    const float* s = static_cast<const float*>(src.data) + offset;
    for (int64_t i = 0; i < n; ++i) dst[i] = s[i];
  } else if (src.dtype == DType::kBF16) {
    const uint16_t* s = static_cast<const uint16_t*>(src.data) + offset;
    for (int64_t i = 0; i < n; ++i) dst[i] = std::bit_cast<float>(static_cast<uint32_t>(s[i]) << 16);
  } else {
    const uint16_t* s = static_cast<const uint16_t*>(src.data) + offset;
    for (int64_t i = 0; i < n; ++i) dst[i] = fp16_bits_to_float(s[i]);
  }
}

// Sum of squares with 8 f64 partial sums (vectorisable without reassociation flags).
double sum_of_squares(const float* x, int64_t n) {
  double acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int j = 0; j < 8; ++j) acc[j] += double{x[i + j]} * x[i + j];
  }
  for (; i < n; ++i) acc[0] += double{x[i]} * x[i];
  return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

template <typename LoadWeight>
void rms_norm_rows(const float* x, int64_t x_stride, float* out, int64_t out_stride, int64_t rows,
                   int64_t cols, float eps, LoadWeight weight) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * x_stride;
    float* o = out + r * out_stride;
    const float mean = static_cast<float>(sum_of_squares(xr, cols) / static_cast<double>(cols));
    const float inv_rms = 1.0f / std::sqrt(mean + eps);
    for (int64_t i = 0; i < cols; ++i) o[i] = (xr[i] * inv_rms) * weight(i);
  }
}

}  // namespace

void embedding_gather(TypedWeight table, int64_t vocab, int64_t hidden, std::span<const int32_t> ids,
                      float* out) {
  check_weight_dtype(table, "embedding_gather");
  for (size_t t = 0; t < ids.size(); ++t) {
    const int32_t id = ids[t];
    SPINDLE_CHECK(id >= 0 && id < vocab, "token id {} at position {} is outside the vocabulary [0, {})",
                  id, t, vocab);
    convert_row(table, int64_t{id} * hidden, hidden, out + static_cast<int64_t>(t) * hidden);
  }
}

void rms_norm(const float* x, int64_t x_stride, float* out, int64_t out_stride, int64_t rows,
              int64_t cols, TypedWeight weight, float eps) {
  check_weight_dtype(weight, "rms_norm");
  if (weight.dtype == DType::kF32) {
    const float* w = static_cast<const float*>(weight.data);
    rms_norm_rows(x, x_stride, out, out_stride, rows, cols, eps, [w](int64_t i) { return w[i]; });
  } else if (weight.dtype == DType::kBF16) {
    const uint16_t* w = static_cast<const uint16_t*>(weight.data);
    rms_norm_rows(x, x_stride, out, out_stride, rows, cols, eps, [w](int64_t i) {
      return std::bit_cast<float>(static_cast<uint32_t>(w[i]) << 16);
    });
  } else {
    rms_norm_rows(x, x_stride, out, out_stride, rows, cols, eps,
                  [weight](int64_t i) { return load(weight, i); });
  }
}

RopeTable::RopeTable(const RopeParams& params, int64_t num_positions)
    : params_(params), num_positions_(num_positions) {
  const int d = params.head_dim;
  SPINDLE_CHECK(d > 0 && d % 2 == 0, "rope: head_dim must be positive and even, got {}", d);
  SPINDLE_CHECK(num_positions >= 0, "rope: negative table size {}", num_positions);
  const int half = d / 2;
  inv_freq_.resize(half);
  // Hugging Face: inv_freq = 1 / (theta ** (arange(0, d, 2).float() / d)), all in f32.
  for (int i = 0; i < half; ++i) {
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(d);
    const float power = static_cast<float>(std::pow(params.theta, static_cast<double>(exponent)));
    inv_freq_[i] = 1.0f / power;
  }
  if (params.scaling == RopeParams::kLinear) {
    SPINDLE_CHECK(params.factor > 0, "rope: linear scaling factor must be positive, got {}", params.factor);
    for (float& f : inv_freq_) f /= static_cast<float>(params.factor);
  } else if (params.scaling == RopeParams::kLlama3) {
    // transformers' _compute_llama3_parameters: keep high frequencies, divide low ones by factor,
    // interpolate smoothly between the two wavelength thresholds.
    const float factor = static_cast<float>(params.factor);
    const float low = static_cast<float>(params.low_freq_factor);
    const float high = static_cast<float>(params.high_freq_factor);
    const float old_len = static_cast<float>(params.original_max_position_embeddings);
    SPINDLE_CHECK(factor > 0 && old_len > 0 && high != low,
                  "rope: llama3 scaling needs factor > 0, original_max_position_embeddings > 0 and "
                  "high_freq_factor != low_freq_factor");
    const float low_freq_wavelen = old_len / low;
    const float high_freq_wavelen = old_len / high;
    for (float& f : inv_freq_) {
      const float wavelen = static_cast<float>(2 * std::numbers::pi) / f;
      float scaled = wavelen > low_freq_wavelen ? f / factor : f;
      if (!(wavelen < high_freq_wavelen) && !(wavelen > low_freq_wavelen)) {
        const float smooth = (old_len / wavelen - low) / (high - low);
        scaled = (1 - smooth) * scaled / factor + smooth * scaled;
      }
      f = scaled;
    }
  }
  cos_.resize(static_cast<size_t>(num_positions) * half);
  sin_.resize(cos_.size());
  for (int64_t p = 0; p < num_positions; ++p) angles(p, &cos_[p * half], &sin_[p * half]);
}

void RopeTable::angles(int64_t position, float* cos_out, float* sin_out) const {
  // Hugging Face: freqs = inv_freq.float() @ position.float() (an f32 product), cos/sin in f32.
  const float pos = static_cast<float>(position);
  for (size_t i = 0; i < inv_freq_.size(); ++i) {
    const float angle = inv_freq_[i] * pos;
    cos_out[i] = static_cast<float>(std::cos(static_cast<double>(angle)));
    sin_out[i] = static_cast<float>(std::sin(static_cast<double>(angle)));
  }
}

void RopeTable::apply(float* x, int num_heads, int64_t position) const {
  SPINDLE_CHECK(position >= 0, "rope: negative position {}", position);
  const int half = params_.head_dim / 2;
  const float* c;
  const float* s;
  float local_cos[512], local_sin[512];
  if (position < num_positions_) {
    c = &cos_[position * half];
    s = &sin_[position * half];
  } else {
    SPINDLE_CHECK(half <= 512, "rope: head_dim {} too large", params_.head_dim);
    angles(position, local_cos, local_sin);
    c = local_cos;
    s = local_sin;
  }
  for (int h = 0; h < num_heads; ++h) {
    float* x1 = x + int64_t{h} * params_.head_dim;
    float* x2 = x1 + half;
    for (int i = 0; i < half; ++i) {
      const float a = x1[i], b = x2[i];
      x1[i] = a * c[i] - b * s[i];
      x2[i] = b * c[i] + a * s[i];
    }
  }
}

// ops_avx2.cc (compiled with -mavx2 -mfma): the same with a vectorised exp.
void silu_mul_avx2(const float* gate, const float* up, int64_t in_stride, float* out, int64_t rows, int64_t cols);

bool silu_mul_uses_avx2() {
  static const bool avx2 = [] {
    const CpuInfo info = detect_cpu_info();
    return info.has("avx2") && info.has("fma");
  }();
  return avx2;
}

void silu_mul(const float* gate, const float* up, int64_t in_stride, float* out, int64_t rows,
              int64_t cols) {
  if (silu_mul_uses_avx2()) {
    silu_mul_avx2(gate, up, in_stride, out, rows, cols);
    return;
  }
  silu_mul_scalar(gate, up, in_stride, out, rows, cols);
}

void silu_mul_scalar(const float* gate, const float* up, int64_t in_stride, float* out, int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* g = gate + r * in_stride;
    const float* u = up + r * in_stride;
    float* o = out + r * cols;
    for (int64_t i = 0; i < cols; ++i) o[i] = g[i] / (1.0f + std::exp(-g[i])) * u[i];
  }
}

void add_inplace(float* y, const float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += x[i];
}

}  // namespace spindle::kernels::cpu
