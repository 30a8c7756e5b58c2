// WeightQuantization: how a CPU model stores the linear weights of a plain-float (F32 / BF16)
// checkpoint (--quantization; config::resolve decides, CpuOps applies it at load).
//   kNone  the checkpoint's own dtype (read in place)
//   kQ8_0  each linear weight (q/k/v/o, gate/up/down, the LM head; not norms, embedding tables or
//          biases) quantized to GGUF Q8_0 blocks at load (gguf/quantize_q8_0.h), tensor by tensor,
//          then repacked for the int8 kernels as a Q8_0 GGUF weight is; a weight whose in_features
//          is not a multiple of 32 stays in its dtype (logged).
#pragma once

namespace spindle {

enum class WeightQuantization { kNone, kQ8_0 };

inline const char* weight_quantization_name(WeightQuantization q) {
  return q == WeightQuantization::kQ8_0 ? "q8_0" : "none";
}

}  // namespace spindle
