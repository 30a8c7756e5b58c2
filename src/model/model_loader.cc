#include "model/model_loader.h"

#include "util/error.h"

#ifdef SPINDLE_WITH_CUDA
#include "model/cuda_model.h"
#endif

namespace spindle {

std::unique_ptr<Transformer> load_model(const std::filesystem::path& dir, const LoadOptions& options) {
  if (options.device == attn::Device::kCpu) return load_cpu_model(dir, options.cpu);
#ifdef SPINDLE_WITH_CUDA
  CudaModelOptions cuda;
  cuda.device = options.cuda_device;
  cuda.allow_16bit_activations = options.cuda_16bit_activations;
  return load_cuda_model(dir, cuda);
#else
  SPINDLE_FAIL("cannot load {} on a CUDA device: this spindle was built without CUDA", dir.string());
#endif
}

}  // namespace spindle
