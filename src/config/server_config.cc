#include "config/server_config.h"

#include <CLI/CLI.hpp>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <tuple>

#include <fmt/format.h>

#include "attn/select/validation_cache.h"
#include "util/build_info.h"
#include "util/error.h"

namespace spindle::config {

std::pair<attn::Device, int> parse_device(std::string_view text) {
  if (text == "cpu") return {attn::Device::kCpu, -1};
  if (text == "cuda") return {attn::Device::kCuda, 0};
  if (text.starts_with("cuda:")) {
    const std::string_view digits = text.substr(5);
    int index = 0;
    const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), index);
    if (ec == std::errc() && end == digits.data() + digits.size() && !digits.empty() && index >= 0) {
      return {attn::Device::kCuda, index};
    }
  }
  SPINDLE_FAIL("--device '{}' is not one of: cpu, cuda, cuda:N (N a CUDA device ordinal)", text);
}

ResolvedConfig resolve(const ServerConfig& flags, const DeviceInfo& device, const ModelAttentionDims& model) {
  ResolvedConfig r;
  std::tie(r.device, r.cuda_device) = parse_device(flags.device);
  if (r.device == attn::Device::kCuda) {
    SPINDLE_CHECK(!device.cuda_devices.empty(), "--device {}: no usable CUDA device ({})", flags.device,
                  device.cuda_status.empty() ? "none found" : device.cuda_status);
    const bool present = std::any_of(device.cuda_devices.begin(), device.cuda_devices.end(),
                                     [&](const CudaDeviceInfo& d) { return d.index == r.cuda_device; });
    SPINDLE_CHECK(present, "--device {}: this machine has CUDA devices 0 to {}", flags.device,
                  device.cuda_devices.size() - 1);
  }
  if (flags.kv_cache_dtype == "auto") {
    r.kv_dtype = kDefaultKvDtype;
  } else {
    const auto parsed = parse_dtype(flags.kv_cache_dtype);
    SPINDLE_CHECK(parsed == DType::kBF16 || parsed == DType::kF32 || parsed == DType::kF16 || parsed == DType::kF8E4M3,
                  "--kv-cache-dtype '{}' is not supported; use auto, bf16, fp16, f32 or fp8_e4m3", flags.kv_cache_dtype);
    r.kv_dtype = *parsed;
  }
  SPINDLE_CHECK(flags.kv_cache_scales == "checkpoint" || flags.kv_cache_scales == "auto",
                "--kv-cache-scales '{}' is not supported; use checkpoint or auto", flags.kv_cache_scales);
  r.calibrate_kv_scales = flags.kv_cache_scales == "auto";
  SPINDLE_CHECK(!r.calibrate_kv_scales || r.kv_dtype == DType::kF8E4M3,
                "--kv-cache-scales auto measures FP8 KV scales; it needs --kv-cache-dtype fp8_e4m3 (got {})",
                kv_cache_dtype_name(r.kv_dtype));
  SPINDLE_CHECK(flags.page_size >= 0 && flags.page_size <= 256, "--page-size {} must be between 1 and 256",
                flags.page_size);
  r.page_size = flags.page_size > 0 ? flags.page_size : kDefaultPageSize;
  SPINDLE_CHECK(flags.num_threads >= 0, "--threads {} must be positive", flags.num_threads);
  r.num_threads = flags.num_threads > 0 ? flags.num_threads : std::max(1, device.cpu.num_logical_cores);

  SPINDLE_CHECK(model.num_heads > 0 && model.num_kv_heads > 0 && model.head_dim > 0 &&
                    model.num_heads % model.num_kv_heads == 0,
                "attention dims must be positive with heads a multiple of KV heads (got {} heads, {} KV heads, "
                "head_dim {})",
                model.num_heads, model.num_kv_heads, model.head_dim);
  r.attention_shape.num_heads = model.num_heads;
  r.attention_shape.num_kv_heads = model.num_kv_heads;
  r.attention_shape.head_dim = model.head_dim;
  r.attention_shape.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(model.head_dim)));
  r.attention_shape.kv_dtype = r.kv_dtype;
  r.attention_shape.page_size = r.page_size;

  r.attention.attention_backend = flags.attention_backend;
  r.attention.prefill_attention_backend = flags.prefill_attention_backend;
  r.attention.decode_attention_backend = flags.decode_attention_backend;
  r.attention.policy = attn::parse_policy(flags.attention_backend_policy);
  r.attention.skip_validation = flags.skip_backend_validation;
  r.linear.decode_kernel = flags.decode_linear_kernel != "auto" ? flags.decode_linear_kernel : flags.linear_kernel;
  r.linear.prefill_kernel = flags.prefill_linear_kernel != "auto" ? flags.prefill_linear_kernel : flags.linear_kernel;
  for (const std::string* name : {&r.linear.decode_kernel, &r.linear.prefill_kernel}) {
    if (*name != "auto") kernels::cpu::linear_registry().get(*name);  // unknown: lists the registered kernels
  }
  r.linear.policy = kernels::cpu::parse_linear_policy(
      flags.linear_kernel_policy == "auto" ? flags.attention_backend_policy : flags.linear_kernel_policy);
  r.linear.skip_validation = flags.skip_backend_validation;
  r.attention.device = r.device;

  SPINDLE_CHECK(flags.matmul_precision == "auto" || flags.matmul_precision == "exact" ||
                    flags.matmul_precision == "bf16",
                "--matmul-precision '{}' is not one of: auto, exact, bf16", flags.matmul_precision);
  r.bf16_activations = flags.matmul_precision == "bf16";  // auto: decided from the checkpoint (below)
  r.weights_memory = resolve_weights_memory(flags.weights_memory, r.device, device.memory);
  r.quantization = resolve_quantization(flags.quantization, r.device);
  r.quantize_fp8 = flags.quantization == "fp8";
  const bool cuda = r.device == attn::Device::kCuda;
  SPINDLE_CHECK(flags.fp8_prefill_kernel == "fp8_w8a16" || flags.fp8_prefill_kernel == "auto" || cuda,
                "--fp8-prefill-kernel {} is for the CUDA device (the CPU runs FP8 weights as W8A16 through its linear "
                "registry); leave the flag out or use --device cuda",
                flags.fp8_prefill_kernel);
  // auto (the default): CUDA checks and times each entry at load; the CPU has only W8A16.
  r.fp8_prefill_kernel = cuda ? flags.fp8_prefill_kernel : "fp8_w8a16";
  if (r.quantization != WeightQuantization::kNone && flags.weights_memory == "auto") r.weights_memory = FileMemory::kMapped;
  SPINDLE_CHECK(flags.backend_validation_timeout_s > 0, "--backend-validation-timeout must be positive");
  r.backend_validation_timeout_s = flags.backend_validation_timeout_s;
  r.use_backend_cache = !flags.no_backend_cache;
  std::tie(r.max_running_requests, r.max_queued_requests) = resolve_request_limits(flags);
  SPINDLE_CHECK(flags.cuda_graph_max_bs >= 0, "--cuda-graph-max-bs {} must not be negative (0: the default)",
                flags.cuda_graph_max_bs);
  if (r.device == attn::Device::kCuda && !flags.disable_cuda_graph) {
    const int wanted = flags.cuda_graph_max_bs > 0 ? flags.cuda_graph_max_bs : kDefaultCudaGraphMaxBs;
    r.cuda_graph_max_bs = std::min(wanted, r.max_running_requests);
  }
  r.overlap_schedule = r.device == attn::Device::kCuda && flags.enable_overlap_schedule && !flags.disable_overlap_schedule;
  r.backend_cache_dir = attn::ValidationCache::default_dir();
  return r;
}

