// The CUDA attention backends (built only with SPINDLE_WITH_CUDA): cuda_reference, cuda_flash,
// cudnn_sdpa. Every tensor forward() receives and every bound KV page is CUDA device memory of
// the device current on the calling thread; kernels run on the step's stream (the DeviceBatch's:
// the model's stream, or the legacy default stream for a batch the backend uploaded itself).
//
// Per step, prepare() takes the step's device copy (kernels::cuda::DeviceBatch, uploaded once by
// the model for the whole step, or by the backend itself when none is given); per layer the
// new K/V are written into the pages by one kernel, then the backend's attention kernel runs.
#include <fmt/format.h>

#include <algorithm>
#include <memory>
#include <vector>

#include "attn/attention_backend.h"
#include "attn/paged_backend.h"
#include "kernels/cpu/paged_attention.h"
#include "kernels/cuda/cudnn_sdpa.h"
#include "kernels/cuda/device_buffer.h"
#include "kernels/cuda/flash_attention.h"
#include "kernels/cuda/paged_attention.h"
#include "kernels/cuda/split_policy.h"
#include "platform/device_info.h"
#include "util/error.h"
#include "util/switches.h"

namespace spindle::attn {
namespace {

namespace kc = kernels::cpu;
namespace kcu = kernels::cuda;
namespace kd = kernels::cuda::detail;

constexpr int kMinCcMajor = 8;

// The host-side work of every CUDA backend; subclasses only say how to attend.
class CudaPagedBackend : public PagedBackend {
 protected:
  CudaPagedBackend(std::string name, const AttentionShape& shape, const DpConfig& dp)
      : PagedBackend(std::move(name), Device::kCuda, shape, dp), num_sms_(kcu::current_device_sm_count()) {}

  // One layer's attention over the uploaded batch; the new K/V are already in the pages.
  virtual void attend(const kc::PagedAttentionParams& p) = 0;

  // The step's device copy: the caller's, or this backend's own upload.
  const kcu::DeviceBatch& device_batch() const { return *device_batch_; }
  int num_sms() const { return num_sms_; }

 private:
  // PagedBackend::prepare checked each page table's length; page ids are checked against the pool at
  // the step's first forward, before any kernel runs.
  void on_prepare(const kcu::DeviceBatch* uploaded) final {
    if (uploaded == nullptr) {
      own_batch_.upload(batch(), shape().page_size);
      uploaded = &own_batch_;
    }
    device_batch_ = uploaded;
  }

  void run_layer(int /*layer*/, const kc::KvWriteParams* write, const kc::PagedAttentionParams& p) final {
    if (write != nullptr) kcu::write_kv_pages(*write, *device_batch_);  // else the caller wrote them
    attend(p);
  }

  // The model's q/k/v split writes the K/V rows into the pages itself (model_ops.h KvPagesOut);
  // FP8 pages are written by the backend's own writer (kcu::write_kv_pages: scaled, saturated).
  KvWriteTarget kv_write_target(int layer) const final {
    if (device_batch_ == nullptr || kv_geometry().dtype == DType::kF8E4M3) return {};
    const RankPages pages = rank_pages(layer_cache(layer));
    KvWriteTarget t;
    t.k_pages = pages.k;
    t.v_pages = pages.v;
    t.dtype = kv_geometry().dtype;
    t.slots = device_batch_->slots();
    return t;
  }

  void corrupt_output(Tensor out) final {
    kcu::add_constant(out.data, out.rows * out.cols, 0.5f, device_batch_->stream());
  }

