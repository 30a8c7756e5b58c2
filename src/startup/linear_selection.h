// The CPU linear kernels of a serving process (DESIGN.md section 7): kernels::cpu's selection
// (kernels/cpu/select/linear_selection.h) with the real child-process validator and the on-disk
// cache keyed by build, device fingerprint, shape and rows. A LinearKernelChooser selects the
// model's predicted weight shapes in one round of children (one per kernel) before the load, and
// any other shape the load places on its first use; ModelOptions::make_linear calls make().
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "config/server_config.h"
#include "kernels/cpu/select/linear_selection.h"
#include "model/model.h"
#include "platform/device_info.h"

namespace spindle::startup {

// The (out, in, dtype) of every projection CpuOps places for this model: q, k, v, o, the joined
// gate/up, down and the LM head, in the checkpoint's dtype (torch_dtype; F32 or BF16).
std::vector<kernels::cpu::LinearShape> model_linear_shapes(const ModelConfig& model);

class LinearKernelChooser {
 public:
  // executable: the spindle binary to re-execute (empty: /proc/self/exe).
  LinearKernelChooser(const config::ResolvedConfig& config, const DeviceInfo& device, std::string executable = "");
  // Selects the shapes not selected yet (one child per candidate kernel for all of them).
  void select(const std::vector<kernels::cpu::LinearShape>& shapes);
  // The chosen row table's kernel for this weight (selecting its shape first when new).
  std::unique_ptr<kernels::cpu::LinearKernel> make(const kernels::cpu::LinearWeight& weight);
  const kernels::cpu::LinearSelection& selection() const { return selection_; }

 private:
  config::ResolvedConfig config_;
  std::string fingerprint_;
  std::string executable_;
  kernels::cpu::LinearSelection selection_;
  std::mutex mutex_;
};

// ModelOptions::make_linear over a chooser (which it keeps alive).
ModelOptions::MakeLinear make_linear_with(std::shared_ptr<LinearKernelChooser> chooser);

// One line per shape: "2048x2048:BF16: avx512:1, onednn_f32:65".
std::vector<std::string> describe_linear_choices(const kernels::cpu::LinearSelection& selection);

}  // namespace spindle::startup