ResolvedConfig resolve(const ServerConfig& flags, const DeviceInfo& device, const ModelConfig& model) {
  ResolvedConfig r = resolve(flags, device,
                             ModelAttentionDims{model.num_attention_heads, model.num_key_value_heads, model.head_dim});
  r.kv = resolve_kv(flags.kv, model);
  r.spec = resolve_spec(flags.spec);
  r.dp = resolve_dp(flags.dp, r.kv.dp_size, std::max(1, device.cpu.num_logical_cores), flags.num_threads,
                    r.device == attn::Device::kCuda, r.cuda_device, static_cast<int>(device.cuda_devices.size()));
  if (r.kv.dp_size > 1) {
    r.num_threads = r.dp.threads_per_rank;
  } else {
    r.dp.threads_per_rank = r.num_threads;
  }
  // Per DP rank: after num_threads became the rank's share.
  if (r.spec.draft_threads == 0) r.spec.draft_threads = std::min(kDefaultDraftThreads, r.num_threads);
  if (r.spec.algorithm == SpecAlgorithm::kDraft) {
    const int vocab = model.vocab_size;
    const int wanted = flags.spec.draft_vocab_size;
    SPINDLE_CHECK(wanted <= vocab, "--speculative-draft-vocab-size {}: the vocabulary has only {} token ids", wanted,
                  vocab);
    SPINDLE_CHECK(wanted == 0 || wanted == vocab || r.device == attn::Device::kCpu,
                  "--speculative-draft-vocab-size {}: a draft vocabulary subset is only available on the CPU (on {} "
                  "the draft's LM head covers all {} ids; leave the flag out)",
                  wanted, attn::device_name(r.device), vocab);
    if (wanted > 0) {
      r.spec.draft_vocab_size = wanted;
    } else {
      r.spec.draft_vocab_size = r.device == attn::Device::kCpu ? default_draft_vocab_size(vocab) : vocab;
    }
  }
  // auto: activations in the checkpoint's precision, as Hugging Face transformers, vLLM and
  // SGLang compute a bf16 checkpoint; f32 (and f16) checkpoints keep exact f32 products.
  if (flags.matmul_precision == "auto") r.bf16_activations = model.torch_dtype == DType::kBF16;
  r.linear = kernels::cpu::linear_rows_for(r.max_running_requests, r.kv.max_num_batched_tokens, r.linear);
  r.linear.linear.allow_bf16_activations = r.bf16_activations;
  return r;
}

