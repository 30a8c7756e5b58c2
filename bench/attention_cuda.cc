// GPU paged-attention throughput of Spindle's CUDA kernels, called through their launch functions
// (kernels/cuda/paged_layer_launch.h; no backend layer), as ratios measured in one run:
//   prefill: TFLOP/s of causal prefill with no cached prefix (batch 8 x 2048, batch 2 x 8192);
//            FLOPs = 4 * head_dim * num_heads * sum over sequences of S * (S + 1) / 2; its yardstick
//            is the peer, torch SDPA (bench/torch_sdpa.py; bench/run_cuda_bench.sh runs both)
//   decode:  TB/s of KV read, one new token per sequence (batch 64 x 4096 cached, batch 8 x 32768
//            cached; kv_len = cached + 1), KV bytes = 2 * batch * kv_len * num_kv_heads * head_dim
//            * 2, and that as a % of this device's copy bandwidth (device-to-device cudaMemcpyAsync
//            and a 16-byte vectorized copy kernel over 2 GiB, the better one; bytes read + written)
// Shape: bf16 KV, 32 query heads over 8 KV heads, head_dim 128, page size 16, scale 1/sqrt(128);
// q f32 and K/V filled on the device with hash-based values in [-1, 1]; each sequence's page table
// is a slice of a seeded random permutation of the pool's pages.
// Timing: 3 warm-up launches, then `repeats` (5) batches of N back-to-back launches timed with
// cudaEvents, N chosen so that a batch takes >= --min-ms (200 ms); the median batch's per-launch
// time is reported. Clocks are left alone.
// Correctness: --samples random (row, head) outputs of each kernel vs float64 on the host over the
// same data (the needed pages downloaded); "ok" when within attn/validation.cc's bf16 tolerance.
//
// usage: bench_attention_cuda [--only prefill|decode] [--case NAME]... [--backend NAME]...
//                             [--device N] [--json FILE] [--min-ms MS] [--repeats R] [--samples K]
// A CUDA error that breaks the context (e.g. an illegal address) stops the remaining runs of this
// process (they are listed as "not run"); bench/run_cuda_bench.sh runs every (case, backend) in
// its own process so one failure cannot hide the others.
#include <CLI/CLI.hpp>
#include <cuda_runtime_api.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <functional>
#include <memory>
#include <numeric>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cudnn_sdpa.h"
#include "kernels/cuda/flash_attention.h"
#include "kernels/cuda/paged_layer_launch.h"
#include "util/error.h"
#include "util/half.h"

namespace spindle::bench {  // attention_cuda_fill.cu
void fill_uniform_f32(float* p, size_t n, uint64_t seed, int num_sms, cudaStream_t stream);
void fill_uniform_bf16(uint16_t* p, size_t n, uint64_t seed, int num_sms, cudaStream_t stream);
void copy_vec16(void* dst, const void* src, size_t bytes, int num_sms, cudaStream_t stream);
}  // namespace spindle::bench

