// ServerConfig holds every flag as the operator gave it; resolve() is the ONE place where the
// defaults are decided (DESIGN.md section 1). Nothing else picks a default.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>
#include <utility>

#include "attn/attention_types.h"
#include "attn/select/attention_selection.h"
#include "config/dp_config.h"
#include "config/kv_config.h"
#include "config/spec_config.h"
#include "kernels/cpu/select/linear_selection.h"
#include "model/model_config.h"
#include "model/weight_quantization.h"
#include "platform/device_info.h"
#include "util/mapped_file.h"

namespace CLI {
class App;
}

namespace spindle::config {

// The flags. "auto" and 0 mean "let resolve() decide".
struct ServerConfig {
  std::string device = "cpu";  // cpu | cuda | cuda:N
  std::string attention_backend = "auto";
  std::string prefill_attention_backend = "auto";
  std::string decode_attention_backend = "auto";
  std::string attention_backend_policy = "benchmark";
  std::string linear_kernel = "auto";          // CPU linear kernel for both row classes
  std::string decode_linear_kernel = "auto";   // overrides linear_kernel for decode rows
  std::string prefill_linear_kernel = "auto";  // overrides linear_kernel for prefill rows
  std::string linear_kernel_policy = "auto";   // auto: --attention-backend-policy's
  bool skip_backend_validation = false;
  bool no_backend_cache = false;
  double backend_validation_timeout_s = 30.0;
  std::string kv_cache_dtype = "auto";
  // fp8_e4m3 KV only: "checkpoint" (the checkpoint's k_scale/v_scale tensors where it has them,
  // else 1.0) or "auto" (absmax per layer and KV head measured on a calibration prompt at start,
  // scale = absmax / 448; checkpoint scales, where present, still win).
  std::string kv_cache_scales = "checkpoint";
  int page_size = 0;
  int num_threads = 0;
  std::string chat_template;  // "": the model's Jinja template; or chatml | llama3 | llama2 | a Jinja file
  std::string matmul_precision = "auto";  // auto | exact | bf16
  std::string weights_memory = "auto";    // auto | mapped | huge-pages
  std::string quantization = "none";      // none | q8_0 (CPU) | fp8 (linear weights quantized at load)
  std::string fp8_prefill_kernel = "auto";  // CUDA FP8 weights above 32 rows: an entry name or auto
  int max_running_requests = 0;  // 0: kDefaultMaxRunningRequests
  int max_queued_requests = 0;   // 0: kDefaultMaxQueuedRequests
  bool disable_cuda_graph = false;
  int cuda_graph_max_bs = 0;     // 0: min(max running requests, kDefaultCudaGraphMaxBs)
  bool enable_overlap_schedule = false;
  bool disable_overlap_schedule = false;
  KvFlags kv;
  SpecFlags spec;
  DpFlags dp;  // data-parallel ranks and the router (--dp-size itself is in kv)
};

// The attention-relevant facts of a model (from config.json, or given by hand to `doctor`).
struct ModelAttentionDims {
  int num_heads = 0;
  int num_kv_heads = 0;
  int head_dim = 0;
};

struct ResolvedConfig {
  attn::Device device = attn::Device::kCpu;  // where attention and the KV cache run
  int cuda_device = -1;                      // the CUDA ordinal when device is kCuda, else -1
  DType kv_dtype = DType::kBF16;
  bool calibrate_kv_scales = false;  // --kv-cache-scales auto (fp8_e4m3 KV only)
  int page_size = 16;
  int num_threads = 1;
  attn::AttentionShape attention_shape;
  attn::AttentionSelectionOptions attention;
  // The CPU linear kernels' selection (kernels/cpu/select): names, policy, activation precision
  // (bf16_activations) and the row counts it measures (decode rows up to max_running_requests,
  // prefill rows up to max_num_batched_tokens: the ModelConfig overload of resolve()).
  kernels::cpu::LinearSelectionOptions linear;
  double backend_validation_timeout_s = 30.0;
  bool use_backend_cache = true;
  std::filesystem::path backend_cache_dir;
  // Linear layers may round activations to bf16: oneDNN's AMX / AVX512-BF16 matmul on the CPU
  // (large batches, bf16 weights, CPUs that have it), cuBLAS bf16 x bf16 on CUDA. auto: true for
  // bf16 checkpoints (from the ModelConfig overload of resolve()); exact: false, f32 activations,
  // results within ~1e-6 of a float64 reference on the CPU (~2e-5 with CUDA's split).
  bool bf16_activations = false;
  // Where the CPU model's weights live (util/mapped_file.h): auto gives a copy in transparent huge
  // pages on the CPU device when the kernel grants them on advice (THP "always" or "madvise"; the
  // 1B shape's batch-1 decode ran 4-7% faster on a Zen 3, bench/results/2026-12-04-zen3-hugepage-weights),
  // else the mapped file. CUDA uploads the weights: mapped. (generate sets mapped before parsing.)
  FileMemory weights_memory = FileMemory::kMapped;
  // --quantization fp8: an unquantized folder's linear weights quantized to FP8 per channel at load
  // (model/fp8_quantize.h), on either device.
  bool quantize_fp8 = false;
  // --fp8-prefill-kernel: the CUDA FP8 products above 32 rows (kernels/cuda/fp8_linear_registry.h;
  // the name is checked where the model loads, which lists the registered ones). CUDA only.
  std::string fp8_prefill_kernel = "fp8_w8a16";
  // --quantization: none, or q8_0 (CPU only: an F32/BF16 checkpoint's linear weights quantized at
  // load, model/weight_quantization.h). With q8_0, weights_memory auto is mapped: a huge-page copy
  // would hold the plain linear weights that the repacked Q8_0 copies replace.
  WeightQuantization quantization = WeightQuantization::kNone;
  int max_running_requests = 0;  // requests in the running batch at most
  int max_queued_requests = 0;   // waiting requests before the server answers 503
  // CUDA: decode steps of at most this many sequences replay step graphs (0: none).
  int cuda_graph_max_bs = 0;
  // Launch the next step while the device runs this one (engine.h's overlap schedule): CUDA, with
  // --enable-overlap-schedule (the engine also runs one step at a time where it must). Off by
  // default: on the H200 it gained 0.5% at batch 1 and 2.3% at C=8/32 but raised TTFT p50 at C=32
  // from ~128 to ~177 ms in every run (bench/results/2026-12-02-h200-session8.md); with only decode
  // steps run ahead still +0.3% / +0.9% and 118 -> 169 ms (bench/results/2026-12-03-h200-e2e-18).
  bool overlap_schedule = false;
  ResolvedKvConfig kv;  // only from the ModelConfig overload of resolve()
  ResolvedSpecConfig spec;
  // Only from the ModelConfig overload: the DP layout and router. With dp_size > 1, num_threads
  // above is per rank (dp.threads_per_rank), and max_running_requests / max_queued_requests too.
  ResolvedDpConfig dp;
};

inline constexpr int kDefaultPageSize = 16;
inline constexpr int kDefaultMaxRunningRequests = 256;
inline constexpr int kDefaultMaxQueuedRequests = 1024;
inline constexpr int kDefaultCudaGraphMaxBs = 256;
inline constexpr DType kDefaultKvDtype = DType::kBF16;

// Decides every default for this machine and model; throws on a bad flag value.
ResolvedConfig resolve(const ServerConfig& flags, const DeviceInfo& device, const ModelAttentionDims& model);
// The same plus the KV cache settings (which need the model's max_position_embeddings).
ResolvedConfig resolve(const ServerConfig& flags, const DeviceInfo& device, const ModelConfig& model);

// Binds the worker to its device: for CUDA makes config.cuda_device current on the calling thread
// and returns `detected` with cuda_devices holding only that device (free memory read now), the
// form backend selection and capacity planning take. CPU: returns `detected` unchanged.
DeviceInfo bind_worker_device(const ResolvedConfig& config, DeviceInfo detected);

// "cpu" -> {kCpu, -1}; "cuda" -> {kCuda, 0}; "cuda:N" -> {kCuda, N}; throws naming the accepted forms.
std::pair<attn::Device, int> parse_device(std::string_view text);

// Registers the flags above on a CLI11 (sub)command.
void add_attention_flags(CLI::App& app, ServerConfig& flags);
// (max_running_requests, max_queued_requests) with their defaults; resolve() uses it, and serve
// sizes its HTTP threads with it before the model is loaded.
std::pair<int, int> resolve_request_limits(const ServerConfig& flags);
// --max-running-requests, --max-queued-requests.
void add_scheduler_flags(CLI::App& app, ServerConfig& flags);
// --weights-memory's rule (resolve() applies it; benchmarks call it too): huge-pages or, for auto, a
// CPU device whose kernel grants transparent huge pages on advice -> kHugePageCopy; else kMapped.
// Throws on another word, or huge-pages on a CUDA device.
FileMemory resolve_weights_memory(const std::string& flag, attn::Device device, const MemoryInfo& memory);
// --weights-memory (serve, generate and plan).
void add_weights_memory_flag(CLI::App& app, ServerConfig& flags);
// --quantization's rule: none, q8_0 (the CPU device only) or fp8 (quantize_fp8; returns kNone);
// throws naming the flag and its values for another word.
WeightQuantization resolve_quantization(const std::string& flag, attn::Device device);
// --quantization (serve, generate and plan).
void add_quantization_flag(CLI::App& app, ServerConfig& flags);

}  // namespace spindle::config