DeviceInfo bind_worker_device(const ResolvedConfig& config, DeviceInfo detected) {
  if (config.device != attn::Device::kCuda) return detected;
  detected.cuda_devices = {bind_cuda_device(config.cuda_device)};
  detected.cuda_status = fmt::format("bound to CUDA device {}", config.cuda_device);
  return detected;
}

void add_attention_flags(CLI::App& app, ServerConfig& f) {
  app.add_option("--device", f.device,
                 "Where the model (serve, generate), attention and the KV cache run: cpu (default), cuda or cuda:N (the worker binds that GPU "
                 "before validating backends and planning memory)");
  app.add_option("--attention-backend", f.attention_backend, "Attention backend for both phases (auto)");
  app.add_option("--prefill-attention-backend", f.prefill_attention_backend, "Prefill attention backend (auto)");
  app.add_option("--decode-attention-backend", f.decode_attention_backend, "Decode attention backend (auto)");
  app.add_option("--attention-backend-policy", f.attention_backend_policy,
                 "How auto chooses: benchmark (fastest validated) or priority")
      ->check(CLI::IsMember({"benchmark", "priority"}));
  app.add_option("--linear-kernel", f.linear_kernel,
                 "CPU linear kernel for every product (auto: validated and timed per weight shape and row class; "
                 "spindle doctor MODEL_DIR lists them)");
  app.add_option("--decode-linear-kernel", f.decode_linear_kernel, "CPU linear kernel for decode rows (auto)");
  app.add_option("--prefill-linear-kernel", f.prefill_linear_kernel, "CPU linear kernel for prefill rows (auto)");
  app.add_option("--linear-kernel-policy", f.linear_kernel_policy,
                 "How auto chooses linear kernels: benchmark (fastest validated), priority, or auto (as --attention-backend-policy)")
      ->check(CLI::IsMember({"auto", "benchmark", "priority"}));
  app.add_flag("--skip-backend-validation", f.skip_backend_validation,
               "Trust backends without validating them (experts only)");
  app.add_flag("--no-backend-cache", f.no_backend_cache, "Ignore and do not write the backend selection cache");
  app.add_option("--backend-validation-timeout", f.backend_validation_timeout_s,
                 "Seconds a validation child may run (30)");
  app.add_option("--kv-cache-dtype", f.kv_cache_dtype,
                 "KV cache dtype: auto (bf16), bf16, fp16 (CUDA backends and the reference), f32 or fp8_e4m3 "
                 "(1 byte per element, scaled per layer and KV head)");
  app.add_option("--kv-cache-scales", f.kv_cache_scales,
                 "fp8_e4m3 KV scales: checkpoint (its k_scale/v_scale tensors, else 1.0) or auto (absmax per layer "
                 "measured on a calibration prompt at start, scale = absmax / 448)");
  app.add_option("--page-size", f.page_size, "Tokens per KV page (16)");
  app.add_option("--threads", f.num_threads, "Worker threads (one per usable core)");
  app.add_option("--matmul-precision", f.matmul_precision,
                 "auto (default): bf16 for checkpoints stored in bf16, exact otherwise; exact: f32 activations "
                 "in every matrix product of F32/BF16 weights (CUDA: bf16 weights times hi/lo-split activations; "
                 "quantized GGUF weights always run int8 kernels, activations rounded per block of 32); bf16: round "
                 "activations to bf16 (oneDNN's AMX/AVX512-BF16 matmul on large CPU batches, cuBLAS bf16 GEMMs "
                 "on CUDA; ~1e-2 relative logit error)")
      ->check(CLI::IsMember({"auto", "exact", "bf16"}));
}