  kcu::DeviceBatch own_batch_;
  const kcu::DeviceBatch* device_batch_ = nullptr;
  int num_sms_ = 0;
};

class CudaReferenceBackend final : public CudaPagedBackend {
 public:
  CudaReferenceBackend(const AttentionShape& shape, const DpConfig& dp) : CudaPagedBackend("cuda_reference", shape, dp) {
    SPINDLE_CHECK(shape.head_dim <= kcu::kCudaReferenceMaxHeadDim, "cuda_reference: head_dim {} not supported (up to {})",
                  shape.head_dim, kcu::kCudaReferenceMaxHeadDim);
    kcu::kv_type_of(shape.kv_dtype);  // throws for an unsupported KV dtype
  }

 private:
  void attend(const kc::PagedAttentionParams& p) override { kcu::paged_attention_reference(p, device_batch()); }
};

class CudaFlashBackend final : public CudaPagedBackend {
 public:
  CudaFlashBackend(const AttentionShape& shape, const DpConfig& dp) : CudaPagedBackend("cuda_flash", shape, dp) {
    const kd::KvType kv = kcu::kv_type_of(shape.kv_dtype);
    SPINDLE_CHECK(kd::flash_prefill_supports(shape.head_dim, kv) && kd::flash_decode_supports(shape.head_dim, kv),
                  "cuda_flash: head_dim {} with {} KV not supported", shape.head_dim, dtype_name(shape.kv_dtype));
  }

 private:
  // Decode steps, and steps the decode kernel serves row by row: the split and merge kernels
  // write the copy next to out.
  bool request_output_copy(const OutputCopy& copy) override {
    copy_ = {};
    if (!copy || !prepared() || !(batch().max_new_tokens == 1 || decodes_rows(device_batch().view()))) return false;
    if (copy.dtype != DType::kBF16 && copy.dtype != DType::kF16) return false;
    copy_ = copy;
    return true;
  }

  // A step of a few query rows, not all decode rows (a batch-1 speculative verify: K + 1): each
  // row runs as a one-token sequence of the decode kernel, attending to its causal prefix
  // (DeviceBatch's row_sequences; paged_layer_launch.h has the measured bound). On the 8B shape's
  // 5-token verify the prefill kernel took 23.7 us per layer against ~11 for the decode kernel's
  // split and merge (ncu, bench/results/2026-12-04-h200-verify-attn).
  static bool decodes_rows(const kd::PagedBatchView& view) { return view.row_sequences != nullptr; }

  void attend(const kc::PagedAttentionParams& p) override {
    const OutputCopy copy = std::exchange(copy_, {});
    kd::PagedLayerLaunch a = kcu::make_layer_launch(p, device_batch(), num_sms());
    if (a.batch.num_rows == 0) return;
    if (decodes_rows(a.batch)) {
      a.batch.sequences = a.batch.row_sequences;
      a.batch.num_sequences = a.batch.num_rows;
      a.batch.max_new_tokens = 1;
      a.new_keys_before_last = true;  // row i's keys include rows 0..i-1's, written this step too
    }
    const bool decode = a.batch.max_new_tokens == 1;
    if (decode && copy) {
      a.out16 = copy.data;
      a.out16_bf16 = copy.dtype == DType::kBF16;
    }
    const size_t bytes = decode ? kd::flash_decode_workspace_bytes(a) : kd::flash_prefill_workspace_bytes(a);
    if (bytes > 0) workspace_.reserve(bytes);
    a.workspace = bytes > 0 ? workspace_.data() : nullptr;
    a.workspace_bytes = bytes;
    if (decode) {
      kd::launch_flash_decode(a, device_batch().stream());
    } else {
      kd::launch_flash_prefill(a, device_batch().stream());
    }
  }

  kcu::DeviceBuffer workspace_;
  OutputCopy copy_;  // request_output_copy's, for the next attend()
};

class CudnnSdpaBackend final : public CudaPagedBackend {
 public:
  CudnnSdpaBackend(const AttentionShape& shape, const DpConfig& dp)
      : CudaPagedBackend("cudnn_sdpa", shape, dp),
        sdpa_(shape.num_heads, shape.num_kv_heads, shape.head_dim, shape.scale, kcu::kv_type_of(shape.kv_dtype),
              shape.page_size) {}

