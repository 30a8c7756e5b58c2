// cudnn_sdpa: per step, q (f32) is converted into an io-type scratch, cuDNN's inputs (sequence
// lengths, page tables [B, T], ragged offsets) are built on the device from the batch, the
// cached plan for the batch signature runs, and its output is converted back into out (f32).
//
// Batch signature (plan cache key): B = num_sequences rounded up to a power of two (the extra
// sequences are 1-token padding sequences), Sq = 1 for decode steps (one new token each) else
// max_new_tokens rounded up to a power of two >= 64, Skv = max_kv_len rounded up to a power of
// two >= 64 (multiples of 64 are what cuDNN < 9.6 needs for the bottom-right causal mask), the
// Q/O layout, causal, and the page count. Decode steps need no causal mask (the one row sees
// every key).
//
// Q/O layout: packed rows with ragged offsets where cuDNN supports them with paged K/V
// (cuDNN >= 9.8 on Hopper+, >= 9.18.1 elsewhere; SPINDLE_CUDNN_RAGGED=0/1 overrides, for tests); otherwise
// padded [B, Sq, H, D], which costs B * Sq rows of scratch. A ragged graph that no engine accepts
// falls back to padded for the rest of the process. SPINDLE_LOG_LEVEL=trace logs every step.
#include "kernels/cuda/cudnn_sdpa.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <bit>
#include <chrono>
#include <cstdlib>
#include <limits>
#include <map>
#include <string_view>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cudnn_api.h"
#include "kernels/cuda/cudnn_sdpa_convert.h"
#include "kernels/cuda/cudnn_sdpa_plan.h"
#include "kernels/cuda/device_buffer.h"
#include "util/error.h"
#include "util/switches.h"