namespace {

using namespace spindle::kernels::cuda;
using detail::DeviceSequence;
using detail::KvType;
using detail::PagedLayerLaunch;
using json = nlohmann::json;

constexpr int kNumHeads = 32, kNumKvHeads = 8, kHeadDim = 128, kPageSize = 16;
constexpr double kBf16Tolerance = 1.5e-2;  // attn/validation.cc tolerance_for(kBF16)
const float kScale = 1.0f / std::sqrt(float(kHeadDim));

struct Options {
  std::string only;
  std::vector<std::string> cases, backends;
  int device = 0;
  std::string json_path;
  double min_ms = 200;
  int repeats = 5;
  int samples = 8;
};

struct CaseSpec {
  std::string name;
  bool decode = false;
  int batch = 0;
  int new_tokens = 0;     // per sequence
  int cached_tokens = 0;  // per sequence
};

const std::vector<CaseSpec> kCases = {
    {"prefill_b8_s2048", false, 8, 2048, 0},
    {"prefill_b2_s8192", false, 2, 8192, 0},
    {"decode_b64_kv4096", true, 64, 1, 4096},
    {"decode_b8_kv32768", true, 8, 1, 32768},
};
const std::vector<std::string> kBackends = {"cuda_flash", "cudnn_sdpa", "cuda_flash_prefill"};

// Owns one cudaMalloc allocation.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t bytes) : bytes_(bytes) {
    if (bytes > 0) CUDA_CHECK(cudaMalloc(&ptr_, bytes));
  }
  ~DeviceBuffer() {
    if (ptr_ != nullptr) cudaFree(ptr_);
  }
  DeviceBuffer(DeviceBuffer&& o) noexcept : ptr_(std::exchange(o.ptr_, nullptr)), bytes_(o.bytes_) {}
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    std::swap(ptr_, o.ptr_);
    std::swap(bytes_, o.bytes_);
    return *this;
  }
  template <typename T = void>
  T* get() const { return static_cast<T*>(ptr_); }
  size_t bytes() const { return bytes_; }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

class Event {
 public:
  Event() { CUDA_CHECK(cudaEventCreate(&event_)); }
  ~Event() { cudaEventDestroy(event_); }
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  cudaEvent_t get() const { return event_; }

 private:
  cudaEvent_t event_ = nullptr;
};

struct Timing {
  double median_s = 0, min_s = 0, max_s = 0;  // per launch
  int launches = 0;                           // per timed batch
  int repeats = 0;
};

// Seconds of `n` back-to-back launches on `stream`.
double time_batch(cudaStream_t stream, const std::function<void()>& launch, int n) {
  Event start, stop;
  CUDA_CHECK(cudaEventRecord(start.get(), stream));
  for (int i = 0; i < n; ++i) launch();
  CUDA_CHECK(cudaEventRecord(stop.get(), stream));
  CUDA_CHECK(cudaEventSynchronize(stop.get()));
  float ms = 0;
  CUDA_CHECK(cudaEventElapsedTime(&ms, start.get(), stop.get()));
  return ms * 1e-3;
}

Timing time_launches(cudaStream_t stream, const std::function<void()>& launch, const Options& opt) {
  for (int i = 0; i < 3; ++i) launch();
  CUDA_CHECK(cudaStreamSynchronize(stream));
  const double estimate = std::max(time_batch(stream, launch, 3) / 3, 1e-7);
  Timing t;
  t.launches = int(std::clamp(std::ceil(opt.min_ms * 1e-3 / estimate), 1.0, 100000.0));
  t.repeats = opt.repeats;
  std::vector<double> per_launch;
  for (int r = 0; r < opt.repeats; ++r) per_launch.push_back(time_batch(stream, launch, t.launches) / t.launches);
  std::sort(per_launch.begin(), per_launch.end());
  t.median_s = per_launch[per_launch.size() / 2];
  t.min_s = per_launch.front();
  t.max_s = per_launch.back();
  return t;
}

struct DeviceFacts {
  std::string name;
  int cc_major = 0, cc_minor = 0, num_sms = 0;
  double total_gib = 0;
  int driver_version = 0, runtime_version = 0;
};

struct CopyRate {
  double memcpy_tbps = 0, kernel_tbps = 0;
  size_t bytes = 0;  // buffer size; each copy moves 2 * bytes
  std::string error;
  double best() const { return std::max(memcpy_tbps, kernel_tbps); }
};

