// Loads a model folder onto the device the worker runs on: Model (CPU, weights mmap'd) or
// CudaModel (weights uploaded to the calling thread's bound CUDA device).
#pragma once

#include <filesystem>
#include <memory>

#include "attn/attention_types.h"
#include "model/forward_model.h"
#include "model/model.h"

namespace spindle {

struct ForwardModelOptions {
  attn::Device device = attn::Device::kCpu;
  int cuda_device = 0;      // the CUDA ordinal, for kCuda (bound by the caller)
  ModelOptions cpu;         // for kCpu
};

// Throws spindle::Error naming the folder (and, for kCuda in a build without CUDA, saying so).
std::unique_ptr<ForwardModel> load_forward_model(const std::filesystem::path& dir, const ForwardModelOptions& options);

}  // namespace spindle
