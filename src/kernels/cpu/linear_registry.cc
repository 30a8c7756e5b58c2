#include "kernels/cpu/linear_registry.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <csignal>
#include <map>

#include "kernels/cpu/linear_kernels.h"
#include "platform/cpu_info.h"
#include "util/error.h"
#include "util/switches.h"

namespace spindle::kernels::cpu {
namespace {

const CpuInfo& this_cpu() {
  static const CpuInfo info = detect_cpu_info();
  return info;
}

// "" when usable; else why not.
std::string feature_reason(const CpuInfo& cpu, std::string_view name) {
  const CpuFeature* f = cpu.find(name);
  if (f == nullptr || !f->present) return fmt::format("CPU lacks {}", name);
  if (!f->usable) return fmt::format("{} present but unusable: {}", name, f->reason);
  return {};
}

void add_features(std::vector<std::string>& reasons, const CpuInfo& cpu, std::initializer_list<std::string_view> names) {
  for (std::string_view n : names) {
    if (std::string r = feature_reason(cpu, n); !r.empty()) reasons.push_back(std::move(r));
  }
}

void add_bf16_only(std::vector<std::string>& reasons, const LinearShape& shape) {
  if (shape.quant || shape.dtype != DType::kBF16)
    reasons.push_back(fmt::format("serves bf16 weights only (weight is {})", shape.type_name()));
}

void add_plain_only(std::vector<std::string>& reasons, const LinearShape& shape) {
  if (shape.quant) reasons.push_back(fmt::format("serves F32 / BF16 weights only (weight is {})", shape.type_name()));
}

void add_bf16_activations(std::vector<std::string>& reasons, const LinearOptions& options) {
  if (!options.allow_bf16_activations)
    reasons.push_back("rounds activations to bf16, which exact matrix products (--matmul-precision exact, or an f32 checkpoint) forbid");
}

using ReasonsFn = std::function<std::vector<std::string>(const CpuInfo&, const LinearShape&, const LinearOptions&)>;

ReasonsFn needs(std::initializer_list<std::string_view> features, bool bf16_weights, bool bf16_activations) {
  std::vector<std::string_view> f(features);
  return [f, bf16_weights, bf16_activations](const CpuInfo& cpu, const LinearShape& shape, const LinearOptions& o) {
    std::vector<std::string> reasons;
    for (std::string_view n : f) add_features(reasons, cpu, {n});
    if (bf16_weights) {
      add_bf16_only(reasons, shape);
    } else {
      add_plain_only(reasons, shape);
    }
    if (bf16_activations) add_bf16_activations(reasons, o);
    return reasons;
  };
}

std::vector<std::string> onednn_bf16_reasons(const CpuInfo& cpu, const LinearShape& shape, const LinearOptions& o) {
  std::vector<std::string> reasons;
  if (!cpu.has("amx_bf16") && !cpu.has("avx512_bf16")) reasons.push_back("CPU has neither AMX-BF16 nor AVX512-BF16");
  add_bf16_only(reasons, shape);
  add_bf16_activations(reasons, o);
  if (reasons.empty()) {
    // oneDNN's own answer (a reference-only bf16 matmul is no candidate).
    const LinearWeight probe{nullptr, shape.dtype, shape.out_features, shape.in_features};
    if (std::string r = onednn_linear_unsupported_reason(probe, true); !r.empty()) reasons.push_back(std::move(r));
  }
  return reasons;
}

// SPINDLE_LINEAR_FAULT's mode for `name`: "", "crash" or "wrong".
std::string fault_for(std::string_view name) {
  std::string_view spec = switches().linear_fault;
  while (!spec.empty()) {
    const size_t comma = spec.find(',');
    const std::string_view item = spec.substr(0, comma);
    spec = comma == std::string_view::npos ? std::string_view{} : spec.substr(comma + 1);
    const size_t eq = item.find('=');
    if (eq != std::string_view::npos && item.substr(0, eq) == name) return std::string(item.substr(eq + 1));
  }
  return {};
}

class FaultyLinear final : public LinearKernel {
 public:
  FaultyLinear(std::unique_ptr<LinearKernel> inner, std::string mode) : inner_(std::move(inner)), mode_(std::move(mode)) {}
  const char* name() const override { return inner_->name(); }
  void forward(const float* x, int64_t m, float* y, ThreadPool* pool, const float* bias) override {
    if (mode_ == "crash") {
      std::signal(SIGILL, SIG_DFL);
      std::raise(SIGILL);  // what an instruction this CPU lacks does
    }
    inner_->forward(x, m, y, pool, bias);
    const int64_t n = m * out_features_;
    for (int64_t i = 0; i < n; ++i) y[i] += 0.5f;
  }
  void set_out_features(int64_t n) { out_features_ = n; }