CopyRate measure_copy(const DeviceFacts& dev, cudaStream_t stream, const Options& opt) {
  CopyRate rate;
  rate.bytes = size_t{2} << 30;
  try {
    DeviceBuffer src(rate.bytes), dst(rate.bytes);
    spindle::bench::fill_uniform_bf16(src.get<uint16_t>(), rate.bytes / 2, 7, dev.num_sms, stream);
    CUDA_CHECK(cudaMemsetAsync(dst.get(), 0, rate.bytes, stream));
    const Timing t1 = time_launches(stream, [&] {
      CUDA_CHECK(cudaMemcpyAsync(dst.get(), src.get(), rate.bytes, cudaMemcpyDeviceToDevice, stream));
    }, opt);
    rate.memcpy_tbps = 2.0 * rate.bytes / t1.median_s / 1e12;
    const Timing t2 = time_launches(stream, [&] {
      spindle::bench::copy_vec16(dst.get(), src.get(), rate.bytes, dev.num_sms, stream);
    }, opt);
    rate.kernel_tbps = 2.0 * rate.bytes / t2.median_s / 1e12;
  } catch (const std::exception& e) {
    rate.error = e.what();
  }
  return rate;
}

// One case's batch, resident on the device; the host keeps the page tables for the spot check.
struct CaseData {
  CaseSpec spec;
  int kv_len = 0;  // per sequence: cached + new
  int num_rows = 0;
  int num_pages = 0;
  int pages_per_seq = 0;
  std::vector<int32_t> tables;
  std::vector<DeviceSequence> seqs;
  DeviceBuffer q, out, k, v, d_seqs, d_tables;

  CaseData(const CaseSpec& s, int num_sms, cudaStream_t stream) : spec(s) {
    kv_len = s.cached_tokens + s.new_tokens;
    num_rows = s.batch * s.new_tokens;
    pages_per_seq = (kv_len + kPageSize - 1) / kPageSize;
    num_pages = s.batch * pages_per_seq;
    tables.resize(num_pages);
    std::iota(tables.begin(), tables.end(), 0);
    std::mt19937 rng(42);
    std::shuffle(tables.begin(), tables.end(), rng);
    for (int b = 0; b < s.batch; ++b) {
      seqs.push_back({b * s.new_tokens, s.new_tokens, s.cached_tokens, b * pages_per_seq});
    }
    const size_t q_elems = size_t(num_rows) * kNumHeads * kHeadDim;
    const size_t kv_elems = size_t(num_pages) * kPageSize * kNumKvHeads * kHeadDim;
    q = DeviceBuffer(q_elems * sizeof(float));
    out = DeviceBuffer(q_elems * sizeof(float));
    k = DeviceBuffer(kv_elems * 2);
    v = DeviceBuffer(kv_elems * 2);
    d_seqs = DeviceBuffer(seqs.size() * sizeof(DeviceSequence));
    d_tables = DeviceBuffer(tables.size() * sizeof(int32_t));
    spindle::bench::fill_uniform_f32(q.get<float>(), q_elems, 1, num_sms, stream);
    spindle::bench::fill_uniform_bf16(k.get<uint16_t>(), kv_elems, 2, num_sms, stream);
    spindle::bench::fill_uniform_bf16(v.get<uint16_t>(), kv_elems, 3, num_sms, stream);
    CUDA_CHECK(cudaMemcpyAsync(d_seqs.get(), seqs.data(), d_seqs.bytes(), cudaMemcpyHostToDevice, stream));
    CUDA_CHECK(cudaMemcpyAsync(d_tables.get(), tables.data(), d_tables.bytes(), cudaMemcpyHostToDevice, stream));
    CUDA_CHECK(cudaStreamSynchronize(stream));
  }

  PagedLayerLaunch launch(int num_sms) const {
    PagedLayerLaunch a;
    a.q = q.get<float>();
    a.out = out.get<float>();
    a.k_pages = k.get();
    a.v_pages = v.get();
    a.kv.num_layers = 1;
    a.kv.num_kv_heads = kNumKvHeads;
    a.kv.head_dim = kHeadDim;
    a.kv.page_size = kPageSize;
    a.kv.dtype = spindle::DType::kBF16;
    a.kv.num_pages = num_pages;
    a.num_heads = kNumHeads;
    a.scale = kScale;
    a.batch.sequences = d_seqs.get<DeviceSequence>();
    a.batch.page_tables = d_tables.get<int32_t>();
    a.batch.num_sequences = spec.batch;
    a.batch.num_rows = num_rows;
    a.batch.max_new_tokens = spec.new_tokens;
    a.batch.max_kv_len = kv_len;
    a.batch.causal = true;  // what the engine passes; for one new token it equals non-causal
    a.num_sms = num_sms;
    return a;
  }

