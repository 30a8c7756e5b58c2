// spindle info [MODEL] [--json]: this machine's CPU, memory and CUDA facts, and, given a model
// folder or GGUF file, its architecture, parameter count, weight bytes per type (as stored) and KV
// bytes per token.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include <iostream>
#include <map>
#include <memory>
#include <string>

#include "cli/commands.h"
#include "cli/format.h"
#include "config/switch_config.h"
#include "model/gguf_model_config.h"
#include "model/gguf_weights.h"
#include "model/model_config.h"
#include "model/safetensors.h"
#include "model/weight_map.h"
#include "platform/device_info.h"
#include "platform/openmp_policy.h"
#include "util/build_info.h"
#include "util/switches.h"

namespace spindle::cli {
namespace {

struct InfoArgs {
  std::string model_dir;
  bool json = false;
};

struct ModelFacts {
  ModelConfig config;
  uint64_t num_parameters = 0;  // elements of every stored tensor
  uint64_t num_bytes = 0;       // as stored
  std::map<std::string, uint64_t> bytes_per_type;  // "BF16", "Q4_K", ...
  ExpertStats experts;  // mixtures of experts
  uint64_t kv_bytes_bf16 = 0;
  uint64_t kv_bytes_f32 = 0;
};

ModelFacts read_model_facts(const std::string& dir) {
  ModelFacts facts;
  if (is_gguf_path(dir)) {
    const GgufWeights gguf(dir);  // the config and every tensor checked
    facts.config = gguf.config();
    facts.experts = gguf_expert_stats(facts.config, gguf.file());
    for (const gguf::TensorInfo& t : gguf.file().tensors()) {
      facts.num_parameters += t.num_elements();
      facts.num_bytes += t.size;
      facts.bytes_per_type[std::string(gguf::ggml_type_name(t.type))] += t.size;
    }
  } else {
    facts.config = load_model_config(dir);
    const Checkpoint checkpoint(dir);
    check_weights(facts.config, checkpoint);
    const WeightStats stats = weight_stats(checkpoint);
    facts.num_parameters = stats.num_parameters;
    facts.num_bytes = stats.num_bytes;
    facts.experts = expert_stats(facts.config, checkpoint.tensors());
    for (const auto& [dtype, n] : stats.bytes_per_dtype) facts.bytes_per_type[std::string(dtype_name(dtype))] = n;
  }
  facts.kv_bytes_bf16 = kv_bytes_per_token(facts.config, DType::kBF16);
  facts.kv_bytes_f32 = kv_bytes_per_token(facts.config, DType::kF32);
  return facts;
}

nlohmann::json model_json(const ModelFacts& m) {
  const ModelConfig& c = m.config;
  nlohmann::json bytes = nlohmann::json::object();
  for (const auto& [type, n] : m.bytes_per_type) bytes[type] = n;
  nlohmann::json moe = nullptr;
  if (c.moe.enabled()) {
    moe = {{"num_experts", c.moe.num_experts},
           {"num_experts_per_tok", c.moe.num_experts_per_tok},
           {"moe_intermediate_size", c.moe.moe_intermediate_size},
           {"shared_expert_intermediate_size", c.moe.shared_expert_intermediate_size},
           {"norm_topk_prob", c.moe.norm_topk_prob},
           {"expert_bytes", m.experts.bytes},
           {"active_expert_bytes_per_token", m.experts.active_bytes}};
  }
  return {{"architecture", architecture_name(c.architecture)},
          {"num_parameters", m.num_parameters},
          {"num_active_parameters", active_parameter_count(c)},
          {"moe", moe},
          {"weight_bytes", m.num_bytes},
          {"weight_bytes_per_dtype", bytes},
          {"num_hidden_layers", c.num_hidden_layers},
          {"hidden_size", c.hidden_size},
          {"intermediate_size", c.intermediate_size},
          {"num_attention_heads", c.num_attention_heads},
          {"num_key_value_heads", c.num_key_value_heads},
          {"head_dim", c.head_dim},
          {"vocab_size", c.vocab_size},
          {"max_position_embeddings", c.max_position_embeddings},
          {"torch_dtype", dtype_name(c.torch_dtype)},
          {"kv_bytes_per_token", {{"BF16", m.kv_bytes_bf16}, {"F32", m.kv_bytes_f32}}}};
}

void print_machine(const DeviceInfo& d) {
  fmt::print("Machine\n");
  fmt::print("  CPU         {} ({}), {} usable logical cores\n", d.cpu.model_name, d.cpu.vendor,
             d.cpu.num_logical_cores);
  for (const auto& f : d.cpu.features) {
    const std::string state = f.usable ? "yes" : f.present ? "present, unusable: " + f.reason : "no";
    fmt::print("  {:<12}{}\n", f.name, state);
  }
  const MemoryInfo& m = d.memory;
  fmt::print("  Memory      {} usable (bound: {}); total {}, MemAvailable {}\n", format_bytes(m.usable_bytes),
             m.bound, format_bytes(m.total_bytes), format_bytes(m.mem_available_bytes));
  if (m.cgroup_limit_bytes) {
    fmt::print("  cgroup      {} limit {}, usage {}\n", m.cgroup_version, format_bytes(*m.cgroup_limit_bytes),
               format_bytes(m.cgroup_usage_bytes.value_or(0)));
  } else {
    fmt::print("  cgroup      {} (no memory limit)\n", m.cgroup_version);
  }
  if (d.cuda_devices.empty()) {
    fmt::print("  CUDA        none: {}\n", d.cuda_status);
  }
  for (const auto& g : d.cuda_devices) {
    fmt::print("  CUDA {}      {} (sm_{}{}), {} SMs, {} total, {} free\n", g.index, g.name, g.cc_major, g.cc_minor,
               g.num_sms, format_bytes(g.total_bytes), format_bytes(g.free_bytes));
  }
  fmt::print("  OpenMP      {}\n", openmp_wait_policy_summary());
  fmt::print("  Fingerprint {}\n", device_fingerprint(d.cpu));
}

void print_model(const std::string& dir, const ModelFacts& m) {
  const ModelConfig& c = m.config;
  fmt::print("Model {}\n", dir);
  fmt::print("  Architecture  {}\n", architecture_name(c.architecture));
  fmt::print("  Parameters    {} ({})\n", m.num_parameters, format_count(m.num_parameters));
  fmt::print("  Layers        {}, hidden {}, intermediate {}, vocab {}\n", c.num_hidden_layers, c.hidden_size,
             c.intermediate_size, c.vocab_size);
  if (c.moe.enabled()) {
    const uint64_t active = active_parameter_count(c);
    fmt::print("  Experts       {} per sparse layer, top {}, width {}{}; {} of the weights, {} read per token\n",
               c.moe.num_experts, c.moe.num_experts_per_tok, c.moe.moe_intermediate_size,
               c.moe.shared_expert_intermediate_size > 0
                   ? fmt::format(", shared expert {}", c.moe.shared_expert_intermediate_size)
                   : "",
               format_bytes(m.experts.bytes), format_bytes(m.experts.active_bytes));
    fmt::print("  Active        {} ({}) parameters per token\n", active, format_count(active));
  }
  fmt::print("  Attention     {} heads, {} KV heads, head_dim {}\n", c.num_attention_heads,
             c.num_key_value_heads, c.head_dim);
  fmt::print("  Weights       {}", format_bytes(m.num_bytes));
  for (const auto& [type, n] : m.bytes_per_type) fmt::print(", {} {}", type, format_bytes(n));
  fmt::print("\n  KV per token  {} (bf16), {} (f32)\n", format_bytes(m.kv_bytes_bf16), format_bytes(m.kv_bytes_f32));
}

// The environment switches (util/switches.h): every declared variable not at its default, and
// the SPINDLE_* variables the registry does not declare (Spindle ignores them).
struct SwitchFacts {
  std::vector<std::pair<std::string, std::string>> non_default;
  std::vector<std::string> undeclared;
};

SwitchFacts read_switch_facts() {
  return {non_default_switches(switches()), config::resolve(read_process_environment()).undeclared};
}

nlohmann::json switches_json(const SwitchFacts& s) {
  nlohmann::json set = nlohmann::json::object();
  for (const auto& [name, value] : s.non_default) set[name] = value;
  return {{"not_default", set}, {"undeclared", s.undeclared}};
}

void print_switches(const SwitchFacts& s) {
  fmt::print("Environment\n");
  if (s.non_default.empty()) fmt::print("  every declared variable at its default\n");
  for (const auto& [name, value] : s.non_default) {
    const SwitchDeclaration* d = find_switch_declaration(name);
    fmt::print("  {}={}  ({}: {})\n", name, value, switch_kind_name(d->kind), d->why);
  }
  for (const std::string& name : s.undeclared) fmt::print("  {}  undeclared: ignored\n", name);
}

void run_info(const InfoArgs& args) {
  const DeviceInfo device = detect_device_info();
  std::unique_ptr<ModelFacts> model;
  if (!args.model_dir.empty()) model = std::make_unique<ModelFacts>(read_model_facts(args.model_dir));
  if (args.json) {
    nlohmann::json j = {{"build_id", build_id()}, {"machine", to_json(device)},
                        {"device_fingerprint", device_fingerprint(device.cpu)},
                        {"openmp_wait_policy", openmp_wait_policy_summary()},
                        {"environment", switches_json(read_switch_facts())}};
    if (model) j["model"] = model_json(*model);
    std::cout << j.dump(2) << std::endl;
    return;
  }
  fmt::print("Spindle {}\n", build_id());
  print_machine(device);
  print_switches(read_switch_facts());
  if (model) print_model(args.model_dir, *model);
}

}  // namespace

void add_info_command(CLI::App& app) {
  auto args = std::make_shared<InfoArgs>();
  auto* cmd = app.add_subcommand("info", "Show this machine's CPU, memory and CUDA facts, the environment switches, and a model's sizes");
  cmd->add_option("model_dir", args->model_dir, "Hugging Face model folder (config.json + safetensors) or GGUF file");
  cmd->add_flag("--json", args->json, "Print JSON");
  cmd->callback([args] { run_info(*args); });
}

}  // namespace spindle::cli
