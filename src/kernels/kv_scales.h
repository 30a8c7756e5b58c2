// KvScales: the dequantization scales of an FP8 (E4M3FN) KV cache, one per layer and KV head, for
// K and V apart. A K element x is stored as float_to_fp8_e4m3(x / k_scale) (util/fp8.h: rounded to
// nearest even, saturated at +-448, NaN kept) and read back as fp8_e4m3_to_float(byte) * k_scale;
// V the same with v_scale. A per-tensor (per-layer) scale is the same value for every head.
// Plain data, C++17 (kernels, kv/ and the loaders all read it).
#pragma once

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

namespace spindle {

struct KvScales {
  int num_layers = 0;
  int num_kv_heads = 0;
  std::vector<float> k;  // [num_layers, num_kv_heads], row-major
  std::vector<float> v;  // [num_layers, num_kv_heads]
  // Where they came from, for the start-up log and `spindle plan`: "1.0 (default)", "checkpoint",
  // "calibrated (absmax / 448)".
  std::string source;

  static KvScales uniform(int num_layers, int num_kv_heads, float value, std::string source) {
    KvScales s;
    s.num_layers = num_layers;
    s.num_kv_heads = num_kv_heads;
    s.k.assign(static_cast<size_t>(num_layers) * static_cast<size_t>(num_kv_heads), value);
    s.v = s.k;
    s.source = std::move(source);
    return s;
  }
  const float* k_layer(int layer) const { return k.data() + static_cast<size_t>(layer) * num_kv_heads; }
  const float* v_layer(int layer) const { return v.data() + static_cast<size_t>(layer) * num_kv_heads; }
};

}  // namespace spindle
