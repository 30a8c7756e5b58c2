// spindle doctor [MODEL_DIR | --heads H --kv-heads K --head-dim D] [--kv-cache-dtype ...] [--json]:
// one row per attention backend and phase: available or why not, validation error, speed, chosen.
// With --dp-size N: the same per data-parallel rank, each selected on its own device as serve binds
// it (CPU: pinned to the rank's core share, so the validation children time that share; CUDA: the
// rank's GPU). On the CPU with MODEL_DIR (or --linear-shape): the linear kernels' table too, per
// weight shape: available or why not, validation, microseconds per product at each row count, and
// the row counts each kernel won (kernels/cpu/select).
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include <iostream>
#include <memory>
#include <optional>
#include <string>

#include "cli/commands.h"
#include "config/server_config.h"
#include "startup/backend_selection.h"
#include "startup/linear_selection.h"
#include "model/model_config.h"
#include "platform/cpu_topology.h"
#include "platform/device_info.h"
#include "util/error.h"
#include "util/thread_pool.h"

namespace spindle::cli {
namespace {

struct DoctorArgs {
  std::string model_dir;
  std::vector<std::string> linear_shapes;  // OUTxIN:DTYPE, without a model folder
  config::ModelAttentionDims dims;
  config::ServerConfig flags;
  int dp_size = 1;
  bool json = false;
};

config::ModelAttentionDims dims_from(const DoctorArgs& a) {
  if (!a.model_dir.empty()) {
    const ModelConfig m = load_model_config(a.model_dir);
    return {m.num_attention_heads, m.num_key_value_heads, m.head_dim};
  }
  if (a.dims.num_heads == 0 && a.dims.head_dim == 0) {
    // No model: the Llama-3-8B attention shape, a common GQA layout.
    fmt::print(stderr, "doctor: no MODEL_DIR or --heads/--head-dim given; using 32 heads, 8 KV heads, head_dim 128\n");
    return {32, 8, 128};
  }
  SPINDLE_CHECK(a.dims.num_heads > 0 && a.dims.head_dim > 0,
                "doctor needs both --heads and --head-dim (or a MODEL_DIR)");
  config::ModelAttentionDims d = a.dims;
  if (d.num_kv_heads == 0) d.num_kv_heads = d.num_heads;
  return d;
}

std::string validation_cell(const attn::BackendRow& row) {
  if (!row.validation) return row.unsupported_reasons.empty() ? "-" : "";
  const auto& v = *row.validation;
  if (v.status != CheckStatus::kPass) return std::string(check_status_name(v.status));
  const double err = row.phase == attn::Phase::kPrefill ? v.report.prefill_max_abs_error : v.report.decode_max_abs_error;
  return fmt::format("pass {:.1e}", err);
}

// The timed rate behind a row's speed: prefill GFLOP/s (causal), decode GB/s of KV read.
std::string rate_cell(const attn::BackendRow& row) {
  if (!row.validation || !row.validation->report.timed) return "-";
  const auto& report = row.validation->report;
  if (row.phase == attn::Phase::kPrefill) {
    return report.prefill_gflops >= 1000 ? fmt::format("{:.1f} TFLOP/s", report.prefill_gflops / 1000)
                                         : fmt::format("{:.1f} GFLOP/s", report.prefill_gflops);
  }
  if (report.decode_latency_tokens_per_s > 0) {  // the batch-1 step, the other half of the decode speed
    return fmt::format("{:.1f} GB/s KV, batch 1 {:.1f} us", report.decode_kv_gb_per_s,
                       1e6 / report.decode_latency_tokens_per_s);
  }
  return fmt::format("{:.1f} GB/s KV", report.decode_kv_gb_per_s);
}

std::string device_line(const config::ResolvedConfig& rc, const DeviceInfo& device) {
  if (rc.device == attn::Device::kCuda && !device.cuda_devices.empty()) {
    const CudaDeviceInfo& d = device.cuda_devices.front();
    return fmt::format("cuda:{} {} (compute capability {}.{}, {} SMs, {:.1f} of {:.1f} GiB free)", d.index, d.name,
                       d.cc_major, d.cc_minor, d.num_sms, d.free_bytes / double(1ull << 30),
                       d.total_bytes / double(1ull << 30));
  }
  return fmt::format("cpu {} ({} threads)", device.cpu.model_name, rc.num_threads);
}

void print_table(const config::ResolvedConfig& rc, const DeviceInfo& device, const attn::AttentionSelection& s) {
  fmt::print("Device: {}\n", device_line(rc, device));
  fmt::print("Attention backends for {}{}\n", rc.attention_shape.to_string(), s.from_cache ? " (from cache)" : "");
  fmt::print("{:<15} {:<8} {:<5} {:<16} {:>12} {:>18}  {:<6} {}\n", "backend", "phase", "avail", "validation",
             "tokens/s", "rate", "chosen", "why");
  for (const auto& r : s.rows) {
    const bool available = r.unsupported_reasons.empty();
    const std::string speed = r.speed > 0 ? fmt::format("{:.0f}", r.speed) : "-";
    const std::string why = available ? r.why : fmt::format("{}", fmt::join(r.unsupported_reasons, "; "));
    fmt::print("{:<15} {:<8} {:<5} {:<16} {:>12} {:>18}  {:<6} {}\n", r.backend, attn::phase_name(r.phase),
               available ? "yes" : "no", validation_cell(r), speed, rate_cell(r), r.chosen ? "*" : "", why);
  }
  for (const auto& r : s.rows) {
    if (r.validation && r.validation->status != CheckStatus::kPass) {
      fmt::print("  {} {}: {}\n", r.backend, check_status_name(r.validation->status), r.validation->detail);
    }
  }
  fmt::print("Chosen: prefill {}, decode {}\n", s.prefill_backend, s.decode_backend);
  for (const auto& w : s.warnings) fmt::print("WARNING: {}\n", w);
}

// --dp-size N: every rank's selection, on its device (as serve binds it).
void run_doctor_per_rank(const DoctorArgs& a, const DeviceInfo& detected, config::ResolvedConfig rc) {
  const bool cuda = rc.device == attn::Device::kCuda;
  const std::vector<int> cpus = usable_cpus();
  const config::ResolvedDpConfig dp = config::resolve_dp(a.flags.dp, a.dp_size, static_cast<int>(cpus.size()),
                                                         a.flags.num_threads, cuda, rc.cuda_device,
                                                         static_cast<int>(detected.cuda_devices.size()));
  std::vector<CpuShare> shares;
  if (!cuda) {
    config::check_cpu_rank_layout(a.dp_size, static_cast<int>(cpus.size()), a.flags.num_threads);
    shares = split_cpu_shares(cpus, read_cpu_numa_nodes(), a.dp_size);
  }
  rc.num_threads = dp.threads_per_rank;
  nlohmann::json ranks = nlohmann::json::array();
  for (int r = 0; r < a.dp_size; ++r) {
    config::ResolvedConfig rank_rc = rc;
    std::string where;
    if (cuda) {
      rank_rc.cuda_device = dp.base_gpu_id + r / dp.ranks_per_gpu;
      where = fmt::format("CUDA device {}", rank_rc.cuda_device);
    } else {
      pin_current_thread(shares[static_cast<size_t>(r)].cpus);
      where = fmt::format("CPUs {}", fmt::join(shares[static_cast<size_t>(r)].cpus, ","));
    }
    const DeviceInfo device = config::bind_worker_device(rank_rc, detected);
    attn::AttentionSelection s;
    try {
      s = startup::select_attention(rank_rc, device);
    } catch (...) {
      if (!cuda) pin_current_thread(cpus);
      throw;
    }
    if (!cuda) pin_current_thread(cpus);
    if (a.json) {
      nlohmann::json j = attn::to_json(s);
      j["dp_rank"] = r;
      j["where"] = where;
      j["device"] = device_line(rank_rc, device);
      ranks.push_back(std::move(j));
    } else {
      fmt::print("{}DP rank {} ({}):\n", r == 0 ? "" : "\n", r, where);
      print_table(rank_rc, device, s);
    }
  }
  if (a.json) {
    std::cout << nlohmann::json{{"shape", rc.attention_shape.to_string()}, {"dp_size", a.dp_size}, {"ranks", ranks}}.dump(2)
              << std::endl;
  }
}

std::string linear_validation_cell(const kernels::cpu::LinearKernelRow& r) {
  if (!r.outcome) return r.unsupported_reasons.empty() ? "-" : "";
  if (r.outcome->status != CheckStatus::kPass)
    return std::string(check_status_name(r.outcome->status));
  if (r.outcome->report.end_to_end_error > 0) {  // int8: and against the unquantized x
    return fmt::format("pass {:.1e}/{:.0e}", r.outcome->report.max_error, r.outcome->report.end_to_end_error);
  }
  return fmt::format("pass {:.1e}", r.outcome->report.max_error);
}

// One row per kernel and shape: microseconds per product at each measured row count.
void print_linear_table(const kernels::cpu::LinearSelection& s) {
  std::vector<int64_t> rows = s.decode_rows;
  rows.push_back(s.prefill_rows);
  fmt::print("\nCPU linear kernels{} (validation: max error / sum|x w|, int8: over the same quantized x / over x; us per "
             "product at each row count; decode rows up to {}, prefill {})\n",
             s.from_cache ? " (from cache)" : "", s.decode_rows.back(), s.prefill_rows);
  std::string header = fmt::format("{:<12} {:<18} {:<5} {:<14}", "kernel", "shape", "avail", "validation");
  for (int64_t r : rows) header += fmt::format(" {:>9}", r);
  fmt::print("{}  {}\n", header, "chosen at rows / why not");
  for (const auto& r : s.rows) {
    std::string line = fmt::format("{:<12} {:<18} {:<5} {:<14}", r.kernel, r.shape.to_string(),
                                   r.unsupported_reasons.empty() ? "yes" : "no", linear_validation_cell(r));
    for (int64_t n : rows) {
      const double sec = r.outcome ? r.outcome->report.seconds_at(n) : 0;
      line += sec > 0 ? fmt::format(" {:>9.1f}", sec * 1e6) : fmt::format(" {:>9}", "-");
    }
    std::string why = fmt::format("{}", fmt::join(r.unsupported_reasons, "; "));
    if (!r.chosen_rows.empty()) why = fmt::format("* {}", fmt::join(r.chosen_rows, ","));
    if (r.outcome && r.outcome->status != CheckStatus::kPass) why = r.outcome->detail;
    fmt::print("{}  {}\n", line, why);
  }
  for (const std::string& line : startup::describe_linear_choices(s)) fmt::print("Chosen: {}\n", line);
}

// The linear kernels' selection for MODEL_DIR's weight shapes (or --linear-shape); empty: none asked.
std::optional<kernels::cpu::LinearSelection> select_linear(const DoctorArgs& a, const DeviceInfo& detected,
                                                           const DeviceInfo& device) {
  std::vector<kernels::cpu::LinearShape> shapes;
  config::ResolvedConfig rc;
  for (const auto& text : a.linear_shapes) shapes.push_back(kernels::cpu::parse_linear_shape(text));
  if (!a.model_dir.empty()) {
    const ModelConfig m = load_model_config(a.model_dir);
    rc = config::resolve(a.flags, detected, m);
    const auto model_shapes = startup::model_linear_shapes(m);
    shapes.insert(shapes.begin(), model_shapes.begin(), model_shapes.end());
  } else {
    if (shapes.empty()) return std::nullopt;
    rc = config::resolve(a.flags, detected, dims_from(a));
    rc.linear = kernels::cpu::linear_rows_for(rc.max_running_requests, config::kDefaultMaxNumBatchedTokens, rc.linear);
    rc.linear.linear.allow_bf16_activations = a.flags.matmul_precision != "exact";
  }
  if (rc.device != attn::Device::kCpu) return std::nullopt;
  startup::LinearKernelChooser chooser(rc, device);
  chooser.select(shapes);
  return chooser.selection();
}

void run_doctor(const DoctorArgs& a) {
  const DeviceInfo detected = detect_device_info();
  const config::ResolvedConfig rc = config::resolve(a.flags, detected, dims_from(a));
  SPINDLE_CHECK(a.dp_size >= 1, "--dp-size {} must be at least 1", a.dp_size);
  if (a.dp_size > 1) {
    run_doctor_per_rank(a, detected, rc);
    return;
  }
  const DeviceInfo device = config::bind_worker_device(rc, detected);
  const attn::AttentionSelection s = startup::select_attention(rc, device);
  const auto linear = select_linear(a, detected, device);
  if (a.json) {
    nlohmann::json j = attn::to_json(s);
    j["shape"] = rc.attention_shape.to_string();
    j["device"] = device_line(rc, device);
    if (linear) j["linear"] = kernels::cpu::to_json(*linear);
    std::cout << j.dump(2) << std::endl;
    return;
  }
  print_table(rc, device, s);
  if (linear) print_linear_table(*linear);
}

}  // namespace

void add_doctor_command(CLI::App& app) {
  auto args = std::make_shared<DoctorArgs>();
  auto* cmd = app.add_subcommand("doctor", "Validate, time and choose the attention backends for a model's shape");
  cmd->add_option("model_dir", args->model_dir, "Hugging Face model folder (reads config.json)");
  cmd->add_option("--heads", args->dims.num_heads, "Query heads (without a model folder)");
  cmd->add_option("--kv-heads", args->dims.num_kv_heads, "KV heads (default: --heads)");
  cmd->add_option("--head-dim", args->dims.head_dim, "Head dimension");
  cmd->add_flag("--json", args->json, "Print JSON");
  cmd->add_option("--linear-shape", args->linear_shapes,
                  "A CPU linear weight shape OUTxIN:TYPE (F32, BF16, Q4_K, ...) to select kernels for, beside "
                  "MODEL_DIR's (repeatable)");
  config::add_attention_flags(*cmd, args->flags);
  cmd->add_option("--dp-size", args->dp_size, "Data-parallel ranks: select per rank, on its device as serve binds it (1)");
  cmd->add_option("--base-gpu-id", args->flags.dp.base_gpu_id, "CUDA: the GPU of DP rank 0");
  cmd->add_option("--dp-ranks-per-gpu", args->flags.dp.dp_ranks_per_gpu, "CUDA: DP ranks sharing one GPU");
  cmd->callback([args] { run_doctor(*args); });
}

}  // namespace spindle::cli