namespace spindle::kernels::cuda {
namespace {

constexpr size_t kMinVersion = 90500;  // paged K/V (PAGED_CACHE_LOAD) in the fused engine
constexpr int kMinSeqBucket = 64;
constexpr size_t kScratchAlign = 256;

// SPINDLE_LOG_LEVEL=trace logs each graph build step, the engine chosen and the plan (the former
// SPINDLE_CUDNN_DEBUG=1).
bool debug_enabled() { return spdlog::should_log(spdlog::level::trace); }

const char* kv_type_name(detail::KvType t) {
  switch (t) {
    case detail::KvType::kF32: return "f32";
    case detail::KvType::kBF16: return "bf16";
    case detail::KvType::kF16: return "f16";
    case detail::KvType::kFp8: return "fp8_e4m3";
  }
  return "unknown";
}

// Why the loaded cuDNN cannot serve (empty when it can).
std::string library_gap() {
  const CudnnApi* api = cudnn_api();
  if (api == nullptr) return fmt::format("cuDNN not available: {}", cudnn_load_error());
  if (api->version < kMinVersion) {
    return fmt::format("cuDNN {} found, needs >= 9.5", cudnn_version_string(api->version));
  }
  if (api->version >= 100000) {
    return fmt::format("cuDNN {} found, this build uses the cuDNN 9 API (needs 9.x >= 9.5)",
                       cudnn_version_string(api->version));
  }
  if (api->version == 91000 || api->version == 91001) {
    return fmt::format("cuDNN {} found, its SDPA forward has known bugs (needs 9.10.2 or another 9.x >= 9.5)",
                       cudnn_version_string(api->version));
  }
  return {};
}

// The largest head_dim cuDNN's fused flash attention serves for both prefill and decode over
// paged K/V: 256 on Hopper (sm 9.x) with cuDNN >= 9.10, 128 otherwise (paged attention before
// 9.10; decode on Ampere/Ada and Blackwell).
int max_head_dim(int cc_major, size_t version) { return cc_major == 9 && version >= 91000 ? 256 : 128; }

// Whether packed Q/O with ragged offsets is supported together with paged K/V.
bool ragged_supported(int cc_major, size_t version) {
  const std::string& forced = switches().cudnn_ragged;  // SPINDLE_CUDNN_RAGGED (tests of both layouts)
  if (!forced.empty()) return forced == "1";
  return version >= 90800 && (cc_major >= 9 || version >= 91801);
}

int round_up_pow2(int n, int minimum) {
  return static_cast<int>(std::bit_ceil(static_cast<unsigned>(std::max(n, minimum))));
}

size_t align_up(size_t n) { return (n + kScratchAlign - 1) / kScratchAlign * kScratchAlign; }

// Grows by at least half its size, so slowly growing batches do not reallocate every step.
void grow(DeviceBuffer& buffer, size_t bytes) {
  if (bytes > buffer.size()) buffer.reserve(std::max(bytes, buffer.size() + buffer.size() / 2));
}

struct PlanKey {
  int batch = 0;
  int max_q = 0;
  int max_kv = 0;
  int num_pages = 0;
  bool ragged = false;
  bool causal = false;
  auto operator<=>(const PlanKey&) const = default;
};

}  // namespace

std::vector<std::string> cudnn_sdpa_unsupported_reasons(int cc_major, int cc_minor, int head_dim,
                                                        detail::KvType kv_type, int page_size) {
  std::vector<std::string> reasons;
  if (std::string gap = library_gap(); !gap.empty()) reasons.push_back(std::move(gap));
  if (cc_major < 8) {
    reasons.push_back(fmt::format("compute capability {}.{}: cuDNN fused flash attention needs 8.0 or newer "
                                  "(Ampere; Hopper 9.0 is fine)",
                                  cc_major, cc_minor));
  }
  if (kv_type != detail::KvType::kBF16 && kv_type != detail::KvType::kF16) {
    reasons.push_back(fmt::format("KV dtype {} not supported (bf16, f16)", kv_type_name(kv_type)));
  }
  const CudnnApi* api = cudnn_api();
  const int limit = max_head_dim(cc_major, api != nullptr ? api->version : 91000);
  if (head_dim % 8 != 0) {
    reasons.push_back(fmt::format("head_dim {} not supported (cuDNN fused attention needs a multiple of 8)", head_dim));
  } else if (head_dim > limit) {
    reasons.push_back(limit == 256 ? fmt::format("head_dim {} not supported (up to 256)", head_dim)
                                   : fmt::format("head_dim {} not supported (up to 128 here; up to 256 needs compute "
                                                 "capability 9.x and cuDNN >= 9.10)",
                                                 head_dim));
  }
  // cuDNN's paged cache load takes the page ("block") size as a power of two (seen on cuDNN 9.19:
  // "block size needs to be non-zero and a power of 2").
  if (page_size < 1 || (page_size & (page_size - 1)) != 0) {
    reasons.push_back(fmt::format("page size {} not supported (cuDNN paged K/V needs a power of 2)", page_size));
  }
  return reasons;
}

struct CudnnSdpa::Impl {
  int num_heads = 0;
  int num_kv_heads = 0;
  int head_dim = 0;
  detail::KvType kv_type = detail::KvType::kBF16;
  int page_size = 0;

  const CudnnApi* api = nullptr;
  cudnnHandle_t handle = nullptr;  // created on the first run, on the current device
  bool ragged_allowed = false;
  std::map<PlanKey, std::unique_ptr<CudnnSdpaPlan>> plans;
  DeviceBuffer q_io, o_io, meta, workspace;

  ~Impl() {
    plans.clear();  // before the handle they were built on
    if (handle != nullptr) api->Destroy(handle);
  }

  void init() {
    int device = 0;
    int cc_major = 0;
    int cc_minor = 0;
    CUDA_CHECK(cudaGetDevice(&device));
    CUDA_CHECK(cudaDeviceGetAttribute(&cc_major, cudaDevAttrComputeCapabilityMajor, device));
    CUDA_CHECK(cudaDeviceGetAttribute(&cc_minor, cudaDevAttrComputeCapabilityMinor, device));
    cudnn_check(*api, api->Create(&handle), "cudnnCreate");
    ragged_allowed = ragged_supported(cc_major, api->version);
    if (debug_enabled()) {
      spdlog::info("cudnn_sdpa: cuDNN {} from {} (its CUDA runtime {}), device {} sm {}.{}, Q/O layout {}",
                   cudnn_version_string(api->version), api->path, api->GetCudartVersion(), device, cc_major,
                   cc_minor, ragged_allowed ? "ragged for prefill" : "padded");
    }
  }

