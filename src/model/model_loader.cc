#include "model/model_loader.h"

#include "model/gguf_model_config.h"
#include "util/error.h"

#ifdef SPINDLE_WITH_CUDA
#include "model/cuda_model.h"
#endif

namespace spindle {

std::unique_ptr<Transformer> load_model(const std::filesystem::path& dir, const LoadOptions& options) {
  if (options.device == attn::Device::kCpu) return load_cpu_model(dir, options.cpu);
  // (The GPU path of GGUF block types is the FP8 issue's.)
  SPINDLE_CHECK(!is_gguf_path(dir), "{}: GGUF files are served on the CPU only; run without --device cuda (or "
                "serve the Hugging Face folder of this model on the GPU)", dir.string());
#ifdef SPINDLE_WITH_CUDA
  CudaModelOptions cuda;
  cuda.device = options.cuda_device;
  cuda.allow_16bit_activations = options.cuda_16bit_activations;
  cuda.quantize_fp8 = options.cpu.quantize_fp8;
  cuda.fp8_prefill_kernel = options.cuda_fp8_prefill_kernel;
  cuda.fp8_prefill_cache_dir = options.cuda_fp8_prefill_cache_dir;
  cuda.cache_fingerprint = options.cuda_cache_fingerprint;
  return load_cuda_model(dir, cuda);
#else
  SPINDLE_FAIL("cannot load {} on a CUDA device: this spindle was built without CUDA", dir.string());
#endif
}

}  // namespace spindle