 private:
  void attend(const kc::PagedAttentionParams& p) override {
    const kd::PagedLayerLaunch a = kcu::make_layer_launch(p, device_batch(), num_sms());
    if (a.batch.num_rows > 0) sdpa_.run(a, device_batch().stream());
  }

  kcu::CudnnSdpa sdpa_;
};

// The device this worker is bound to: DeviceInfo lists it first (config::bind_device).
void add_device_gaps(const DeviceInfo& device, std::vector<std::string>& reasons) {
  if (device.cuda_devices.empty()) {
    reasons.push_back(device.cuda_status.empty() ? "no CUDA device"
                                                 : fmt::format("no CUDA device: {}", device.cuda_status));
    return;
  }
  const CudaDeviceInfo& d = device.cuda_devices.front();
  if (d.cc_major < kMinCcMajor) {
    reasons.push_back(fmt::format("CUDA device {} ({}) has compute capability {}.{}, needs {}.0", d.index, d.name,
                                  d.cc_major, d.cc_minor, kMinCcMajor));
  }
}

bool is_cuda_kv_dtype(DType dtype) { return dtype == DType::kF32 || dtype == DType::kBF16 || dtype == DType::kF16; }

// cuda_reference also reads (and its writer writes) FP8 pages.
std::vector<std::string> cuda_reference_gaps(const DeviceInfo& device, const AttentionShape& shape) {
  std::vector<std::string> reasons;
  add_device_gaps(device, reasons);
  if (!is_cuda_kv_dtype(shape.kv_dtype) && shape.kv_dtype != DType::kF8E4M3) {
    reasons.push_back(fmt::format("KV dtype {} not supported (bf16, fp16, f32, fp8_e4m3)",
                                  kv_cache_dtype_name(shape.kv_dtype)));
  }
  if (shape.head_dim > kcu::kCudaReferenceMaxHeadDim) {
    reasons.push_back(fmt::format("head_dim {} not supported (up to {})", shape.head_dim,
                                  kcu::kCudaReferenceMaxHeadDim));
  }
  return reasons;
}

std::vector<std::string> cuda_flash_gaps(const DeviceInfo& device, const AttentionShape& shape) {
  std::vector<std::string> reasons;
  add_device_gaps(device, reasons);
  // FP8 pages are converted to f16 (exactly) as the kernels stage them, scales applied in f32.
  if (shape.kv_dtype != DType::kBF16 && shape.kv_dtype != DType::kF16 && shape.kv_dtype != DType::kF8E4M3) {
    reasons.push_back(fmt::format("KV dtype {} not supported (bf16, fp16, fp8_e4m3: tensor-core inputs)",
                                  kv_cache_dtype_name(shape.kv_dtype)));
    return reasons;
  }
  const kd::KvType kv = kcu::kv_type_of(shape.kv_dtype);
  if (!kd::flash_prefill_supports(shape.head_dim, kv)) {
    reasons.push_back(fmt::format("head_dim {} not supported by the prefill kernel", shape.head_dim));
  }
  if (!kd::flash_decode_supports(shape.head_dim, kv)) {
    reasons.push_back(fmt::format("head_dim {} not supported by the decode kernel", shape.head_dim));
  }
  return reasons;
}

std::vector<std::string> cudnn_sdpa_gaps(const DeviceInfo& device, const AttentionShape& shape) {
  std::vector<std::string> reasons;
  add_device_gaps(device, reasons);
  // cuDNN's paged SDPA takes 16-bit K/V only (an FP8 SDPA needs FP8 q and descale tensors: not wired).
  if (!is_cuda_kv_dtype(shape.kv_dtype)) {
    reasons.push_back(fmt::format("KV dtype {} not supported (bf16, fp16)", kv_cache_dtype_name(shape.kv_dtype)));
    return reasons;
  }
  const int cc_major = device.cuda_devices.empty() ? 0 : device.cuda_devices.front().cc_major;
  const int cc_minor = device.cuda_devices.empty() ? 0 : device.cuda_devices.front().cc_minor;
  for (auto& r : kcu::cudnn_sdpa_unsupported_reasons(cc_major, cc_minor, shape.head_dim,
                                                      kcu::kv_type_of(shape.kv_dtype), shape.page_size)) {
    if (device.cuda_devices.empty() && r.find("compute capability") != std::string::npos) continue;
    reasons.push_back(std::move(r));
  }
  return reasons;
}

template <typename Backend>
BackendDescriptor make_cuda_descriptor(std::string name, int priority, std::string description,
                                       std::vector<std::string> (*gaps)(const DeviceInfo&, const AttentionShape&)) {
  BackendDescriptor d;
  d.name = std::move(name);
  d.device = Device::kCuda;
  d.phases = kBothPhases;
  d.priority = priority;
  d.description = std::move(description);
  d.unsupported_reasons = gaps;
  d.factory = [](const AttentionShape& shape, const DpConfig& dp, const BackendOptions&) {
    return std::make_unique<Backend>(shape, dp);
  };
  return d;
}

// cuda_flash's per-machine values: flash decode's split sizes (kernels/cuda/split_policy.h).
std::string measure_flash_decode_splits(const AttentionShape& shape) {
  kd::KvType kv_type = kd::KvType::kBF16;
  if (shape.kv_dtype == DType::kF16 || shape.kv_dtype == DType::kF8E4M3) {
    kv_type = kd::KvType::kF16;  // (FP8 KV runs the f16 kernels on converted stages: measured as f16)
  } else {
    SPINDLE_CHECK(shape.kv_dtype == DType::kBF16, "flash decode's split sizes: {} KV is not cuda_flash's",
                  dtype_name(shape.kv_dtype));
  }
  const kcu::SplitMeasurement m =
      kcu::measure_flash_decode_splits(shape.num_heads, shape.num_kv_heads, shape.head_dim, kv_type);
  Switches values = switches();
  values.flash_decode_min_chunk = m.best.min_chunk_keys;
  values.flash_decode_blocks_per_sm = m.best.blocks_per_sm;
  set_switches(std::move(values));
  std::string times;
  for (size_t c = 0; c < m.us.size(); ++c) {
    times += fmt::format("{}{}k/{}b", c == 0 ? "" : ", ", kcu::kSplitCandidates[c].min_chunk_keys,
                         kcu::kSplitCandidates[c].blocks_per_sm);
    for (size_t s = 0; s < m.us[c].size(); ++s) times += fmt::format(" {:.1f}", m.us[c][s]);
  }
  return fmt::format("cuda_flash: flash decode splits measured on this GPU (us per launch at batch 1 x 512 and "
                     "8 x 2048 keys: {}): min chunk {} keys, {} block(s) per SM",
                     times, m.best.min_chunk_keys, m.best.blocks_per_sm);
}

}  // namespace

void register_cuda_attention_backends(AttentionRegistry& registry) {
  registry.register_backend(make_cuda_descriptor<CudaReferenceBackend>(
      "cuda_reference", 0, "one thread block per (row, head), float accumulation: the CUDA ground truth",
      cuda_reference_gaps));
  registry.register_backend(make_cuda_descriptor<CudnnSdpaBackend>(
      "cudnn_sdpa", 1, "cuDNN fused flash attention (graph API, paged K/V), loaded at run time", cudnn_sdpa_gaps));
  BackendDescriptor flash = make_cuda_descriptor<CudaFlashBackend>(
      "cuda_flash", 2, "FlashAttention-2-style prefill on tensor cores + split-KV paged decode", cuda_flash_gaps);
  flash.measure_machine = measure_flash_decode_splits;
  registry.register_backend(std::move(flash));
}

}  // namespace spindle::attn