  double causal_flops() const {
    const double s = spec.new_tokens;
    return 4.0 * kHeadDim * kNumHeads * spec.batch * (s * (s + 1) / 2);
  }
  double kv_bytes() const { return 2.0 * spec.batch * kv_len * kNumKvHeads * kHeadDim * 2; }
};

// A sampled output element set: (row, head) and its float64 reference [head_dim].
struct Sample {
  int row = 0, head = 0;
  std::vector<double> want;
};

// float64 softmax(scale q.K^T).V for (row, head), from the device's q and pages.
Sample reference_sample(const CaseData& c, int row, int head) {
  int s = 0;
  while (s + 1 < int(c.seqs.size()) && c.seqs[s + 1].query_offset <= row) ++s;
  const DeviceSequence& seq = c.seqs[s];
  const int pos = seq.num_cached_tokens + (row - seq.query_offset);
  const int n = pos + 1;  // causal; equals kv_len for a decode row
  const int g = head / (kNumHeads / kNumKvHeads);
  std::vector<float> q(kHeadDim);
  CUDA_CHECK(cudaMemcpy(q.data(), c.q.get<float>() + (size_t(row) * kNumHeads + head) * kHeadDim,
                        kHeadDim * sizeof(float), cudaMemcpyDeviceToHost));
  std::vector<uint16_t> k(size_t(n) * kHeadDim), v(k.size());
  const size_t token_pitch = size_t(kNumKvHeads) * kHeadDim * 2;
  for (int j = 0; j * kPageSize < n; ++j) {
    const size_t page = size_t(c.tables[seq.page_table_offset + j]);
    const size_t offset = (page * kPageSize * kNumKvHeads + g) * kHeadDim * 2;
    const int rows = std::min(kPageSize, n - j * kPageSize);
    for (auto [dst, src] : {std::pair{k.data(), c.k.get<char>()}, std::pair{v.data(), c.v.get<char>()}}) {
      CUDA_CHECK(cudaMemcpy2D(dst + size_t(j) * kPageSize * kHeadDim, kHeadDim * 2, src + offset, token_pitch,
                              kHeadDim * 2, rows, cudaMemcpyDeviceToHost));
    }
  }
  std::vector<double> score(n);
  double max_score = -INFINITY;
  for (int t = 0; t < n; ++t) {
    double dot = 0;
    for (int d = 0; d < kHeadDim; ++d) dot += double(q[d]) * spindle::bf16_bits_to_float(k[size_t(t) * kHeadDim + d]);
    score[t] = dot * kScale;
    max_score = std::max(max_score, score[t]);
  }
  Sample out{row, head, std::vector<double>(kHeadDim, 0.0)};
  double sum = 0;
  for (int t = 0; t < n; ++t) {
    const double p = std::exp(score[t] - max_score);
    sum += p;
    for (int d = 0; d < kHeadDim; ++d) out.want[d] += p * spindle::bf16_bits_to_float(v[size_t(t) * kHeadDim + d]);
  }
  for (double& x : out.want) x /= sum;
  return out;
}

// Random (row, head) pairs, the batch's last row always among them (the longest causal row).
std::vector<Sample> reference_samples(const CaseData& c, int num_samples) {
  std::mt19937 rng(1234);
  std::vector<Sample> samples;
  for (int i = 0; i < num_samples; ++i) {
    const int row = i == 0 ? c.num_rows - 1 : int(rng() % uint32_t(c.num_rows));
    samples.push_back(reference_sample(c, row, int(rng() % kNumHeads)));
  }
  return samples;
}

