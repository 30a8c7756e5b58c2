// The attention backend interface and its registry (DESIGN.md section 2).
//
// A backend is created for one AttentionShape. Once per step prepare() receives the batch layout
// (the StepBatch, shared by all layers); bind_kv_caches() hands it every layer's pages; forward()
// runs one layer.
#pragma once

#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "attn/attention_types.h"

namespace spindle {
class ThreadPool;
struct CpuInfo;
struct DeviceInfo;
}  // namespace spindle

namespace spindle::kernels::cuda {
class DeviceBatch;
}  // namespace spindle::kernels::cuda

namespace spindle::attn {

struct BackendOptions {
  ThreadPool* pool = nullptr;  // CPU worker pool; null means ThreadPool::global()
};

class AttentionBackend {
 public:
  virtual ~AttentionBackend() = default;
  virtual std::string_view name() const = 0;
  // Where forward()'s tensors and the bound KV pages must live: host memory for kCpu; for kCuda,
  // device memory of the CUDA device current on the calling thread (kernels run on the legacy
  // default stream; forward() returns once they are queued, not finished).
  virtual Device device() const = 0;
  // The shape it was created for.
  virtual const AttentionShape& shape() const = 0;
  // Once per step, before the step's first forward(), shared by all layers: the step's batch
  // (kernels/step_batch.h), which must stay unchanged until the step's last forward(). `uploaded`
  // is its device copy when the caller made one (engine::Runner through the model); a kCuda
  // backend given none uploads the batch itself (tests, validation children).
  virtual void prepare(const StepBatch& batch, const kernels::cuda::DeviceBatch* uploaded = nullptr) = 0;
  // The per-layer KV pages this backend reads and writes (the whole pool; it uses its rank's range).
  virtual void bind_kv_caches(std::span<const LayerKvCache> layers) = 0;
  // q: [num_tokens, num_heads * head_dim]; k, v: [num_tokens, num_kv_heads * head_dim] (the new
  // tokens, written into the pages first); out: [num_tokens, num_heads * head_dim].
  // kv_written: the caller already wrote k and v into kv_write_target(layer) (which must not be
  // empty); forward only attends (k and v are checked, not read).
  virtual void forward(int layer, ConstTensor q, ConstTensor k, ConstTensor v, Tensor out, bool kv_written = false) = 0;
  // Where layer `layer`'s new K/V rows go in the prepared step, for the op that produces k and v
  // to write them there itself (CUDA: the model's q/k/v split + RoPE kernel) and save the write
  // kernel; empty when this backend writes them itself. Valid until the next prepare().
  virtual KvWriteTarget kv_write_target(int /*layer*/) const { return {}; }
  // A 16-bit copy of the next forward()'s output, for the op after it (the output projection) to
  // read instead of converting out itself. True: the next forward() of this prepared step also
  // writes `copy` (then forgets it); false: it will not, and nothing changed. Default: never
  // (cuda_flash writes it in decode steps).
  virtual bool request_output_copy(const OutputCopy& /*copy*/) { return false; }
};

using PhaseMask = unsigned;
inline constexpr PhaseMask kPrefillPhase = 1u << 0;
inline constexpr PhaseMask kDecodePhase = 1u << 1;
inline constexpr PhaseMask kBothPhases = kPrefillPhase | kDecodePhase;
inline bool serves(PhaseMask mask, Phase phase) {
  return (mask & (phase == Phase::kPrefill ? kPrefillPhase : kDecodePhase)) != 0;
}

struct BackendDescriptor {
  std::string name;
  Device device = Device::kCpu;
  PhaseMask phases = kBothPhases;
  int priority = 0;  // higher wins ties and the `priority` policy
  std::string description;
  // Empty means usable on this machine for this shape; otherwise every reason it is not.
  std::function<std::vector<std::string>(const DeviceInfo&, const AttentionShape&)> unsupported_reasons;
  std::function<std::unique_ptr<AttentionBackend>(const AttentionShape&, const DpConfig&,
                                                  const BackendOptions&)>
      factory;
  // Optional: the measurement of this backend's per-machine values (util/switches.h members its
  // kernels read): it times the kernels on the current device for `shape`, installs the fastest
  // values (set_switches; call it before other threads read them) and returns one line saying
  // what it measured and chose. Throws when it cannot (the values stay).
  std::function<std::string(const AttentionShape&)> measure_machine;
};

class AttentionRegistry {
 public:
  // Throws when the name is taken or the descriptor is incomplete.
  void register_backend(BackendDescriptor descriptor);
  // Throws for an unknown name, listing every registered name.
  const BackendDescriptor& get(std::string_view name) const;
  bool contains(std::string_view name) const;
  // Every descriptor, sorted by name.
  std::vector<const BackendDescriptor*> list() const;
  std::vector<std::string> names() const;

 private:
  std::vector<BackendDescriptor> descriptors_;
};

// The process-wide registry, holding every built-in backend.
AttentionRegistry& attention_registry();

// Creates a registered backend; checks the shape and the DpConfig first.
std::unique_ptr<AttentionBackend> create_attention_backend(std::string_view name,
                                                           const AttentionShape& shape,
                                                           const DpConfig& dp_config,
                                                           const BackendOptions& options = {});

// Registers reference, cpu_avx2, cpu_avx512 and cpu_amx (attn/cpu_backends.cc).
void register_cpu_attention_backends(AttentionRegistry& registry);

// Registers cuda_reference, cuda_flash and cudnn_sdpa (attn/cuda_backends.cc); exists only in
// builds with SPINDLE_WITH_CUDA.
void register_cuda_attention_backends(AttentionRegistry& registry);

}  // namespace spindle::attn
