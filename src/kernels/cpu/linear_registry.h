// The registry of CPU linear kernels (DESIGN.md section 7): every kernel of kernels/cpu/linear.h
// but `reference` (the ground truth, never chosen), each with its availability reasons and a
// factory, as attention backends are registered (attn/attention_backend.h). kernels/cpu/select
// validates the available ones in child processes, times them per weight shape and row class and
// chooses; nothing else names a kernel.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kernels/cpu/linear.h"

namespace spindle {
struct CpuInfo;
}

namespace spindle::kernels::cpu {

// The shape class of a weight: what validation and timing depend on (the bytes do not). A
// quantized weight (GGUF block type, repacked: quant_linear.h) has `quant` set; dtype is then unused.
struct LinearShape {
  int64_t out_features = 0;
  int64_t in_features = 0;
  DType dtype = DType::kBF16;
  std::optional<QuantType> quant;
  std::string type_name() const;  // "BF16", "F32", "Q4_K", ...
  std::string to_string() const;   // "2048x8192:BF16" (out x in : type)
  auto operator<=>(const LinearShape&) const = default;
};
LinearShape linear_shape_of(const LinearWeight& weight);
// Parses to_string()'s form; throws spindle::Error naming the text.
LinearShape parse_linear_shape(std::string_view text);

struct LinearKernelDescriptor {
  std::string name;
  std::string description;
  // It rounds x to bf16: validation compares it with the float64 product of x rounded to bf16.
  bool rounds_activations_to_bf16 = false;
  // It computes each row of x alike whatever m (bit for bit): only such a kernel may serve decode
  // rows, where a speculative verify of B sequences must get a B-row decode step's bits. oneDNN's
  // blocking depends on m, so its kernels serve prefill rows only.
  bool row_independent = true;
  // Higher wins the `priority` policy, ties of the timing, and make_linear_kernel's choice.
  int decode_priority = 0;
  int prefill_priority = 0;
  // Empty: it can run this shape on this CPU with these options; otherwise every reason not.
  std::function<std::vector<std::string>(const CpuInfo&, const LinearShape&, const LinearOptions&)>
      unsupported_reasons;
  std::function<std::unique_ptr<LinearKernel>(const LinearWeight&)> factory;
};

class LinearRegistry {
 public:
  // Throws when the name is taken or the descriptor lacks a factory or reasons.
  void register_kernel(LinearKernelDescriptor descriptor);
  // Throws for an unknown name, listing every registered name.
  const LinearKernelDescriptor& get(std::string_view name) const;
  bool contains(std::string_view name) const;
  // In registration order.
  const std::vector<LinearKernelDescriptor>& list() const { return descriptors_; }
  std::vector<std::string> names() const;

 private:
  std::vector<LinearKernelDescriptor> descriptors_;
};

// The process-wide registry: avx2, avx512, avx512_bf16, amx, amx_bf16, onednn_f32, onednn_bf16
// (F32 / BF16 weights), and the int8 kernels of quant_linear.h (quantized weights, every
// QuantType): int8_avx2, int8_avx_vnni, int8_avx512_vnni, amx_int8.
LinearRegistry& linear_registry();
// Registers them into `registry` (tests build their own registries with extra kernels).
void register_cpu_linear_kernels(LinearRegistry& registry);

// The reasons of `name` for this weight on this machine (detect_cpu_info()).
std::vector<std::string> linear_unsupported_reasons(const LinearKernelDescriptor& descriptor, const LinearShape& shape,
                                                    const LinearOptions& options);

// Creates a registered kernel; throws naming the reasons when it is unavailable. A kernel named by
// SPINDLE_LINEAR_FAULT (util/switches.h; tests of the validation protocol) misbehaves:
// "crash" raises SIGILL in forward, "wrong" adds 0.5 to every output.
std::unique_ptr<LinearKernel> create_linear_kernel(std::string_view name, const LinearWeight& weight,
                                                   const LinearOptions& options = {},
                                                   const LinearRegistry& registry = linear_registry());

// One kernel per row range: rows[i] serves products of at least min_rows[i] rows (by the row count
// a call chooses for, LinearKernel::forward_choosing_for), up to the next entry's. The first entry
// has min_rows 1; entries are sorted. Equal names share one kernel.
struct LinearRowChoice {
  int64_t min_rows = 1;
  std::string kernel;
};
std::unique_ptr<LinearKernel> make_row_table_linear(const LinearWeight& weight, const std::vector<LinearRowChoice>& rows,
                                                    const LinearOptions& options = {},
                                                    const LinearRegistry& registry = linear_registry());

}  // namespace spindle::kernels::cpu
