// The transformer on the CPU: load_cpu_model runs Transformer (transformer.h) over CpuOps.
//
// Weights stay in the mmap'd checkpoint in their stored dtype (F32 or BF16 for projections;
// norms and embeddings may also be F16), except GGUF block types and F16 projections, which are
// converted at load (cpu_ops.h); activations are f32 throughout. One LinearKernel is
// made per projection at load; gate_proj and up_proj share one kernel when they lie back to
// back in the file (no copy), which is how Hugging Face's writer orders them.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>

#include "kernels/cpu/linear.h"
#include "model/transformer.h"
#include "model/weight_quantization.h"
#include "util/mapped_file.h"

namespace spindle {

class ThreadPool;

struct ModelOptions {
  ThreadPool* pool = nullptr;  // CPU workers for the linear kernels and ops; null: ThreadPool::global()
  // Makes the kernel of each projection; empty: kernels::cpu::make_linear_kernel (the registry's
  // priority choice, unmeasured). A server passes its measured choice
  // (startup::LinearKernelChooser); tests pass make_reference_linear_kernel.
  using MakeLinear = std::function<std::unique_ptr<kernels::cpu::LinearKernel>(const kernels::cpu::LinearWeight&)>;
  MakeLinear make_linear;
  // RoPE cos/sin positions precomputed at load; 0: max_position_embeddings (capped at 1 << 20).
  // Later positions are computed on the fly with the same arithmetic.
  int64_t rope_table_positions = 0;
  // Where the checkpoint's bytes (which the CPU kernels read in place) live: the file mapped, or a
  // copy in transparent huge pages (util/mapped_file.h; config::resolve decides, --weights-memory).
  FileMemory weights_memory = FileMemory::kMapped;
  // --quantization fp8: linear weights quantized to FP8 per channel at load (model/fp8_quantize.h).
  bool quantize_fp8 = false;
  // Plain-float linear weights quantized at load (weight_quantization.h, --quantization).
  WeightQuantization quantization = WeightQuantization::kNone;
};

// A folder: reads dir/config.json, maps the checkpoint, checks every weight's name, shape and dtype
// (check_weights) and makes the linear kernels. A .gguf file: the config from its metadata, its
// tensors checked and placed as cpu_ops.h describes (quantized ones repacked). Throws
// spindle::Error naming the folder or file.
std::unique_ptr<Transformer> load_cpu_model(const std::filesystem::path& path, const ModelOptions& options = {});

}  // namespace spindle