  // The plan for `key`; builds it on first use. A ragged graph no engine accepts switches this
  // object to the padded layout (key.ragged is cleared in place).
  CudnnSdpaPlan& plan_for(PlanKey& key) {
    if (auto it = plans.find(key); it != plans.end()) return *it->second;
    CudnnSdpaShape shape;
    shape.batch = key.batch;
    shape.num_heads = num_heads;
    shape.num_kv_heads = num_kv_heads;
    shape.head_dim = head_dim;
    shape.max_q = key.max_q;
    shape.max_kv = key.max_kv;
    shape.page_size = page_size;
    shape.num_pages = key.num_pages;
    shape.io_type = kv_type == detail::KvType::kF16 ? CUDNN_DATA_HALF : CUDNN_DATA_BFLOAT16;
    shape.ragged = key.ragged;
    shape.causal = key.causal;
    std::unique_ptr<CudnnSdpaPlan> plan;
    const auto build_start = std::chrono::steady_clock::now();
    try {
      plan = std::make_unique<CudnnSdpaPlan>(*api, handle, shape, debug_enabled());
    } catch (const Error& e) {
      if (!key.ragged) throw;
      spdlog::warn("cudnn_sdpa: no cuDNN engine for packed (ragged) Q/O, using the padded layout: {}", e.message());
      ragged_allowed = false;
      key.ragged = false;
      return plan_for(key);
    }
    // Every new batch signature builds a plan (tens of ms where a step takes a few): logged, so a
    // served run shows what they cost.
    const double build_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - build_start).count();
    spdlog::info("cudnn_sdpa: plan {} built in {:.1f} ms ({}), engine {}, workspace {} bytes", plans.size() + 1,
                 build_ms, shape.describe(), plan->engine_index(), plan->workspace_bytes());
    return *plans.emplace(key, std::move(plan)).first->second;
  }
};

CudnnSdpa::CudnnSdpa(int num_heads, int num_kv_heads, int head_dim, float scale, detail::KvType kv_type,
                     int page_size)
    : impl_(std::make_unique<Impl>()) {
  (void)scale;  // the launch carries it (PagedLayerLaunch::scale)
  const std::string gap = library_gap();
  SPINDLE_CHECK(gap.empty(), "cudnn_sdpa: {}", gap);
  SPINDLE_CHECK(kv_type == detail::KvType::kBF16 || kv_type == detail::KvType::kF16,
                "cudnn_sdpa: KV dtype {} not supported (bf16, f16)", kv_type_name(kv_type));
  SPINDLE_CHECK(num_heads > 0 && num_kv_heads > 0 && num_heads % num_kv_heads == 0,
                "cudnn_sdpa: num_heads {} must be a multiple of num_kv_heads {}", num_heads, num_kv_heads);
  SPINDLE_CHECK(head_dim > 0 && head_dim % 8 == 0, "cudnn_sdpa: head_dim {} must be a multiple of 8", head_dim);
  SPINDLE_CHECK(page_size > 0, "cudnn_sdpa: page_size {} must be positive", page_size);
  impl_->num_heads = num_heads;
  impl_->num_kv_heads = num_kv_heads;
  impl_->head_dim = head_dim;
  impl_->kv_type = kv_type;
  impl_->page_size = page_size;
  impl_->api = cudnn_api();
}

CudnnSdpa::~CudnnSdpa() = default;