FileMemory resolve_weights_memory(const std::string& flag, attn::Device device, const MemoryInfo& memory) {
  SPINDLE_CHECK(flag == "auto" || flag == "mapped" || flag == "huge-pages",
                "--weights-memory '{}' is not one of: auto, mapped, huge-pages", flag);
  SPINDLE_CHECK(flag != "huge-pages" || device == attn::Device::kCpu,
                "--weights-memory huge-pages is for the CPU device ({} uploads the weights to its memory)",
                attn::device_name(device));
  const bool huge_pages =
      flag == "huge-pages" || (flag == "auto" && device == attn::Device::kCpu && memory.huge_pages_on_advice());
  return huge_pages ? FileMemory::kHugePageCopy : FileMemory::kMapped;
}

WeightQuantization resolve_quantization(const std::string& flag, attn::Device device) {
  SPINDLE_CHECK(flag == "none" || flag == "q8_0" || flag == "fp8", "--quantization '{}' is not one of: none, q8_0, fp8",
                flag);
  if (flag == "none" || flag == "fp8") return WeightQuantization::kNone;  // fp8: ResolvedConfig::quantize_fp8
  SPINDLE_CHECK(device == attn::Device::kCpu,
                "--quantization {} is for the CPU device ({} computes the checkpoint's own dtype; leave the flag out "
                "or use --device cpu)",
                flag, attn::device_name(device));
  return WeightQuantization::kQ8_0;
}

void add_quantization_flag(CLI::App& app, ServerConfig& f) {
  app.add_option("--quantization", f.quantization,
                 "Linear weights of an F32/BF16 checkpoint: none (the checkpoint's dtype), q8_0 (CPU: quantized to "
                 "GGUF Q8_0 at load and run by the int8 kernels, as a Q8_0 GGUF file is) or fp8 (FP8 E4M3 per output "
                 "channel at load, W8A16 on the CPU and CUDA; FP8 checkpoints need no flag)");
  app.add_option("--fp8-prefill-kernel", f.fp8_prefill_kernel,
                 "CUDA, FP8 linear weights, products above 32 rows: fp8_w8a16 (exact bf16 weights, split activations), "
                 "cublaslt_fp8 / cublaslt_fp8_fast_accum (FP8 tensor cores, activations quantized per "
                 "token: W8A8, Hopper and cuBLASLt >= 12.9), or auto (default: each checked against float64 and "
                 "timed at load, the fastest per shape)");
}

std::pair<int, int> resolve_request_limits(const ServerConfig& flags) {
  SPINDLE_CHECK(flags.max_running_requests >= 0 && flags.max_queued_requests >= 0,
                "--max-running-requests {} and --max-queued-requests {} must be positive (0: the default)",
                flags.max_running_requests, flags.max_queued_requests);
  return {flags.max_running_requests > 0 ? flags.max_running_requests : kDefaultMaxRunningRequests,
          flags.max_queued_requests > 0 ? flags.max_queued_requests : kDefaultMaxQueuedRequests};
}

void add_weights_memory_flag(CLI::App& app, ServerConfig& f) {
  app.add_option("--weights-memory", f.weights_memory,
                 "CPU: where the weights live: auto (serve's default: huge-pages where the kernel grants transparent "
                 "huge pages, else mapped; generate's default is mapped), mapped (the checkpoint's file pages, no copy) or huge-pages (a copy in 2 MiB "
                 "pages: faster decode, read at start, its own memory)")
      ->check(CLI::IsMember({"auto", "mapped", "huge-pages"}));
}


void add_scheduler_flags(CLI::App& app, ServerConfig& f) {
  app.add_flag("--disable-cuda-graph", f.disable_cuda_graph, "CUDA: run every step kernel by kernel (no step graphs)");
  CLI::Option* enable = app.add_flag("--enable-overlap-schedule", f.enable_overlap_schedule,
                                     "CUDA: schedule and launch the next decode step while the device runs this one "
                                     "(higher throughput, later first tokens under load; off by default)");
  app.add_flag("--disable-overlap-schedule", f.disable_overlap_schedule,
               "CUDA: collect each step's tokens before scheduling the next (the default; SGLang's name)")
      ->excludes(enable);
  app.add_option("--cuda-graph-max-bs", f.cuda_graph_max_bs,
                 fmt::format("CUDA: decode steps of up to this many sequences replay step graphs (min(running "
                             "requests, {}))",
                             kDefaultCudaGraphMaxBs));
  app.add_option("--max-running-requests", f.max_running_requests,
                 fmt::format("Requests in the running batch at most ({})", kDefaultMaxRunningRequests));
  app.add_option("--max-queued-requests", f.max_queued_requests,
                 fmt::format("Waiting requests before 503 ({})", kDefaultMaxQueuedRequests));
}

}  // namespace spindle::config