// Max abs error of the device's out against the samples (infinity for a non-finite output).
double max_abs_error(const CaseData& c, const std::vector<Sample>& samples) {
  double worst = 0;
  std::vector<float> got(kHeadDim);
  for (const Sample& s : samples) {
    CUDA_CHECK(cudaMemcpy(got.data(), c.out.get<float>() + (size_t(s.row) * kNumHeads + s.head) * kHeadDim,
                          kHeadDim * sizeof(float), cudaMemcpyDeviceToHost));
    for (int d = 0; d < kHeadDim; ++d) {
      if (!std::isfinite(got[d])) return INFINITY;
      worst = std::max(worst, std::fabs(double(got[d]) - s.want[d]));
    }
  }
  return worst;
}

struct Row {
  std::string case_name, backend, status = "ok", note;
  double ms = 0, tflops = 0, kv_tbps = 0, pct_copy = 0, max_err = -1;
  Timing timing;
};

Row make_row(const std::string& case_name, const std::string& backend, std::string status = "ok",
             std::string note = "") {
  Row r;
  r.case_name = case_name;
  r.backend = backend;
  r.status = std::move(status);
  r.note = std::move(note);
  return r;
}

// One backend bound to a case: why it cannot run (empty when it can), its workspace, its launch.
struct Runner {
  std::string skip_reason;
  std::function<size_t(const PagedLayerLaunch&)> workspace_bytes;
  std::function<void(const PagedLayerLaunch&, cudaStream_t)> run;
};

Runner make_runner(const std::string& backend, const CaseSpec& spec, const DeviceFacts& dev,
                   std::unique_ptr<CudnnSdpa>& cudnn) {
  Runner r;
  const bool prefill_kernel = backend == "cuda_flash_prefill" || (backend == "cuda_flash" && !spec.decode);
  if (backend == "cudnn_sdpa") {
    const auto reasons = cudnn_sdpa_unsupported_reasons(dev.cc_major, dev.cc_minor, kHeadDim, KvType::kBF16, kPageSize);
    for (const auto& reason : reasons) r.skip_reason += (r.skip_reason.empty() ? "" : "; ") + reason;
    if (!r.skip_reason.empty()) return r;
    cudnn = std::make_unique<CudnnSdpa>(kNumHeads, kNumKvHeads, kHeadDim, kScale, KvType::kBF16, kPageSize);
    r.workspace_bytes = [](const PagedLayerLaunch&) { return size_t{0}; };
    r.run = [&cudnn](const PagedLayerLaunch& a, cudaStream_t st) { cudnn->run(a, st); };
  } else if (prefill_kernel) {
    if (!detail::flash_prefill_supports(kHeadDim, KvType::kBF16)) r.skip_reason = "flash_prefill_supports(128, bf16) is false";
    r.workspace_bytes = detail::flash_prefill_workspace_bytes;
    r.run = detail::launch_flash_prefill;
  } else {
    if (!detail::flash_decode_supports(kHeadDim, KvType::kBF16)) r.skip_reason = "flash_decode_supports(128, bf16) is false";
    r.workspace_bytes = detail::flash_decode_workspace_bytes;
    r.run = detail::launch_flash_decode;
  }
  return r;
}

// Whether the CUDA context still works after an error (sticky errors poison every later call).
bool context_usable() {
  cudaGetLastError();
  return cudaDeviceSynchronize() == cudaSuccess;
}