 private:
  std::unique_ptr<LinearKernel> inner_;
  std::string mode_;
  int64_t out_features_ = 0;
};

// min_rows -> kernel (equal names share one instance).
class RowTableLinear final : public LinearKernel {
 public:
  RowTableLinear(std::vector<int64_t> min_rows, std::vector<std::shared_ptr<LinearKernel>> kernels, std::string name)
      : min_rows_(std::move(min_rows)), kernels_(std::move(kernels)), name_(std::move(name)) {}
  const char* name() const override { return name_.c_str(); }
  void forward(const float* x, int64_t m, float* y, ThreadPool* pool, const float* bias) override {
    forward_choosing_for(x, m, m, y, pool, bias);
  }
  void forward_choosing_for(const float* x, int64_t m, int64_t choose_rows, float* y, ThreadPool* pool,
                            const float* bias) override {
    size_t i = 0;
    while (i + 1 < min_rows_.size() && choose_rows >= min_rows_[i + 1]) ++i;
    kernels_[i]->forward(x, m, y, pool, bias);
  }

 private:
  std::vector<int64_t> min_rows_;
  std::vector<std::shared_ptr<LinearKernel>> kernels_;
  std::string name_;
};

}  // namespace

std::string LinearShape::type_name() const {
  return quant ? std::string(quant_type_name(*quant)) : std::string(dtype_name(dtype));
}

std::string LinearShape::to_string() const { return fmt::format("{}x{}:{}", out_features, in_features, type_name()); }

LinearShape linear_shape_of(const LinearWeight& w) {
  if (w.quantized()) return {w.out_features, w.in_features, DType::kF32, w.quant->type};
  return {w.out_features, w.in_features, w.dtype, std::nullopt};
}

namespace {

std::optional<QuantType> parse_quant_type(std::string_view text) {
  for (QuantType t : quant_types()) {
    if (quant_type_name(t) == text) return t;
  }
  return std::nullopt;
}

}  // namespace

LinearShape parse_linear_shape(std::string_view text) {
  const size_t x = text.find('x'), colon = text.find(':');
  LinearShape s;
  bool ok = x != std::string_view::npos && colon != std::string_view::npos && x < colon;
  if (ok) {
    const std::string out(text.substr(0, x)), in(text.substr(x + 1, colon - x - 1));
    char* end = nullptr;
    s.out_features = std::strtoll(out.c_str(), &end, 10);
    ok = !out.empty() && *end == '\0';
    s.in_features = std::strtoll(in.c_str(), &end, 10);
    ok = ok && !in.empty() && *end == '\0' && s.out_features > 0 && s.in_features > 0;
    const auto dtype = parse_dtype(text.substr(colon + 1));
    s.quant = parse_quant_type(text.substr(colon + 1));
    ok = ok && (s.quant || (dtype.has_value() && (*dtype == DType::kF32 || *dtype == DType::kBF16)));
    if (ok && !s.quant) s.dtype = *dtype;
    if (ok && s.quant) s.dtype = DType::kF32;
  }
  SPINDLE_CHECK(ok, "linear shape '{}' is not OUTxIN:TYPE (positive sizes; F32, BF16 or a quantized type such as Q4_K)",
                text);
  return s;
}

void LinearRegistry::register_kernel(LinearKernelDescriptor d) {
  SPINDLE_CHECK(!d.name.empty(), "linear kernel descriptor without a name");
  SPINDLE_CHECK(!contains(d.name) && d.name != "reference" && d.name != "auto",
                "linear kernel '{}' registered twice or reserved", d.name);
  SPINDLE_CHECK(d.factory && d.unsupported_reasons, "linear kernel '{}' lacks a factory or unsupported_reasons", d.name);
  descriptors_.push_back(std::move(d));
}

bool LinearRegistry::contains(std::string_view name) const {
  return std::any_of(descriptors_.begin(), descriptors_.end(), [&](const auto& d) { return d.name == name; });
}

const LinearKernelDescriptor& LinearRegistry::get(std::string_view name) const {
  for (const auto& d : descriptors_) {
    if (d.name == name) return d;
  }
  SPINDLE_FAIL("unknown linear kernel '{}'; registered kernels: {}", name, fmt::join(names(), ", "));
}

std::vector<std::string> LinearRegistry::names() const {
  std::vector<std::string> out;
  for (const auto& d : descriptors_) out.push_back(d.name);
  return out;
}

void register_cpu_linear_kernels(LinearRegistry& r) {
  r.register_kernel({"avx2", "AVX2+FMA dot products from the stored weights, f32", false, true, 20, 5,
                     needs({"avx2", "fma"}, false, false), [](const LinearWeight& w) { return make_avx2_linear(w); }});
  r.register_kernel({"avx512", "AVX-512 dot products from the stored weights, f32", false, true, 40, 10,
                     needs({"avx512f", "avx512bw", "avx512vl"}, false, false),
                     [](const LinearWeight& w) { return make_avx512_linear(w); }});
  r.register_kernel({"avx512_bf16", "AVX512-BF16 dot products, x rounded to bf16", true, true, 50, 20,
                     needs({"avx512f", "avx512bw", "avx512vl", "avx512_bf16"}, true, true),
                     [](const LinearWeight& w) { return make_avx512_bf16_linear(w); }});
  r.register_kernel({"amx", "AMX-BF16 tiles, x split in three bf16 parts (f32-accurate)", false, true, 30, 30,
                     needs({"avx512f", "avx512bw", "avx512vl", "avx512_bf16", "amx_tile", "amx_bf16"}, true, false),
                     [](const LinearWeight& w) { return make_amx_linear(w, false); }});
  r.register_kernel({"amx_bf16", "AMX-BF16 tiles, x rounded to bf16", true, true, 35, 60,
                     needs({"avx512f", "avx512bw", "avx512vl", "avx512_bf16", "amx_tile", "amx_bf16"}, true, true),
                     [](const LinearWeight& w) { return make_amx_linear(w, true); }});
  r.register_kernel({"onednn_f32", "oneDNN f32 matmul (bf16 weights widened block by block)", false, false, 0, 40,
                     needs({}, false, false), [](const LinearWeight& w) { return make_onednn_linear(w, false); }});
  r.register_kernel({"onednn_bf16", "oneDNN bf16 matmul, x rounded to bf16", true, false, 5, 50, onednn_bf16_reasons,
                     [](const LinearWeight& w) { return make_onednn_linear(w, true); }});
}

// The int8 kernels (quant_linear.h): every QuantType on each ISA; rows computed alike whatever m
// (amx_int8 computes avx512_vnni's integers and f32 epilogue).
void register_quant_kernels(LinearRegistry& r) {
  struct Entry {
    const char* name;
    QuantKernelIsa isa;
    int decode_priority, prefill_priority;
  };
  for (const Entry& e : {Entry{"int8_avx2", QuantKernelIsa::kAvx2, 20, 20},
                         Entry{"int8_avx_vnni", QuantKernelIsa::kAvxVnni, 30, 30},
                         Entry{"int8_avx512_vnni", QuantKernelIsa::kAvx512Vnni, 40, 40},
                         Entry{"amx_int8", QuantKernelIsa::kAmxInt8, 10, 50}}) {
    const QuantKernelIsa isa = e.isa;
    r.register_kernel({e.name, fmt::format("int8 dot products of per-block quantized x ({})", quant_kernel_isa_name(isa)),
                       false, true, e.decode_priority, e.prefill_priority,
                       [isa](const CpuInfo& cpu, const LinearShape& shape, const LinearOptions&) {
                         std::vector<std::string> reasons = quant_linear_unsupported_reasons(isa, cpu);
                         if (!shape.quant)
                           reasons.push_back(fmt::format("serves quantized weights only (weight is {})", shape.type_name()));
                         return reasons;
                       },
                       [isa](const LinearWeight& w) { return make_quant_linear_kernel(w, isa); }});
  }
}

LinearRegistry& linear_registry() {
  static LinearRegistry registry = [] {
    LinearRegistry r;
    register_cpu_linear_kernels(r);
    register_quant_kernels(r);
    return r;
  }();
  return registry;
}

std::vector<std::string> linear_unsupported_reasons(const LinearKernelDescriptor& d, const LinearShape& shape,
                                                    const LinearOptions& options) {
  return d.unsupported_reasons(this_cpu(), shape, options);
}

std::unique_ptr<LinearKernel> create_linear_kernel(std::string_view name, const LinearWeight& weight,
                                                   const LinearOptions& options, const LinearRegistry& registry) {
  if (!weight.quantized()) check_linear_weight(weight);
  const LinearKernelDescriptor& d = registry.get(name);
  const auto reasons = linear_unsupported_reasons(d, linear_shape_of(weight), options);
  SPINDLE_CHECK(reasons.empty(), "linear kernel '{}' unavailable for {}: {}", name, linear_shape_of(weight).to_string(),
                fmt::join(reasons, "; "));
  auto kernel = d.factory(weight);
  if (std::string mode = fault_for(name); !mode.empty()) {
    SPINDLE_CHECK(mode == "crash" || mode == "wrong", "SPINDLE_LINEAR_FAULT: unknown mode '{}' for {} (crash, wrong)",
                  mode, name);
    auto faulty = std::make_unique<FaultyLinear>(std::move(kernel), mode);
    faulty->set_out_features(weight.out_features);
    return faulty;
  }
  return kernel;
}

std::unique_ptr<LinearKernel> make_row_table_linear(const LinearWeight& weight, const std::vector<LinearRowChoice>& rows,
                                                    const LinearOptions& options, const LinearRegistry& registry) {
  SPINDLE_CHECK(!rows.empty() && rows.front().min_rows == 1, "linear row table must start at 1 row");
  for (size_t i = 1; i < rows.size(); ++i) {
    SPINDLE_CHECK(rows[i].min_rows > rows[i - 1].min_rows, "linear row table is not sorted by rows");
  }
  if (rows.size() == 1) return create_linear_kernel(rows.front().kernel, weight, options, registry);
  std::map<std::string, std::shared_ptr<LinearKernel>> made;
  std::vector<int64_t> min_rows;
  std::vector<std::shared_ptr<LinearKernel>> kernels;
  std::vector<std::string> parts;
  for (const LinearRowChoice& c : rows) {
    auto& k = made[c.kernel];
    if (!k) k = create_linear_kernel(c.kernel, weight, options, registry);
    min_rows.push_back(c.min_rows);
    kernels.push_back(k);
    parts.push_back(fmt::format("{}:{}", k->name(), c.min_rows));
  }
  return std::make_unique<RowTableLinear>(std::move(min_rows), std::move(kernels), fmt::format("{}", fmt::join(parts, ",")));
}

// ---- linear.h's entry points over the registry --------------------------------------------------

namespace {

// The available kernel of highest priority for a row class; throws when none is.
std::string best_by_priority(const LinearShape& shape, const LinearOptions& options, bool decode) {
  const LinearKernelDescriptor* best = nullptr;
  for (const auto& d : linear_registry().list()) {
    if (!linear_unsupported_reasons(d, shape, options).empty() || (decode && !d.row_independent)) continue;
    const int p = decode ? d.decode_priority : d.prefill_priority;
    if (!best || p > (decode ? best->decode_priority : best->prefill_priority)) best = &d;
  }
  SPINDLE_CHECK(best != nullptr, "no linear kernel can run {} on this CPU", shape.to_string());
  return best->name;
}

}  // namespace

std::unique_ptr<LinearKernel> make_linear_kernel(const LinearWeight& weight, const LinearOptions& options) {
  if (!weight.quantized()) check_linear_weight(weight);
  const LinearShape shape = linear_shape_of(weight);
  const std::string decode = best_by_priority(shape, options, true);
  const std::string prefill = best_by_priority(shape, options, false);
  if (decode == prefill) return create_linear_kernel(decode, weight, options);
  return make_row_table_linear(weight, {{1, decode}, {kLinearDecodeMaxRows + 1, prefill}}, options);
}

std::vector<std::string> linear_kernel_names() {
  std::vector<std::string> names = {"reference"};
  for (auto& n : linear_registry().names()) names.push_back(n);
  return names;
}

std::string linear_kernel_unsupported_reason(std::string_view name, const LinearWeight& weight,
                                             const LinearOptions& options) {
  if (name == "reference") return {};
  LinearOptions named = options;
  named.allow_bf16_activations = true;  // a kernel named by the caller may round x to bf16
  if (!linear_registry().contains(name)) {
    return fmt::format("unknown linear kernel '{}' (known: {})", name, fmt::join(linear_kernel_names(), ", "));
  }
  return fmt::format("{}", fmt::join(linear_unsupported_reasons(linear_registry().get(name), linear_shape_of(weight), named), "; "));
}

std::unique_ptr<LinearKernel> make_named_linear_kernel(std::string_view name, const LinearWeight& weight,
                                                       const LinearOptions& options) {
  if (!weight.quantized() || name == "reference") check_linear_weight(weight);
  if (name == "reference") return make_reference_linear_kernel(weight);
  LinearOptions named = options;
  named.allow_bf16_activations = true;  // a kernel named by the caller may round x to bf16
  return create_linear_kernel(name, weight, named);
}

}  // namespace spindle::kernels::cpu
