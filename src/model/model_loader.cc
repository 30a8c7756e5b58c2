#include "model/model_loader.h"

#include "util/error.h"

#ifdef SPINDLE_WITH_CUDA
#include "model/cuda_model.h"
#endif

namespace spindle {

std::unique_ptr<ForwardModel> load_forward_model(const std::filesystem::path& dir, const ForwardModelOptions& options) {
  if (options.device == attn::Device::kCpu) return Model::load(dir, options.cpu);
#ifdef SPINDLE_WITH_CUDA
  CudaModelOptions cuda;
  cuda.device = options.cuda_device;
  return CudaModel::load(dir, cuda);
#else
  SPINDLE_FAIL("cannot load {} on a CUDA device: this spindle was built without CUDA", dir.string());
#endif
}

}  // namespace spindle