Row run_backend(CaseData& c, const std::string& backend, const DeviceFacts& dev, const CopyRate& copy,
                const std::vector<Sample>& samples, cudaStream_t stream, const Options& opt) {
  Row row = make_row(c.spec.name, backend);
  std::unique_ptr<CudnnSdpa> cudnn;
  try {
    const Runner runner = make_runner(backend, c.spec, dev, cudnn);
    if (!runner.skip_reason.empty()) {
      row.status = "skipped";
      row.note = runner.skip_reason;
      return row;
    }
    PagedLayerLaunch a = c.launch(dev.num_sms);
    a.workspace_bytes = runner.workspace_bytes(a);
    DeviceBuffer workspace(a.workspace_bytes);
    a.workspace = workspace.get();
    // NaN everywhere first, so an output the kernel does not write cannot pass the check.
    CUDA_CHECK(cudaMemsetAsync(c.out.get(), 0xff, c.out.bytes(), stream));
    runner.run(a, stream);
    CUDA_CHECK(cudaStreamSynchronize(stream));
    row.max_err = max_abs_error(c, samples);
    if (!(row.max_err <= kBf16Tolerance)) {
      row.status = "WRONG";
      char note[96];
      std::snprintf(note, sizeof(note), "max abs error above the bf16 tolerance %.1e", kBf16Tolerance);
      row.note = note;
    }
    row.timing = time_launches(stream, [&] { runner.run(a, stream); }, opt);
    row.ms = row.timing.median_s * 1e3;
    if (c.spec.decode) {
      row.kv_tbps = c.kv_bytes() / row.timing.median_s / 1e12;
      if (copy.best() > 0) row.pct_copy = 100 * row.kv_tbps / copy.best();
    } else {
      row.tflops = c.causal_flops() / row.timing.median_s / 1e12;
    }
  } catch (const std::exception& e) {  // spindle::Error (CUDA_CHECK, cuDNN) and the rest
    row.status = "error";
    row.note = e.what();
  }
  return row;
}

std::string fmt_num(double x, int prec) {
  if (x <= 0) return "-";
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.*f", prec, x);
  return buf;
}

std::string fmt_err(double x) {
  if (x < 0) return "-";
  if (std::isinf(x)) return "non-finite";
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.2e", x);
  return buf;
}

void print_table(const std::vector<Row>& rows) {
  std::printf("\n| case | backend | status | ms | TFLOP/s | KV TB/s | %% of copy BW | max abs err | launches x repeats |\n");
  std::printf("|---|---|---|---:|---:|---:|---:|---:|---:|\n");
  for (const Row& r : rows) {
    std::string status = r.status;
    if (!r.note.empty()) status += ": " + r.note;
    for (char& ch : status) if (ch == '|' || ch == '\n') ch = ' ';
    const std::string runs =
        r.timing.launches > 0 ? std::to_string(r.timing.launches) + " x " + std::to_string(r.timing.repeats) : "-";
    std::printf("| %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", r.case_name.c_str(), r.backend.c_str(),
                status.c_str(), fmt_num(r.ms, 3).c_str(), fmt_num(r.tflops, 1).c_str(), fmt_num(r.kv_tbps, 3).c_str(),
                fmt_num(r.pct_copy, 1).c_str(), fmt_err(r.max_err).c_str(), runs.c_str());
  }
}

