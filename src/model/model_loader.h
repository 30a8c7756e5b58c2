// Loads a model folder onto the device the worker runs on: load_cpu_model (weights mmap'd) or
// load_cuda_model (weights uploaded to the calling thread's bound CUDA device).
#pragma once

#include <filesystem>
#include <memory>
#include <string>

#include "attn/attention_types.h"
#include "model/model.h"
#include "model/transformer.h"

namespace spindle {

struct LoadOptions {
  attn::Device device = attn::Device::kCpu;
  int cuda_device = 0;      // the CUDA ordinal, for kCuda (bound by the caller)
  bool cuda_16bit_activations = false;  // kCuda: CudaModelOptions::allow_16bit_activations
  std::string cuda_fp8_prefill_kernel = "fp8_w8a16";  // kCuda: CudaModelOptions::fp8_prefill_kernel
  // kCuda: CudaModelOptions::fp8_prefill_cache_dir and cache_fingerprint (empty dir: no cache).
  std::filesystem::path cuda_fp8_prefill_cache_dir;
  std::string cuda_cache_fingerprint;
  ModelOptions cpu;         // for kCpu (its quantize_fp8 for kCuda too)
};

// Throws spindle::Error naming the folder (and, for kCuda in a build without CUDA, saying so).
std::unique_ptr<Transformer> load_model(const std::filesystem::path& dir, const LoadOptions& options);

}  // namespace spindle