void CudnnSdpa::run(const detail::PagedLayerLaunch& a, cudaStream_t stream) {
  Impl& m = *impl_;
  const detail::PagedBatchView& batch = a.batch;
  if (batch.num_rows == 0 || batch.num_sequences == 0) return;
  const KvGeometry& kv = a.kv;
  const detail::KvType kv_type = detail::kv_type_of(kv);
  SPINDLE_CHECK(a.num_heads == m.num_heads && kv.num_kv_heads == m.num_kv_heads && kv.head_dim == m.head_dim &&
                    kv_type == m.kv_type && kv.page_size == m.page_size,
                "cudnn_sdpa: launch shape (heads {}/{}, head_dim {}, KV {}, page_size {}) differs from the one it "
                "was created for (heads {}/{}, head_dim {}, KV {}, page_size {})",
                a.num_heads, kv.num_kv_heads, kv.head_dim, kv_type_name(kv_type), kv.page_size, m.num_heads,
                m.num_kv_heads, m.head_dim, kv_type_name(m.kv_type), m.page_size);
  SPINDLE_CHECK(kv.num_pages > 0 && batch.max_new_tokens >= 1 && batch.max_kv_len >= batch.max_new_tokens,
                "cudnn_sdpa: bad batch (pages {}, max_new_tokens {}, max_kv_len {})", kv.num_pages,
                batch.max_new_tokens, batch.max_kv_len);
  if (m.handle == nullptr) m.init();

  const bool decode = batch.max_new_tokens == 1;
  PlanKey key;
  key.batch = round_up_pow2(batch.num_sequences, 1);
  key.max_q = decode ? 1 : round_up_pow2(batch.max_new_tokens, kMinSeqBucket);
  key.max_kv = round_up_pow2(batch.max_kv_len, kMinSeqBucket);
  key.num_pages = kv.num_pages;
  key.ragged = !decode && m.ragged_allowed;
  key.causal = batch.causal && !decode;
  const CudnnSdpaPlan& plan = m.plan_for(key);  // may clear key.ragged

  const int64_t row_elems = int64_t{m.num_heads} * m.head_dim;
  detail::CudnnSdpaConvertParams cp;
  cp.sequences = batch.sequences;
  cp.num_sequences = batch.num_sequences;
  cp.batch = key.batch;
  cp.num_rows = batch.num_rows;
  cp.padded_q_len = key.ragged ? 0 : key.max_q;
  cp.row_elems = row_elems;
  cp.io_type = m.kv_type;
  const int64_t scratch_rows = detail::cudnn_sdpa_scratch_rows(cp);
  SPINDLE_CHECK(!key.ragged || (scratch_rows + 1) * row_elems < std::numeric_limits<int32_t>::max(),
                "cudnn_sdpa: {} rows of {} elements overflow cuDNN's int32 ragged offsets", scratch_rows, row_elems);

  // Scratch: Q and O (plus Sq rows of slack past the last sequence), then the metadata arrays.
  const size_t io_bytes = static_cast<size_t>((scratch_rows + key.max_q) * row_elems) * 2;
  const int table_width = static_cast<int>((key.max_kv + m.page_size - 1) / m.page_size);
  const size_t lens_bytes = align_up(sizeof(int32_t) * key.batch);
  const size_t ragged_bytes = align_up(sizeof(int32_t) * (key.batch + 1));
  const size_t table_bytes = align_up(sizeof(int32_t) * key.batch * table_width);
  grow(m.q_io, io_bytes);
  grow(m.o_io, io_bytes);
  grow(m.meta, 2 * lens_bytes + ragged_bytes + table_bytes);
  grow(m.workspace, static_cast<size_t>(plan.workspace_bytes()));
  char* meta = m.meta.as<char>();

  detail::CudnnSdpaPrepareParams pp;
  pp.sequences = batch.sequences;
  pp.page_tables = batch.page_tables;
  pp.num_sequences = batch.num_sequences;
  pp.batch = key.batch;
  pp.num_rows = batch.num_rows;
  pp.page_size = m.page_size;
  pp.table_width = table_width;
  pp.row_elems = row_elems;
  pp.seq_len_q = reinterpret_cast<int32_t*>(meta);
  pp.seq_len_kv = reinterpret_cast<int32_t*>(meta + lens_bytes);
  pp.ragged_offsets = key.ragged ? reinterpret_cast<int32_t*>(meta + 2 * lens_bytes) : nullptr;
  pp.page_table = reinterpret_cast<int32_t*>(meta + 2 * lens_bytes + ragged_bytes);
  detail::launch_cudnn_sdpa_prepare(pp, stream);
  detail::launch_cudnn_sdpa_q_to_io(cp, a.q, m.q_io.data(), stream);

  CudnnSdpaBuffers buffers;
  buffers.q = m.q_io.data();
  buffers.o = m.o_io.data();
  buffers.k_pages = a.k_pages;
  buffers.v_pages = a.v_pages;
  buffers.seq_len_q = pp.seq_len_q;
  buffers.seq_len_kv = pp.seq_len_kv;
  buffers.page_table = pp.page_table;
  buffers.ragged_offsets = pp.ragged_offsets;
  buffers.workspace = plan.workspace_bytes() > 0 ? m.workspace.data() : nullptr;
  cudnn_check(*m.api, m.api->SetStream(m.handle, stream), "cudnnSetStream");
  plan.execute(m.handle, buffers, a.scale);

  detail::launch_cudnn_sdpa_o_to_f32(cp, m.o_io.data(), a.out, stream);
}

}  // namespace spindle::kernels::cuda