json to_json(const DeviceFacts& dev, const CopyRate& copy, const std::vector<Row>& rows, const Options& opt) {
  json j;
  j["tool"] = "bench_attention_cuda";
  j["device"] = {{"index", opt.device}, {"name", dev.name}, {"cc", std::to_string(dev.cc_major) + "." + std::to_string(dev.cc_minor)},
                 {"num_sms", dev.num_sms}, {"total_gib", dev.total_gib}, {"driver_version", dev.driver_version},
                 {"runtime_version", dev.runtime_version}};
  j["copy"] = {{"buffer_bytes", copy.bytes}, {"memcpy_tbps", copy.memcpy_tbps}, {"kernel_tbps", copy.kernel_tbps},
               {"best_tbps", copy.best()}, {"error", copy.error}};
  j["shape"] = {{"num_heads", kNumHeads}, {"num_kv_heads", kNumKvHeads}, {"head_dim", kHeadDim},
                {"page_size", kPageSize}, {"kv_dtype", "bf16"}, {"q_dtype", "f32"}, {"scale", kScale}};
  j["timing"] = {{"warmup", 3}, {"min_ms_per_batch", opt.min_ms}, {"repeats", opt.repeats}, {"statistic", "median"}};
  j["tolerance"] = kBf16Tolerance;
  j["rows"] = json::array();
  for (const Row& r : rows) {
    json x = {{"case", r.case_name}, {"backend", r.backend}, {"status", r.status}, {"note", r.note}};
    for (const CaseSpec& s : kCases) {
      if (s.name != r.case_name) continue;
      x["phase"] = s.decode ? "decode" : "prefill";
      x["batch"] = s.batch;
      x["new_tokens"] = s.new_tokens;
      x["cached_tokens"] = s.cached_tokens;
      x["kv_len"] = s.cached_tokens + s.new_tokens;
    }
    if (r.timing.launches > 0) {
      x["ms"] = r.ms;
      x["ms_min"] = r.timing.min_s * 1e3;
      x["ms_max"] = r.timing.max_s * 1e3;
      x["launches"] = r.timing.launches;
      x["repeats"] = r.timing.repeats;
      if (r.tflops > 0) x["tflops"] = r.tflops;
      if (r.kv_tbps > 0) x["kv_tbps"] = r.kv_tbps;
      if (r.pct_copy > 0) x["pct_copy_bw"] = r.pct_copy;
    }
    if (r.max_err >= 0) x["max_abs_err"] = std::isinf(r.max_err) ? json("non-finite") : json(r.max_err);
    j["rows"].push_back(x);
  }
  return j;
}

