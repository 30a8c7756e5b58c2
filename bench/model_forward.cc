// Whole-model forward throughput on the CPU (Model::forward), as ratios measured in one run:
//   decode:  tokens/s at batch 1 and batch 16 (each sequence with --context cached tokens) vs the
//            bound from this machine's streaming read bandwidth: a decode step must read every
//            projection weight and the LM head once (plus the KV of the context).
//   prefill: tokens/s and TFLOP/s of one --prompt-token sequence vs oneDNN's matmul rate at the
//            MLP shape [prompt, hidden] x [hidden, intermediate], measured in the same run.
// A GGUF mixture of experts: the bound counts top_k of each layer's experts at batch 1 and at most
// batch * top_k of them at a larger batch (an upper bound on the bytes); the distinct experts each
// decode step's routing selected are counted (ExpertCount) and a second bound uses them. The model: --model DIR or FILE.gguf, or (default) a random-weight bf16 model of Llama-3.2-1B's shape written
// into a temporary folder (bench_model_writer.h) and removed at exit. KV cache bf16, page 16,
// the highest-priority CPU attention backend usable here, make_linear_kernel's linear kernels,
// ThreadPool::global() (SPINDLE_NUM_THREADS). --matmul-precision as `spindle serve` has it (default
// auto: bf16 activations for a bf16 checkpoint, which changes only products of more than
// kLinearDecodeMaxRows rows on a CPU with AMX-BF16 or AVX512-BF16; exact: f32 activations always).
//
// usage: bench_model_forward [--model DIR] [--layers N] [--context 512] [--prompt 512] [--steps 8]
//                            [--attention-backend NAME] [--matmul-precision auto|exact|bf16]
//                            [--profile 1] [--decode 0] [--linear NAME]
//                            [--weights-memory auto|mapped|huge-pages] [--decode-batches 1 16]
// --profile 1: after each phase, where its time went: every linear product by shape and row count
//   (wall time of LinearKernel::forward), the attention backend's forward (wall time, all layers)
//   and the rest (norms, RoPE, SiLU, residual adds, embedding, the runner's host work, pool
//   hand-offs), each as ms per step and % of the step. The timers add two clock reads per call.
// --weights-memory: as `spindle serve` has it (auto: huge-pages where the kernel grants transparent
//   huge pages on advice, else mapped). ab: the model loaded twice, mapped (A, which also runs the
//   prefill) and in huge pages (B), and each decode phase alternates steps between the two (A B,
//   then B A, ...) over the same KV pages: per-step medians and how many pairs B won, so a shared
//   machine's drift hits both alike.
// --decode 0: the prefill only. --linear NAME: every weight on make_named_linear_kernel(NAME)
//   instead of the auto policy (for A/B of a kernel at model level).
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <dnnl.hpp>
#include <map>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "attn/attention_backend.h"
#include "bench_cli.h"
#include "bench_model_writer.h"
#include "bench_util.h"
#include "config/server_config.h"
#include "engine/runner.h"
#include "gguf/gguf_file.h"
#include "kernels/cpu/linear.h"
#include "model/model.h"
#include "model/gguf_model_config.h"
#include "model/model_config.h"
#include "platform/device_info.h"
#include "platform/openmp_policy.h"
#include "util/thread_pool.h"

using namespace spindle;

