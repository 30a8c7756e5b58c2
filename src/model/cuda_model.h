// The transformer on one CUDA device: load_cuda_model runs Transformer (transformer.h) over
// CudaOps (cuda_ops.h). Built only with SPINDLE_WITH_CUDA.
//
// The same architectures in one code path, the same loading and checks (model_files.h: a folder
// load_cpu_model rejects is rejected here with the same message) and the same forward contract.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>

#include "model/transformer.h"

namespace spindle {

struct CudaModelOptions {
  int device = 0;  // CUDA runtime ordinal (after CUDA_VISIBLE_DEVICES)
  // RoPE cos/sin positions precomputed at load; 0: max_position_embeddings (capped at 1 << 20).
  int64_t rope_table_positions = 0;
  // bf16/f16 weights: round activations to 16 bits before each product (faster prefill, ~1e-2
  // relative logit error) instead of the default hi/lo split (~1e-5). See cublas_linear.h.
  bool allow_16bit_activations = false;
  // --quantization fp8: linear weights quantized to FP8 per channel at load (model/fp8_quantize.h).
  bool quantize_fp8 = false;
  // FP8 weights, products of more than 32 rows (kFp8StreamMaxRows) (kernels/cuda/fp8_linear_registry.h): a registered
  // name ("fp8_w8a16", "cublaslt_fp8", "cublaslt_fp8_fast_accum"), or "auto": each entry checked
  // against float64 and timed at load on the model's FP8 shapes (in-process), the fastest that
  // passes chosen per shape. A named entry unavailable for a shape fails the load with the reasons.
  std::string fp8_prefill_kernel = "fp8_w8a16";
  // "auto"'s checks cached on disk (kernels/fp8_prefill_cache.h) in this folder, keyed with
  // cache_fingerprint (startup's cache_fingerprint: the CPU's and the bound GPU's); empty: checked
  // and timed at every load.
  std::filesystem::path fp8_prefill_cache_dir;
  std::string cache_fingerprint;
};

// Reads dir/config.json, maps and checks the checkpoint (as load_cpu_model), then uploads the
// weights to options.device (made current on the calling thread) and unmaps the checkpoint.
// Throws spindle::Error naming the folder, or the CUDA failure.
std::unique_ptr<Transformer> load_cuda_model(const std::filesystem::path& dir, const CudaModelOptions& options = {});

}  // namespace spindle