bool selected(const std::vector<std::string>& filter, const std::string& name) {
  return filter.empty() || std::find(filter.begin(), filter.end(), name) != filter.end();
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  Options opt;
  CLI::App app{"Spindle CUDA paged attention benchmark (cuda_flash, cudnn_sdpa)"};
  app.add_option("--only", opt.only, "run only this phase")->check(CLI::IsMember({"prefill", "decode"}));
  std::vector<std::string> case_names, backend_names;
  for (const auto& c : kCases) case_names.push_back(c.name);
  app.add_option("--case", opt.cases, "run only these cases")->delimiter(',')->check(CLI::IsMember(case_names));
  app.add_option("--backend", opt.backends, "run only these backends")->delimiter(',')->check(CLI::IsMember(kBackends));
  app.add_option("--device", opt.device, "CUDA device ordinal (cudaSetDevice)");
  app.add_option("--json", opt.json_path, "also write the numbers as JSON to this file");
  app.add_option("--min-ms", opt.min_ms, "minimum milliseconds per timed batch")->check(CLI::PositiveNumber);
  app.add_option("--repeats", opt.repeats, "timed batches; the median is reported")->check(CLI::Range(1, 101));
  app.add_option("--samples", opt.samples, "(row, head) outputs checked against float64")->check(CLI::Range(1, 1000));
  CLI11_PARSE(app, argc, argv);

  DeviceFacts dev;
  cudaStream_t stream = nullptr;
  try {
    CUDA_CHECK(cudaSetDevice(opt.device));
    cudaDeviceProp prop{};
    CUDA_CHECK(cudaGetDeviceProperties(&prop, opt.device));
    dev.name = prop.name;
    dev.cc_major = prop.major;
    dev.cc_minor = prop.minor;
    dev.num_sms = prop.multiProcessorCount;
    dev.total_gib = double(prop.totalGlobalMem) / double(1 << 30);
    CUDA_CHECK(cudaDriverGetVersion(&dev.driver_version));
    CUDA_CHECK(cudaRuntimeGetVersion(&dev.runtime_version));
    CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_attention_cuda: no usable CUDA device %d: %s\n", opt.device, e.what());
    return 2;
  }
  std::printf("device %d: %s, compute capability %d.%d, %d SMs, %.1f GiB; CUDA driver %d, runtime %d\n", opt.device,
              dev.name.c_str(), dev.cc_major, dev.cc_minor, dev.num_sms, dev.total_gib, dev.driver_version,
              dev.runtime_version);
  std::printf("shape: %d query heads over %d KV heads, head_dim %d, page size %d, bf16 KV, f32 q/out, scale 1/sqrt(%d)\n",
              kNumHeads, kNumKvHeads, kHeadDim, kPageSize, kHeadDim);
  std::printf("timing: 3 warm-up launches, median of %d batches of >= %.0f ms of back-to-back launches (cudaEvents)\n",
              opt.repeats, opt.min_ms);

  const CopyRate copy = measure_copy(dev, stream, opt);
  if (copy.error.empty()) {
    std::printf("copy bandwidth (%zu MiB device-to-device, read + write): cudaMemcpyAsync %.3f TB/s, "
                "16-byte copy kernel %.3f TB/s; best %.3f TB/s\n",
                copy.bytes >> 20, copy.memcpy_tbps, copy.kernel_tbps, copy.best());
  } else {
    std::printf("copy bandwidth: failed (%s)\n", copy.error.c_str());
  }

  std::vector<Row> rows;
  bool broken = false;
  for (const CaseSpec& spec : kCases) {
    if (!opt.only.empty() && opt.only != (spec.decode ? "decode" : "prefill")) continue;
    if (!selected(opt.cases, spec.name)) continue;
    std::vector<std::string> backends;
    for (const auto& b : kBackends) {
      if (b == "cuda_flash_prefill" && !spec.decode) continue;  // that is cuda_flash on prefill cases
      if (selected(opt.backends, b)) backends.push_back(b);
    }
    if (broken) {
      for (const auto& b : backends) rows.push_back(make_row(spec.name, b, "not run", "CUDA context broken by an earlier error"));
      continue;
    }
    std::printf("\n%s: batch %d x (%d cached + %d new), kv_len %d", spec.name.c_str(), spec.batch, spec.cached_tokens,
                spec.new_tokens, spec.cached_tokens + spec.new_tokens);
    try {
      CaseData data(spec, dev.num_sms, stream);
      if (spec.decode) {
        std::printf(": %.1f MB of KV per step\n", data.kv_bytes() / 1e6);
      } else {
        std::printf(": %.1f GFLOP (causal)\n", data.causal_flops() / 1e9);
      }
      const std::vector<Sample> samples = reference_samples(data, opt.samples);
      for (const auto& b : backends) {
        if (broken) {
          rows.push_back(make_row(spec.name, b, "not run", "CUDA context broken by an earlier error"));
          continue;
        }
        rows.push_back(run_backend(data, b, dev, copy, samples, stream, opt));
        const Row& r = rows.back();
        std::printf("  %-20s %s%s%s\n", b.c_str(), r.status.c_str(), r.note.empty() ? "" : ": ", r.note.c_str());
        if (r.status == "error" && !context_usable()) broken = true;
      }
    } catch (const std::exception& e) {
      std::printf("\n  case setup failed: %s\n", e.what());
      for (const auto& b : backends) rows.push_back(make_row(spec.name, b, "error", std::string("case setup: ") + e.what()));
      if (!context_usable()) broken = true;
    }
  }
  print_table(rows);
  if (broken) {
    std::printf("\nA CUDA error left the context unusable; rerun the 'not run' rows alone (--case, --backend).\n");
  }

  if (!opt.json_path.empty()) {
    std::ofstream f(opt.json_path);
    f << to_json(dev, copy, rows, opt).dump(2) << "\n";
    if (!f) {
      std::fprintf(stderr, "bench_attention_cuda: could not write %s\n", opt.json_path.c_str());
      return 1;
    }
  }
  const bool failed = std::any_of(rows.begin(), rows.end(), [](const Row& r) { return r.status != "ok" && r.status != "skipped"; });
  return failed ? 3 : 0;
}