namespace {

struct Args {
  std::string model_dir;
  int layers = 16;
  int context = 512;
  int prompt = 512;
  int steps = 8;
  std::string attention_backend;  // empty: the highest-priority CPU backend usable here
  std::string matmul_precision = "auto";
  bool profile = false;
  bool decode = true;
  std::string linear;  // empty: make_linear_kernel's policy
  std::string weights_memory = "auto";
  std::vector<int> decode_batches{1, 16};
};

Args parse_args(int argc, char** argv) {
  Args a;
  CLI::App app{"Whole-model CPU forward: decode and prefill throughput against this machine's rates",
               "bench_model_forward"};
  app.add_option("--model", a.model_dir,
                 "Hugging Face model folder or GGUF file (default: a random Llama-3.2-1B-shaped folder)")
      ->check(CLI::ExistingPath);
  app.add_option("--layers", a.layers, "Layers of the written model (16)")->check(CLI::Range(1, 1024));
  app.add_option("--context", a.context, "Cached tokens per decode sequence (512)")->check(CLI::Range(1, 1 << 20));
  app.add_option("--prompt", a.prompt, "Prefill tokens (512)")->check(CLI::Range(1, 1 << 20));
  app.add_option("--steps", a.steps, "Decode steps per batch size (8)")->check(CLI::Range(1, 1 << 20));
  app.add_option("--attention-backend", a.attention_backend, "CPU attention backend (highest priority usable)");
  app.add_option("--matmul-precision", a.matmul_precision, "auto, exact or bf16 (auto)")
      ->check(CLI::IsMember({"auto", "exact", "bf16"}));
  app.add_option("--profile", a.profile, "1: where each phase's time went (0)");
  app.add_option("--decode", a.decode, "0: the prefill only (1)");
  app.add_option("--linear", a.linear, "Every weight on this named linear kernel (auto policy)");
  app.add_option("--decode-batches", a.decode_batches, "Decode batch sizes, in order (1 16)")
      ->check(CLI::Range(1, 256));
  app.add_option("--weights-memory", a.weights_memory, "auto, mapped, huge-pages or ab (auto)")
      ->check(CLI::IsMember({"auto", "mapped", "huge-pages", "ab"}));
  bench::parse_or_exit(app, argc, argv);
  return a;
}

// oneDNN matmul [m, k] x [k, n] -> f32 of dtype dt: GFLOP/s (best of 5) and the implementation.
std::pair<double, std::string> onednn_matmul(dnnl::memory::data_type dt, int64_t m, int64_t k, int64_t n) {
  using namespace dnnl;
  dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  stream st(eng);
  memory::desc a_md({m, k}, dt, memory::format_tag::ab);
  memory::desc b_md({k, n}, dt, memory::format_tag::ab);
  memory::desc c_md({m, n}, memory::data_type::f32, memory::format_tag::ab);
  matmul::primitive_desc pd(matmul::desc(a_md, b_md, c_md), eng);
  memory a(a_md, eng), b(b_md, eng), c(c_md, eng);
  std::memset(a.get_data_handle(), 0x3f, a_md.get_size());
  std::memset(b.get_data_handle(), 0x3f, b_md.get_size());
  matmul prim(pd);
  const double t = bench::best_time(5, [&] {
    prim.execute(st, {{DNNL_ARG_SRC, a}, {DNNL_ARG_WEIGHTS, b}, {DNNL_ARG_DST, c}});
    st.wait();
  });
  return {2.0 * m * k * double(n) / t / 1e9, pd.impl_info_str()};
}

std::string best_cpu_backend(const attn::AttentionShape& shape) {
  const DeviceInfo device = detect_device_info();
  std::string best = "reference";
  int priority = -1;
  for (const auto* d : attn::attention_registry().list()) {
    if (d->device != attn::Device::kCpu || d->name == "reference") continue;
    if (!d->unsupported_reasons(device, shape).empty()) continue;
    if (d->priority > priority) best = d->name, priority = d->priority;
  }
  return best;
}

// KV pages for every layer, handed out in order.
struct KvPool {
  std::vector<std::vector<std::byte>> storage;
  std::vector<attn::LayerKvCache> caches;
  int num_pages = 0, next = 0, page_size = 16;

  KvPool(const ModelConfig& c, int pages) : num_pages(pages) {
    const size_t bytes = size_t(pages) * page_size * c.kv_size() * 2;
    for (int l = 0; l < c.num_hidden_layers; ++l) {
      storage.emplace_back(bytes);
      storage.emplace_back(bytes);
      caches.push_back({storage[2 * l].data(), storage[2 * l + 1].data(),
                        {c.num_hidden_layers, c.num_key_value_heads, c.head_dim, page_size, DType::kBF16, pages, 0}});
    }
  }
  std::vector<int32_t> take(int tokens) {
    std::vector<int32_t> t;
    for (int i = 0; i < (tokens + page_size - 1) / page_size; ++i) {
      SPINDLE_CHECK(next < num_pages, "bench KV pool exhausted");
      t.push_back(next++);
    }
    return t;
  }
};

// --profile: wall time per op class, reset per phase.
struct Profile {
  bool on = false;
  std::map<std::string, std::pair<int64_t, double>> linear;  // "out x in, m=rows [kernel]" -> calls, s
  int64_t attention_calls = 0;
  double attention_s = 0;
  void reset() {
    linear.clear();
    attention_calls = 0;
    attention_s = 0;
  }
  // Prints the breakdown of `steps` steps that took `total_s` together.
  void print(const char* phase, int steps, double total_s) const {
    if (!on) return;
    const double per = 1e3 / steps;
    std::printf("  profile (%s, %d step(s), %.2f ms/step):\n", phase, steps, total_s * per);
    double linear_s = 0;
    for (const auto& [key, v] : linear) {
      linear_s += v.second;
      std::printf("    linear %-44s %5lld calls/step %9.3f ms/step %5.1f%%\n", key.c_str(),
                  static_cast<long long>(v.first / steps), v.second * per, 100 * v.second / total_s);
    }
    std::printf("    linear, all                                       %9.3f ms/step %5.1f%%\n", linear_s * per,
                100 * linear_s / total_s);
    std::printf("    attention (%lld calls/step)                         %9.3f ms/step %5.1f%%\n",
                static_cast<long long>(attention_calls / steps), attention_s * per, 100 * attention_s / total_s);
    const double rest = total_s - linear_s - attention_s;
    std::printf("    rest (norms, rope, silu, adds, host work)          %9.3f ms/step %5.1f%%\n", rest * per,
                100 * rest / total_s);
  }
};
Profile g_profile;

// A mixture of experts' distinct experts per step: each expert a step runs calls its down product
// (shape [hidden, expert width]) once, through a CountingLinear around that kernel. Not counted
// (sparse_layers 0) for a dense model or where a shared expert or dense MLP has that shape.
struct ExpertCount {
  int64_t out = 0, in = 0;
  int sparse_layers = 0;
  std::atomic<int64_t> calls{0};  // experts run side by side on the pool's threads
  void configure(const ModelConfig& c) {
    if (!c.moe.enabled()) return;
    out = c.hidden_size;
    in = c.moe.moe_intermediate_size;
    for (int l = 0; l < c.num_hidden_layers; ++l) sparse_layers += c.is_moe_layer(l);
    const bool shared_alike = c.moe.shared_expert_intermediate_size == c.moe.moe_intermediate_size;
    const bool dense_alike = sparse_layers < c.num_hidden_layers && c.intermediate_size == c.moe.moe_intermediate_size;
    if (shared_alike || dense_alike) sparse_layers = 0;
  }
  bool counts(const kernels::cpu::LinearWeight& w) const {
    return sparse_layers > 0 && w.out_features == out && w.in_features == in;
  }
  // Distinct experts per sparse layer and step over `steps` steps since calls was last zeroed.
  double per_layer(int steps) const { return sparse_layers > 0 ? double(calls.load()) / steps / sparse_layers : 0; }
};
ExpertCount g_experts;

class CountingLinear final : public kernels::cpu::LinearKernel {
 public:
  explicit CountingLinear(std::unique_ptr<kernels::cpu::LinearKernel> inner) : inner_(std::move(inner)) {}
  const char* name() const override { return inner_->name(); }
  void forward(const float* x, int64_t m, float* y, ThreadPool* pool, const float* bias) override {
    g_experts.calls.fetch_add(1, std::memory_order_relaxed);
    inner_->forward(x, m, y, pool, bias);
  }
  void forward_choosing_for(const float* x, int64_t m, int64_t choose_rows, float* y, ThreadPool* pool,
                            const float* bias) override {
    g_experts.calls.fetch_add(1, std::memory_order_relaxed);
    inner_->forward_choosing_for(x, m, choose_rows, y, pool, bias);
  }

 private:
  std::unique_ptr<kernels::cpu::LinearKernel> inner_;
};

class TimedLinear final : public kernels::cpu::LinearKernel {
 public:
  TimedLinear(std::unique_ptr<kernels::cpu::LinearKernel> inner, const kernels::cpu::LinearWeight& w)
      : inner_(std::move(inner)), out_(w.out_features), in_(w.in_features) {}
  const char* name() const override { return inner_->name(); }
  void forward(const float* x, int64_t m, float* y, ThreadPool* pool, const float* bias) override {
    const double t0 = bench::now_s();
    inner_->forward(x, m, y, pool, bias);
    record(m, bench::now_s() - t0);
  }
  // The experts of a MoE step call this (a verify's or batch's rows take the step's kernel choice).
  void forward_choosing_for(const float* x, int64_t m, int64_t choose_rows, float* y, ThreadPool* pool,
                            const float* bias) override {
    const double t0 = bench::now_s();
    inner_->forward_choosing_for(x, m, choose_rows, y, pool, bias);
    record(m, bench::now_s() - t0);
  }

 private:
  void record(int64_t m, double t) {
    char key[128];
    std::snprintf(key, sizeof(key), "%lldx%lld m=%lld", static_cast<long long>(out_), static_cast<long long>(in_),
                  static_cast<long long>(m));
    auto& v = g_profile.linear[key];
    v.first += 1;
    v.second += t;
  }

  std::unique_ptr<kernels::cpu::LinearKernel> inner_;
  int64_t out_, in_;
};

class TimedBackend final : public attn::AttentionBackend {
 public:
  explicit TimedBackend(attn::AttentionBackend& inner) : inner_(inner) {}
  std::string_view name() const override { return inner_.name(); }
  attn::Device device() const override { return inner_.device(); }
  const attn::AttentionShape& shape() const override { return inner_.shape(); }
  void prepare(const StepBatch& batch, const kernels::cuda::DeviceBatch* uploaded) override {
    inner_.prepare(batch, uploaded);
  }
  void bind_kv_caches(std::span<const attn::LayerKvCache> layers) override { inner_.bind_kv_caches(layers); }
  void forward(int layer, attn::ConstTensor q, attn::ConstTensor k, attn::ConstTensor v, attn::Tensor out,
               bool kv_written) override {
    const double t0 = bench::now_s();
    inner_.forward(layer, q, k, v, out, kv_written);
    g_profile.attention_s += bench::now_s() - t0;
    g_profile.attention_calls += 1;
  }
  attn::KvWriteTarget kv_write_target(int layer) const override { return inner_.kv_write_target(layer); }

 private:
  attn::AttentionBackend& inner_;
};

// The bytes of a GGUF file's tensors that one decode step reads: all of them, less the token
// embedding when the file has its own output tensor (a step then reads one embedding row); of a
// mixture of experts' stacked expert tensors (blk.N.ffn_*_exps, E experts) `experts_read` experts'
// slices per layer (rows * top_k capped at E: exactly top_k at one row, an upper bound for more
// rows; or the distinct experts the step's routing selected, where --profile counted them).
double gguf_step_bytes(const std::filesystem::path& path, const ModelConfig& c, double experts_read) {
  const gguf::GgufFile file(path);
  const bool tied = file.find_tensor("output.weight") == nullptr;
  const double experts = c.moe.enabled() ? c.moe.num_experts : 1;
  const double read = c.moe.enabled() ? experts_read : 1;
  double bytes = 0;
  for (const gguf::TensorInfo& t : file.tensors()) {
    if (!tied && t.name == "token_embd.weight") continue;
    bytes += t.name.ends_with("_exps.weight") ? double(t.size) * read / experts : double(t.size);
  }
  return bytes;
}

}  // namespace

int main(int argc, char** argv) {
  default_openmp_wait_policy(argv);  // as `spindle` does (GOMP_SPINCOUNT=300000: libgomp's default, for an A/B)
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  try {
    const Args args = parse_args(argc, argv);
    ThreadPool& pool = ThreadPool::global();
    const DeviceInfo device = detect_device_info();
    std::printf("cpu: %s, %d threads in ThreadPool::global(); OpenMP: %s\n", device.cpu.model_name.c_str(),
                pool.num_threads(), openmp_wait_policy_summary().c_str());
    // The line's wording is what bench/cpu_peer/summarize.py reads; the figure is now the fastest
    // of bench_util.h's readers (each listed on the next line).
    double bw = 0;
    std::string readers;
    for (const auto& r : bench::memory_read_gbps_all(pool)) {
      bw = std::max(bw, r.gbps);
      readers += fmt::format("{}{} {:.2f} (cpu {:.1f})", readers.empty() ? "" : ", ", r.reader, r.gbps, r.cpu_gbps);
    }
    std::printf("memory read bandwidth (1 GiB streaming sum, all threads): %.1f GB/s\n", bw);
    std::printf("  read bandwidth by reader (GB/s; cpu: over the readers' own CPU time): %s\n", readers.c_str());

    std::filesystem::path dir = args.model_dir;
    std::unique_ptr<bench::TempDir> temp;
    if (dir.empty()) {
      temp = std::make_unique<bench::TempDir>();
      dir = temp->path();
      bench::BenchModelShape shape = bench::llama_3_2_1b_shape();
      shape.num_hidden_layers = args.layers;
      const double t0 = bench::now_s();
      const uint64_t bytes = bench::write_bench_model(dir, shape);
      std::printf("wrote random bf16 Llama-3.2-1B-shaped model (%d layers): %.2f GB in %.1f s\n",
                  shape.num_hidden_layers, bytes / 1e9, bench::now_s() - t0);
    }
    SPINDLE_CHECK(args.matmul_precision == "auto" || args.matmul_precision == "exact" || args.matmul_precision == "bf16",
                  "--matmul-precision '{}' is not one of: auto, exact, bf16", args.matmul_precision);
    // The rule of config::resolve: auto means bf16 activations for a checkpoint stored in bf16.
    const ModelConfig file_config = load_model_config(dir);
    const bool bf16_activations =
        args.matmul_precision == "bf16" || (args.matmul_precision == "auto" && file_config.torch_dtype == DType::kBF16);
    g_experts.configure(file_config);
    ModelOptions options;
    const bool ab = args.weights_memory == "ab";  // A mapped, B in huge pages
    options.weights_memory =
        config::resolve_weights_memory(ab ? "mapped" : args.weights_memory, attn::Device::kCpu, read_memory_info());
    const bool huge_pages = options.weights_memory == FileMemory::kHugePageCopy;
    g_profile.on = args.profile;
    options.make_linear = [&args, bf16_activations](const kernels::cpu::LinearWeight& w) {
      kernels::cpu::LinearOptions o;
      o.allow_bf16_activations = bf16_activations;
      std::unique_ptr<kernels::cpu::LinearKernel> k = args.linear.empty()
                                                          ? kernels::cpu::make_linear_kernel(w, o)
                                                          : kernels::cpu::make_named_linear_kernel(args.linear, w, o);
      if (g_experts.counts(w)) k = std::make_unique<CountingLinear>(std::move(k));
      if (!args.profile) return k;
      return std::unique_ptr<kernels::cpu::LinearKernel>(std::make_unique<TimedLinear>(std::move(k), w));
    };
    double t0 = bench::now_s();
    auto model = load_cpu_model(dir, options);
    const ModelConfig& c = model->config();
    std::printf("loaded %s in %.2f s (%s): weight_bytes %.3f GB, linear kernel %s, gate/up fused in %d/%d layers; "
                "--matmul-precision %s (bf16 activations allowed: %s)\n",
                dir.string().c_str(), bench::now_s() - t0,
                huge_pages ? "weights copied into transparent huge pages" : "weights mapped", model->weight_bytes() / 1e9,
                model->linear_kernel_name(), model->num_fused_gate_up(), c.num_hidden_layers,
                args.matmul_precision.c_str(), bf16_activations ? "yes" : "no");
    std::unique_ptr<Transformer> model_b;
    if (ab) {
      ModelOptions b_options = options;
      b_options.weights_memory = FileMemory::kHugePageCopy;
      t0 = bench::now_s();
      model_b = load_cpu_model(dir, b_options);
      std::printf("A/B: A = the weights mapped (above), B = loaded again into transparent huge pages in %.2f s\n",
                  bench::now_s() - t0);
    }

    // Bytes a decode step reads: every projection and the LM head once, as the file stores them
    // (bf16 or f32; a GGUF file: its tensors' bytes, the "read bound for the file's bytes").
    const double elem = double(dtype_size(c.torch_dtype));
    const double h = c.hidden_size, im = c.intermediate_size, v = c.vocab_size;
    // The products a token computes: a sparse layer's top_k experts (+ a shared expert) and router
    // instead of the dense MLP (so the prefill TFLOP/s below count active parameters).
    double linear_params = 0;
    for (int l = 0; l < c.num_hidden_layers; ++l) {
      const double mlp = c.is_moe_layer(l) ? 3 * h * (double(c.moe.num_experts_per_tok) * c.moe.moe_intermediate_size +
                                                      c.moe.shared_expert_intermediate_size) +
                                                 h * c.moe.num_experts
                                           : 3 * h * im;
      linear_params += h * c.q_size() + 2 * h * c.kv_size() + c.q_size() * h + mlp;
    }
    // (a GGUF mixture of experts: a step of b rows reads at most b * top_k experts per layer.)
    auto decode_bytes = [&](int64_t rows) {
      const double top_k_rows = std::min<double>(c.moe.num_experts, double(rows) * c.moe.num_experts_per_tok);
      return is_gguf_path(dir) ? gguf_step_bytes(dir, c, top_k_rows) : (linear_params + v * h) * elem;
    };
    const double step_weight_bytes = decode_bytes(1);
    if (is_gguf_path(dir))
      std::printf("a decode step reads %.3f GB of the file's tensors at batch 1 (held in memory as %.3f GB after "
                  "repacking)\n", step_weight_bytes / 1e9, model->weight_bytes() / 1e9);
    const double kv_token_bytes = double(c.num_hidden_layers) * 2 * c.kv_size() * 2;  // bf16 KV

    // Prefill yardstick: oneDNN at the MLP shape, f32 (the exact path) and bf16 where supported.
    auto [mm32, mm32_impl] = onednn_matmul(dnnl::memory::data_type::f32, args.prompt, c.hidden_size, c.intermediate_size);
    std::printf("oneDNN matmul f32 %dx%dx%d: %.1f GFLOP/s (impl %s)\n", args.prompt, c.hidden_size,
                c.intermediate_size, mm32, mm32_impl.c_str());
    double mm16 = 0;
    try {
      auto [rate, impl] = onednn_matmul(dnnl::memory::data_type::bf16, args.prompt, c.hidden_size, c.intermediate_size);
      mm16 = rate;
      std::printf("oneDNN matmul bf16 %dx%dx%d: %.1f GFLOP/s (impl %s)\n", args.prompt, c.hidden_size,
                  c.intermediate_size, rate, impl.c_str());
    } catch (const dnnl::error& e) {
      std::printf("oneDNN matmul bf16: unavailable on this CPU (%s)\n", e.what());
    }

    const attn::AttentionShape shape = model->attention_shape(DType::kBF16, 16);
    const std::string backend_name = args.attention_backend.empty() ? best_cpu_backend(shape) : args.attention_backend;
    auto inner_backend = attn::create_attention_backend(backend_name, shape, {});
    TimedBackend timed_backend(*inner_backend);
    attn::AttentionBackend* backend = args.profile ? &timed_backend : inner_backend.get();
    spindle::engine::Runner runner(*model, *backend, *backend);
    std::unique_ptr<attn::AttentionBackend> backend_b;
    std::unique_ptr<spindle::engine::Runner> runner_b;
    if (model_b) {
      backend_b = attn::create_attention_backend(backend_name, shape, {});
      runner_b = std::make_unique<spindle::engine::Runner>(*model_b, *backend_b, *backend_b);
    }
    const int max_batch = *std::max_element(args.decode_batches.begin(), args.decode_batches.end());
    const int per_seq = args.context + args.steps + 2;
    KvPool kv(c, max_batch * ((per_seq + 15) / 16) + (args.prompt + 15) / 16);
    runner.bind_kv_caches(kv.caches);
    if (runner_b) runner_b->bind_kv_caches(kv.caches);
    std::printf("attention backend %s, bf16 KV, page 16; %.2f GB of KV pages\n", backend_name.c_str(),
                kv.num_pages * 16 * kv_token_bytes / 1e9);
    std::mt19937 rng(1);
    std::uniform_int_distribution<int32_t> token(0, c.vocab_size - 1);

    Profile best_profile;
    best_profile.on = args.profile;
    // Prefill: one sequence of args.prompt tokens, logits for the last.
    {
      std::vector<TokenId> ids(args.prompt);
      for (auto& id : ids) id = token(rng);
      const std::vector<int32_t> table = kv.take(args.prompt);
      StepBatch batch;
      batch.add_sequence(ids.data(), args.prompt, 0, table.data(), static_cast<int32_t>(table.size()), 1);
      double t = 1e30;
      for (int rep = 0; rep < 2; ++rep) {  // best of 2; the profile of the best
        g_profile.reset();
        const double t0 = bench::now_s();
        runner.run(batch);
        const double tr = bench::now_s() - t0;
        if (tr < t) t = tr, best_profile = g_profile;
      }
      const double p = args.prompt;
      const double attn_flops = 4.0 * p * p / 2 * c.head_dim * c.num_attention_heads * c.num_hidden_layers;
      const double flops = 2 * linear_params * p + 2 * v * h + attn_flops;
      const double tflops = flops / t / 1e12;
      std::printf("\nprefill %d tokens: %.2f s, %.1f tokens/s, %.3f TFLOP/s (%.2f TFLOP: 2 x %.3g linear params x "
                  "tokens + LM head row + causal attention)\n",
                  args.prompt, t, p / t, tflops, flops / 1e12, linear_params);
      std::printf("  vs oneDNN f32 matmul rate: %.1f%% (bound %.1f tokens/s)", 100 * tflops * 1e3 / mm32,
                  p * mm32 * 1e9 / flops);
      if (mm16 > 0) std::printf(", vs oneDNN bf16: %.1f%%", 100 * tflops * 1e3 / mm16);
      std::printf("\n  memory bound (weights read once / bandwidth): %.0f tokens/s\n",
                  p / (decode_bytes(args.prompt) / (bw * 1e9)));
      best_profile.print("prefill", 1, t);
    }

    // Decode: `b` sequences with args.context cached tokens each, args.steps steps.
    for (const int b : args.decode_batches) {
      if (!args.decode) break;
      std::vector<std::vector<int32_t>> tables;
      kv.next = (args.prompt + 15) / 16;  // reuse the decode region
      for (int s = 0; s < b; ++s) tables.push_back(kv.take(per_seq));
      StepBatch batch;
      auto step_on = [&](spindle::engine::Runner& r, int i) {
        batch.clear();
        for (int s = 0; s < b; ++s) {
          const int cached = args.context + i;
          const TokenId id = token(rng);
          batch.add_sequence(&id, 1, cached, tables[s].data(), (cached + 1 + 15) / 16, 1);
        }
        r.run(batch);
      };
      auto step = [&](int i) { step_on(runner, i); };
      step(0);  // warm-up
      if (runner_b) {
        step_on(*runner_b, 0);
        std::vector<double> ta, tb, ca, cb;  // wall and the calling thread's CPU time per step
        int b_won = 0;
        for (int i = 1; i <= args.steps; ++i) {
          double t[2], cpu[2];
          for (int k = 0; k < 2; ++k) {
            const bool on_b = (k == 1) != (i % 2 == 0);  // A B, then B A
            const double t0s = bench::now_s(), c0s = bench::thread_cpu_s();
            step_on(on_b ? *runner_b : runner, i);
            t[on_b ? 1 : 0] = bench::now_s() - t0s;
            cpu[on_b ? 1 : 0] = bench::thread_cpu_s() - c0s;
          }
          ta.push_back(t[0]);
          tb.push_back(t[1]);
          ca.push_back(cpu[0]);
          cb.push_back(cpu[1]);
          b_won += t[1] < t[0];
        }
        auto median = [](std::vector<double> v) {
          std::sort(v.begin(), v.end());
          return v[v.size() / 2];
        };
        const double ma = median(ta), mb = median(tb);
        const double bw_ab = bench::memory_read_gbps(pool);
        std::printf("\nA/B decode batch %d, %d cached tokens, %d pairs: A (mapped) median %.1f ms/step, B (huge pages) "
                    "median %.1f ms/step, B/A %.3f, B faster in %d of %d pairs; vs the bandwidth bound at %.1f GB/s "
                    "(measured after): A %.1f%%, B %.1f%%\n",
                    b, args.context, args.steps, ma * 1e3, mb * 1e3, mb / ma, b_won, args.steps, std::max(bw, bw_ab),
                    100 * decode_bytes(b) / (std::max(bw, bw_ab) * 1e9) / ma,
                    100 * decode_bytes(b) / (std::max(bw, bw_ab) * 1e9) / mb);
        std::printf("  calling thread's CPU time: A median %.2f ms/step, B %.2f, B/A %.3f\n", median(ca) * 1e3,
                    median(cb) * 1e3, median(cb) / median(ca));
        continue;
      }
      // The bound uses the higher of the start-of-run and a fresh bandwidth measurement (on a
      // shared machine other load moves it; the higher one is the stricter bound).
      const double bw_now = bench::memory_read_gbps(pool);
      const double bw_bound = std::max(bw, bw_now);
      g_profile.reset();
      g_experts.calls = 0;
      std::printf("  (timing %d steps of batch %d from here)\n", args.steps, b);  // a profiler may attach now
      const double start = bench::now_s();
      const double cpu_start = bench::thread_cpu_s();
      for (int i = 1; i <= args.steps; ++i) step(i);
      const double t = (bench::now_s() - start) / args.steps;
      const double cpu_t = (bench::thread_cpu_s() - cpu_start) / args.steps;
      const double kv_bytes = b * (args.context + args.steps / 2.0) * kv_token_bytes;
      const double bound_w = b / (decode_bytes(b) / (bw_bound * 1e9));
      const double bound_wkv = b / ((decode_bytes(b) + kv_bytes) / (bw_bound * 1e9));
      std::printf("\ndecode batch %d, %d cached tokens each: %.1f ms/step, %.2f tokens/s\n", b, args.context,
                  t * 1e3, b / t);
      std::printf("  memory read bandwidth now %.1f GB/s, bound uses %.1f GB/s\n", bw_now, bw_bound);
      std::printf("  bound from bandwidth: %.2f tokens/s (weights %.2f GB/step) -> %.1f%%; with KV (%.3f GB/step): "
                  "%.2f tokens/s -> %.1f%%; effective %.1f GB/s\n",
                  bound_w, decode_bytes(b) / 1e9, 100 * (b / t) / bound_w, kv_bytes / 1e9, bound_wkv,
                  100 * (b / t) / bound_wkv, (decode_bytes(b) + kv_bytes) / t / 1e9);
      std::printf("  calling thread's CPU time %.3f ms/step (with 1 thread: the step's work, whatever the machine's load)\n",
                  cpu_t * 1e3);
      g_profile.print(fmt::format("decode batch {}", b).c_str(), args.steps, t * args.steps);
      if (const double distinct = g_experts.per_layer(args.steps); distinct > 0 && is_gguf_path(dir)) {
        const double bytes = gguf_step_bytes(dir, c, distinct);
        const double bound = b / (bytes / (bw_bound * 1e9));
        std::printf("  bound with the distinct experts the steps' routing selected (%.2f of %d per sparse layer): "
                    "%.2f tokens/s (weights %.3f GB/step) -> %.1f%%\n",
                    distinct, c.moe.num_experts, bound, bytes / 1e9, 100 * (b / t) / bound);
      }
    }
    std::printf("\nworkspace_bytes after the run: %.1f MB\n", model->workspace_bytes() / 1e6);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
