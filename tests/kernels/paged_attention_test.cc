// The CPU attention kernels against paged_attention_reference (float64 accumulation).
//
// Tolerances (max abs error per output element; inputs uniform in [-1, 1], scale 1/sqrt(head_dim),
// so outputs are convex combinations of V rows and O(1)):
//   kF32Math  = 1e-4  avx2, avx512 without bf16 dot, any KV dtype (amx with f32 KV runs this path).
//                     K/V are read exactly (the reference reads the same bf16 pages), so only f32
//                     rounding of dot products (<= 256 terms), the polynomial exp (~2e-7 relative)
//                     and the online-softmax rescaling differ. Observed max 1.8e-7 over the grid.
//   kBf16Math = 5e-3  avx512 with bf16 dot, amx (bf16 KV). q (and for amx P) are rounded to bf16
//                     (relative 2^-9): scores |s| <= ~3 move by up to ~6e-3, softmax weights by as
//                     much relatively, and the output, a weighted mean of values in [-1, 1], by about
//                     1e-3. Observed max (Xeon with AMX, 2026-11-29): 1.2e-3 bf16 dot, 1.8e-3 amx.
// FP8 (fp8_e4m3) KV, in the grid: kernel and reference read the same scaled FP8 pages (written by
// write_kv_pages), the reference exactly in float64, the kernels as fp8 * scale rounded once to f32
// (relative 2^-24) and then as f32 KV: the kernel's tolerance(k) above (every kernel runs its f32
// path on FP8 pages). The quantization itself: Fp8KvWithinQuantizationBound, below.
#include "kernels/cpu/paged_attention.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "platform/cpu_info.h"
#include "util/error.h"
#include "util/fp8.h"
#include "util/half.h"
#include "util/thread_pool.h"

namespace spindle::kernels::cpu {
namespace {

constexpr double kF32Math = 1e-4;
constexpr double kBf16Math = 5e-3;

enum class Kernel { kAvx2, kAvx512, kAvx512Bf16, kAmx };

std::string kernel_name(Kernel k) {
  switch (k) {
    case Kernel::kAvx2: return "avx2";
    case Kernel::kAvx512: return "avx512";
    case Kernel::kAvx512Bf16: return "avx512bf16dot";
    case Kernel::kAmx: return "amx";
  }
  return "?";
}

const CpuInfo& cpu() {
  static const CpuInfo info = detect_cpu_info();
  return info;
}

// Empty when the kernel can run here, else why not.
std::string missing_features(Kernel k) {
  std::vector<const char*> need = {"avx2", "fma", "f16c"};
  if (k != Kernel::kAvx2) need.insert(need.end(), {"avx512f", "avx512bw", "avx512vl"});
  if (k == Kernel::kAvx512Bf16 || k == Kernel::kAmx) need.push_back("avx512_bf16");
  if (k == Kernel::kAmx) need.insert(need.end(), {"amx_tile", "amx_bf16"});
  std::string missing;
  for (const char* f : need)
    if (!cpu().has(f)) missing += std::string(missing.empty() ? "" : ", ") + f;
  return missing.empty() ? "" : "cpu lacks " + missing;
}

void run_kernel(Kernel k, const PagedAttentionParams& p) {
  switch (k) {
    case Kernel::kAvx2: paged_attention_avx2(p); break;
    case Kernel::kAvx512: paged_attention_avx512(p, false); break;
    case Kernel::kAvx512Bf16: paged_attention_avx512(p, true); break;
    case Kernel::kAmx: paged_attention_amx(p); break;
  }
}

double tolerance(Kernel k) { return (k == Kernel::kAvx2 || k == Kernel::kAvx512) ? kF32Math : kBf16Math; }

struct SeqSpec {
  int num_new;
  int num_cached;
};

// A batch with random q and KV pages; pages of each sequence scattered over a shuffled pool.
struct Problem {
  int num_heads, num_kv_heads, head_dim, page_size;
  DType kv_dtype;
  bool causal = true;
  std::vector<SeqSpec> specs;
  std::vector<float> q;
  std::vector<uint8_t> k_pages, v_pages;
  std::vector<float> k_scales, v_scales;     // FP8 KV only: per KV head (see the constructor)
  std::vector<std::vector<int32_t>> tables;  // per sequence (tests may edit them before params())
  std::vector<StepSequence> seqs;            // page_table_offset into flat_tables
  mutable std::vector<int32_t> flat_tables;  // tables concatenated, refreshed by params()
  int num_pages = 0;

  // score_ramp > 0: q is shifted to [-0.5, 1.5] and every key row gets a_t = 2 score_ramp t /
  // ((total - 1) sqrt(head_dim)) added to each element, so that a query's scores grow by about
  // score_ramp (natural units) from the first key to the last (a running max that keeps rising).
  Problem(int heads, int kv_heads, int dim, int page, DType dtype, std::vector<SeqSpec> s, uint32_t seed,
          float score_ramp = 0.0f)
      : num_heads(heads), num_kv_heads(kv_heads), head_dim(dim), page_size(page), kv_dtype(dtype), specs(std::move(s)) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> uni(-1.0f, 1.0f);
    if (dtype == DType::kF8E4M3) {  // every head its own scale (values in [-1, 1] stay below 448 * scale)
      for (int h = 0; h < kv_heads; ++h) {
        k_scales.push_back((1.0f + 0.5f * float(h % 3)) / 448.0f);
        v_scales.push_back((1.5f - 0.25f * float(h % 2)) / 448.0f);
      }
    }
    int64_t rows = 0;
    for (const auto& sp : specs) {
      num_pages += (sp.num_cached + sp.num_new + page_size - 1) / page_size;
      rows += sp.num_new;
    }
    num_pages += 3;  // unused pages too
    std::vector<int32_t> ids(num_pages);
    std::iota(ids.begin(), ids.end(), 0);
    std::shuffle(ids.begin(), ids.end(), rng);
    const int64_t row = int64_t{num_kv_heads} * head_dim;
    const size_t bytes = size_t(num_pages) * page_size * row * dtype_size(dtype);
    k_pages.assign(bytes, 0xff);  // NaN-ish fill for bf16 and f32: unwritten slots must not be read
    v_pages.assign(bytes, 0xff);
    int next = 0, offset = 0, table_offset = 0;
    for (const auto& sp : specs) {
      const int n = (sp.num_cached + sp.num_new + page_size - 1) / page_size;
      tables.emplace_back(ids.begin() + next, ids.begin() + next + n);
      next += n;
    }
    for (size_t i = 0; i < specs.size(); ++i) {
      // Every position (cached and new) written through write_kv_pages.
      const int total = specs[i].num_cached + specs[i].num_new;
      std::vector<float> k(total * row), v(total * row);
      for (auto& x : k) x = uni(rng);
      for (auto& x : v) x = uni(rng);
      if (score_ramp > 0.0f && total > 1) {
        for (int t = 0; t < total; ++t) {
          const float a = 2.0f * score_ramp * float(t) / (float(total - 1) * std::sqrt(float(head_dim)));
          for (int64_t e = 0; e < row; ++e) k[t * row + e] += a;
        }
      }
      StepSequence all;
      all.num_new_tokens = total;
      all.num_pages = static_cast<int32_t>(tables[i].size());
      KvGeometry kv;
      kv.num_kv_heads = num_kv_heads;
      kv.head_dim = head_dim;
      kv.page_size = page_size;
      kv.dtype = kv_dtype;
      kv.num_pages = num_pages;
      KvWriteParams w{k.data(), v.data(), k_pages.data(), v_pages.data(), kv, k_scales.data(), v_scales.data(),
                      std::span(&all, 1), tables[i].data()};
      write_kv_pages(w);
      StepSequence s;
      s.query_offset = offset;
      s.num_new_tokens = specs[i].num_new;
      s.num_cached_tokens = specs[i].num_cached;
      s.page_table_offset = table_offset;
      s.num_pages = static_cast<int32_t>(tables[i].size());
      seqs.push_back(s);
      offset += specs[i].num_new;
      table_offset += s.num_pages;
    }
    q.resize(rows * num_heads * head_dim);
    for (auto& x : q) x = uni(rng) + (score_ramp > 0.0f ? 0.5f : 0.0f);
  }

  int64_t num_rows() const { return count_query_rows(seqs); }

  PagedAttentionParams params(float* out, ThreadPool* pool) const {
    PagedAttentionParams p;
    p.q = q.data();
    p.out = out;
    p.k_pages = k_pages.data();
    p.v_pages = v_pages.data();
    p.kv.dtype = kv_dtype;
    p.kv.num_pages = num_pages;
    p.kv.page_size = page_size;
    p.num_heads = num_heads;
    p.kv.num_kv_heads = num_kv_heads;
    p.kv.head_dim = head_dim;
    p.scale = 1.0f / std::sqrt(float(head_dim));
    p.causal = causal;
    p.k_scales = k_scales.empty() ? nullptr : k_scales.data();
    p.v_scales = v_scales.empty() ? nullptr : v_scales.data();
    flat_tables.clear();
    for (const auto& t : tables) flat_tables.insert(flat_tables.end(), t.begin(), t.end());
    p.sequences = seqs;
    p.page_tables = flat_tables.data();
    p.pool = pool;
    return p;
  }

  std::vector<float> reference() const {
    std::vector<float> out(num_rows() * num_heads * head_dim, std::numeric_limits<float>::quiet_NaN());
    paged_attention_reference(params(out.data(), nullptr));
    return out;
  }
};

std::string describe(const Problem& pr) {
  std::string s = "heads " + std::to_string(pr.num_heads) + "/" + std::to_string(pr.num_kv_heads) +
                  " head_dim " + std::to_string(pr.head_dim) + " page " + std::to_string(pr.page_size) +
                  " kv " + std::string(dtype_name(pr.kv_dtype)) + (pr.causal ? " causal" : " non-causal") +
                  " seqs (new,cached):";
  for (const auto& sp : pr.specs) s += " (" + std::to_string(sp.num_new) + "," + std::to_string(sp.num_cached) + ")";
  return s;
}

void expect_matches_run(const std::function<void(const PagedAttentionParams&)>& run, const std::string& name,
                        double tol, const Problem& pr, const std::vector<float>& want, ThreadPool* pool) {
  std::vector<float> got(want.size(), std::numeric_limits<float>::quiet_NaN());
  run(pr.params(got.data(), pool));
  double worst = 0.0;
  size_t worst_at = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double err = std::isfinite(got[i]) ? std::abs(double(got[i]) - want[i]) : 1e30;
    if (err > worst) worst = err, worst_at = i;
  }
  EXPECT_LE(worst, tol) << name << " " << describe(pr) << (pool ? " pool" : " serial") << ": element " << worst_at
                        << " got " << got[worst_at] << " want " << want[worst_at];
}

void expect_matches(Kernel k, const Problem& pr, const std::vector<float>& want, ThreadPool* pool) {
  expect_matches_run([k](const PagedAttentionParams& p) { run_kernel(k, p); }, kernel_name(k), tolerance(k), pr, want,
                     pool);
}

ThreadPool& test_pool() {
  static ThreadPool pool(3);
  return pool;
}

// The grid: every head_dim the CPU backends are offered for (cpu_backend_head_dim_supported:
// multiples of 16 from 32 to 256) x KV dtype x page size 1 and 16 x GQA group 1, 4, 7. Batch 1 runs
// every (new, cached) pair for every shape; batches of 5 mix pairs, rotating.
const SeqSpec kPairs[] = {{1, 0},  {3, 5},  {17, 130}, {64, 0},  {1, 130}, {3, 0},
                          {17, 5}, {64, 130}, {1, 5},  {3, 130}, {17, 0},  {64, 5}};
constexpr int kNumPairs = 12;
struct Gqa {
  int heads, kv_heads;
};
const Gqa kGqa[] = {{2, 2}, {4, 1}, {7, 1}};

using GridParam = std::tuple<Kernel, int, DType, int>;  // kernel, head_dim, kv dtype, page size

class PagedAttentionGrid : public ::testing::TestWithParam<GridParam> {};

TEST_P(PagedAttentionGrid, MatchesReference) {
  const auto [kernel, head_dim, dtype, page_size] = GetParam();
  if (const std::string why = missing_features(kernel); !why.empty()) GTEST_SKIP() << why;
  int rotation = head_dim / 16 + page_size + (dtype == DType::kBF16 ? 5 : 0);
  for (const Gqa& g : kGqa) {
    ++rotation;
    for (const SeqSpec& one : kPairs) {  // batch 1: every (new, cached) pair
      Problem pr(g.heads, g.kv_heads, head_dim, page_size, dtype, {one}, 1000 + rotation + one.num_new);
      const auto want = pr.reference();
      expect_matches(kernel, pr, want, &test_pool());
    }
    {
      std::vector<SeqSpec> five;
      for (int i = 0; i < 5; ++i) five.push_back(kPairs[(rotation * 5 + i) % kNumPairs]);
      Problem pr(g.heads, g.kv_heads, head_dim, page_size, dtype, five, 2000 + rotation);
      const auto want = pr.reference();
      expect_matches(kernel, pr, want, &test_pool());
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Grid, PagedAttentionGrid,
    ::testing::Combine(::testing::Values(Kernel::kAvx2, Kernel::kAvx512, Kernel::kAvx512Bf16, Kernel::kAmx),
                       ::testing::Range(kCpuBackendMinHeadDim, kCpuBackendMaxHeadDim + 1, kCpuBackendHeadDimStep),
                       ::testing::Values(DType::kF32, DType::kBF16, DType::kF8E4M3),
                       ::testing::Values(1, 16)),
    [](const ::testing::TestParamInfo<GridParam>& info) {
      return kernel_name(std::get<0>(info.param)) + "_d" + std::to_string(std::get<1>(info.param)) + "_" +
             std::string(dtype_name(std::get<2>(info.param))) + "_page" + std::to_string(std::get<3>(info.param));
    });

// The AVX2 decode paths against the reference: the small-head_dim decode path (tasks of one new
// token; paged_attention_avx2 picks it at head_dim <= kAvx2SmallDecodeMaxHeadDim) forced on at
// every head_dim, the generic tiled path forced, and the automatic choice. GQA groups 1, 2, 4, 8
// and 3 (a row remainder), key counts off the path's 256-key block and off 8 (1, 7, 255, 257, 982),
// a decode batch of 4 and a prefill whose last query block is one token, serial and split-KV.
class Avx2DecodePaths : public ::testing::TestWithParam<std::tuple<int, DType, int>> {};  // head_dim, kv, page

TEST_P(Avx2DecodePaths, MatchReference) {
  const auto [head_dim, dtype, page_size] = GetParam();
  if (const std::string why = missing_features(Kernel::kAvx2); !why.empty()) GTEST_SKIP() << why;
  const Gqa groups[] = {{2, 2}, {4, 2}, {16, 4}, {8, 1}, {6, 2}};
  const std::vector<std::vector<SeqSpec>> batches = {
      {{1, 0}}, {{1, 6}}, {{1, 254}}, {{1, 256}}, {{1, 981}}, {{1, 40}, {1, 255}, {1, 0}, {1, 130}}, {{17, 300}}};
  const std::pair<Avx2DecodePath, const char*> paths[] = {{Avx2DecodePath::kAuto, "avx2 auto"},
                                                          {Avx2DecodePath::kGeneric, "avx2 generic"},
                                                          {Avx2DecodePath::kSmallHeadDim, "avx2 small-head_dim"}};
  ThreadPool pool(4);
  uint32_t seed = 3000 + head_dim + page_size + (dtype == DType::kBF16 ? 1 : 0);
  for (const Gqa& g : groups) {
    for (const auto& batch : batches) {
      Problem pr(g.heads, g.kv_heads, head_dim, page_size, dtype, batch, ++seed);
      const auto want = pr.reference();
      for (const auto& [path, name] : paths) {
        const auto run = [path = path](const PagedAttentionParams& p) { paged_attention_avx2_path(p, path); };
        expect_matches_run(run, name, kF32Math, pr, want, nullptr);
        expect_matches_run(run, name, kF32Math, pr, want, &pool);
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Avx2, Avx2DecodePaths,
                         ::testing::Combine(::testing::Values(16, 32, 48, 64, 128),
                                            ::testing::Values(DType::kF32, DType::kBF16), ::testing::Values(1, 16)),
                         [](const ::testing::TestParamInfo<std::tuple<int, DType, int>>& info) {
                           return "d" + std::to_string(std::get<0>(info.param)) + "_" +
                                  std::string(dtype_name(std::get<1>(info.param))) + "_page" +
                                  std::to_string(std::get<2>(info.param));
                         });

class PagedAttentionKernel : public ::testing::TestWithParam<Kernel> {
 protected:
  void SetUp() override {
    if (const std::string why = missing_features(GetParam()); !why.empty()) GTEST_SKIP() << why;
  }
};

TEST_P(PagedAttentionKernel, NonCausal) {
  Problem pr(8, 2, 64, 16, DType::kBF16, {{17, 5}, {3, 130}, {1, 0}}, 7);
  pr.causal = false;
  const auto want = pr.reference();
  expect_matches(GetParam(), pr, want, &test_pool());
}

// Few tasks on a bigger pool: the key range is split and merged (decode and a short prefill).
TEST_P(PagedAttentionKernel, SplitKvLongContext) {
  ThreadPool pool(8);
  Problem decode(4, 1, 128, 16, DType::kBF16, {{1, 1500}}, 11);
  expect_matches(GetParam(), decode, decode.reference(), &pool);
  Problem prefill(2, 1, 64, 1, DType::kF32, {{5, 700}}, 12);
  expect_matches(GetParam(), prefill, prefill.reference(), &pool);
  // A prefill of more than 17 tokens over bf16 KV (avx2: transposed scores, softmax in base 2,
  // whose m must be back in natural units when the splits merge): 3 query blocks, so split too.
  Problem long_prefill(2, 1, 32, 16, DType::kBF16, {{40, 700}}, 13);
  expect_matches(GetParam(), long_prefill, long_prefill.reference(), &pool);
}

// Each row of a verify block (verify_tokens new after `cached`, next to 7 decode sequences) against
// the same row as a one-token decode step, alone and among the 7: bit for bit.
void check_verify_rows_are_decode_rows(Kernel kernel, int heads, int kv_heads, int dim, int verify_tokens, int cached,
                                       ThreadPool* pool, DType kv_dtype = DType::kBF16) {
  std::vector<SeqSpec> specs = {{verify_tokens, cached}};
  for (int i = 0; i < 7; ++i) specs.push_back({1, 100 + 60 * i});
  Problem pr(heads, kv_heads, dim, 16, kv_dtype, specs, 21);
  const size_t row_floats = size_t(heads) * dim;
  std::vector<float> verify(pr.num_rows() * row_floats);
  run_kernel(kernel, pr.params(verify.data(), pool));
  const std::vector<StepSequence> step = pr.seqs;
  const std::vector<float> step_q = pr.q;
  for (int i = 0; i < verify_tokens; ++i) {
    // Row i of the verify block as a one-token decode (rows are contiguous in batch order: its q
    // row first, then the other sequences' rows).
    StepSequence decode_row = step[0];
    decode_row.query_offset = 0;
    decode_row.num_new_tokens = 1;
    decode_row.num_cached_tokens = cached + i;
    for (const bool with_others : {false, true}) {
      pr.seqs = {decode_row};
      pr.q.assign(step_q.begin() + i * row_floats, step_q.begin() + (i + 1) * row_floats);
      if (with_others) {
        for (size_t k = 1; k < step.size(); ++k) {
          pr.seqs.push_back(step[k]);
          pr.seqs.back().query_offset = static_cast<int32_t>(k);
        }
        pr.q.insert(pr.q.end(), step_q.begin() + verify_tokens * row_floats, step_q.end());
      }
      std::vector<float> decode(pr.num_rows() * row_floats, std::numeric_limits<float>::quiet_NaN());
      run_kernel(kernel, pr.params(decode.data(), pool));
      const size_t at = size_t(i) * row_floats;
      EXPECT_EQ(0, std::memcmp(verify.data() + at, decode.data(), sizeof(float) * row_floats))
          << kernel_name(kernel) << " " << dtype_name(kv_dtype) << " KV, heads " << heads << "/" << kv_heads
          << " head_dim " << dim << ", verify row " << i
          << " of " << verify_tokens << " after " << cached << (with_others ? " among 7 decodes" : " alone")
          << (pool ? " pool" : " serial");
    }
  }
}

// A step of few decode sequences gives each thread a task by putting the KV heads in groups
// (make_plan): 5 KV heads on 3 threads, one sequence of 600 keys (2 key splits of 384, so 2 tasks
// with all heads) become groups of 2, 2 and 1 heads; on 2 threads (splits of 512) groups of 3 and 2.
// Every head of every row against the float64 reference. (VerifyRowsAreDecodeRowsBitForBit checks
// that a row's bits do not depend on its group: its decode steps alone are grouped, among 7 not.)
TEST_P(PagedAttentionKernel, DecodeHeadGroupsCoverEveryHead) {
  for (int threads : {2, 3}) {
    ThreadPool pool(threads);
    Problem one(10, 5, 64, 16, DType::kBF16, {{1, 600}}, 31);
    expect_matches(GetParam(), one, one.reference(), &pool);
    Problem two(15, 5, 32, 16, DType::kBF16, {{1, 200}, {1, 900}}, 32);
    expect_matches(GetParam(), two, two.reference(), &pool);
  }
}

// A speculative verify's rows are the rows of one-token decode steps, bit for bit, whatever the
// step holds: greedy speculation gives plain decoding's tokens only then. Verify blocks of 3-17 new
// tokens (GQA 1, 3 and 4; 40-700 cached) run in a step with 7 decode sequences; each of their rows
// again as a decode step alone and as a decode step among the 7. Before the decode-sized sequences' fixed
// key splits (paged_attention_tiled.h), the step's other sequences changed how many splits a row's
// keys got, and so its bits (SpecEngineTest.GreedyIsIdenticalOnEveryCpuAttentionBackend flipped a
// near-tie).
TEST_P(PagedAttentionKernel, VerifyRowsAreDecodeRowsBitForBit) {
  struct Case {
    int heads, kv_heads, dim, verify_tokens, cached;
  };
  for (const Case c : {Case{8, 2, 64, 5, 700}, Case{6, 2, 64, 5, 90}, Case{6, 2, 64, 17, 300}, Case{8, 8, 32, 3, 40},
                       Case{10, 5, 64, 4, 200}})
    for (ThreadPool* pool : {&test_pool(), static_cast<ThreadPool*>(nullptr)})
      check_verify_rows_are_decode_rows(GetParam(), c.heads, c.kv_heads, c.dim, c.verify_tokens, c.cached, pool);
}

// The same on FP8 pages: decode-sized tasks read the FP8 rows in the micro-kernels (avx2, avx512 and
// amx's avx512 path), and a verify block is decode-sized too, so its rows take the same path.
TEST_P(PagedAttentionKernel, VerifyRowsAreDecodeRowsBitForBitFp8) {
  for (const auto& [heads, kv_heads, dim, verify_tokens, cached] :
       {std::tuple{8, 2, 64, 5, 700}, std::tuple{6, 2, 128, 17, 300}, std::tuple{8, 8, 32, 3, 40}})
    for (ThreadPool* pool : {&test_pool(), static_cast<ThreadPool*>(nullptr)})
      check_verify_rows_are_decode_rows(GetParam(), heads, kv_heads, dim, verify_tokens, cached, pool, DType::kF8E4M3);
}

// Scores that rise by ~12 along the keys: the running max keeps growing, so the online softmax
// rescales O and l well after a task's first key tile (cpu_amx rebases only when a score exceeds
// its reference max by 2^8, so this is where its rebase path runs: head_dim 32 and 64 keep O in
// tiles, 128 in memory; page 16 reads K in place, page 1 copies it). Same tolerance: q's bf16
// rounding moves a score of ~12 by ~2e-3 at most, the weights by as much.
TEST_P(PagedAttentionKernel, RisingScores) {
  struct Case {
    int heads, kv_heads, dim, page, num_new, cached;
  };
  for (const Case c : {Case{4, 2, 32, 16, 200, 100}, Case{4, 2, 64, 16, 150, 0}, Case{8, 2, 128, 16, 100, 200},
                       Case{4, 2, 32, 1, 120, 40}}) {
    Problem pr(c.heads, c.kv_heads, c.dim, c.page, DType::kBF16, {{c.num_new, c.cached}, {1, 300}}, 31, 12.0f);
    expect_matches(GetParam(), pr, pr.reference(), &test_pool());
  }
}

TEST_P(PagedAttentionKernel, SerialAndHeadDim136) {
  Problem pr(6, 2, 136, 16, DType::kBF16, {{33, 20}, {1, 40}}, 13);
  const auto want = pr.reference();
  expect_matches(GetParam(), pr, want, nullptr);
}

TEST_P(PagedAttentionKernel, RejectsHeadDimNotMultipleOf8) {
  Problem pr(2, 1, 20, 16, DType::kBF16, {{2, 3}}, 14);
  std::vector<float> out(pr.num_rows() * 2 * 20);
  EXPECT_THROW(run_kernel(GetParam(), pr.params(out.data(), nullptr)), Error);
}

TEST_P(PagedAttentionKernel, RejectsPageOutOfRange) {
  Problem pr(2, 1, 64, 16, DType::kBF16, {{2, 30}}, 15);
  pr.tables[0][1] = pr.num_pages;
  std::vector<float> out(pr.num_rows() * 2 * 64);
  EXPECT_THROW(run_kernel(GetParam(), pr.params(out.data(), nullptr)), Error);
}

INSTANTIATE_TEST_SUITE_P(Kernels, PagedAttentionKernel,
                         ::testing::Values(Kernel::kAvx2, Kernel::kAvx512, Kernel::kAvx512Bf16, Kernel::kAmx),
                         [](const ::testing::TestParamInfo<Kernel>& info) { return kernel_name(info.param); });

TEST(PagedAttentionParams, PageOutOfRangeIsAnError) {
  Problem pr(2, 1, 64, 16, DType::kF32, {{2, 30}}, 21);
  std::vector<float> out(pr.num_rows() * 2 * 64);
  pr.tables[0][1] = -1;
  EXPECT_THROW(paged_attention_reference(pr.params(out.data(), nullptr)), Error);
  pr.tables[0][1] = pr.num_pages;
  try {
    check_paged_attention_params(pr.params(out.data(), nullptr), pr.num_rows());
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("outside [0, " + std::to_string(pr.num_pages) + ")"), std::string::npos)
        << e.message();
  }
}

TEST(PagedAttentionParams, OtherErrors) {
  Problem pr(4, 2, 64, 16, DType::kF32, {{2, 3}}, 22);
  std::vector<float> out(pr.num_rows() * 4 * 64);
  auto p = pr.params(out.data(), nullptr);
  EXPECT_NO_THROW(check_paged_attention_params(p, pr.num_rows()));
  EXPECT_THROW(check_paged_attention_params(p, pr.num_rows() + 1), Error);  // row count mismatch
  auto bad = p;
  bad.kv.num_kv_heads = 3;
  EXPECT_THROW(check_paged_attention_params(bad, pr.num_rows()), Error);
  bad = p;
  bad.kv.dtype = DType::kF8E4M3;
  EXPECT_THROW(check_paged_attention_params(bad, pr.num_rows()), Error);
  bad = p;
  bad.k_pages = nullptr;
  EXPECT_THROW(check_paged_attention_params(bad, pr.num_rows()), Error);
  std::vector<StepSequence> seqs(pr.seqs);
  seqs[0].query_offset = 1;
  bad = p;
  bad.sequences = seqs;
  EXPECT_THROW(check_paged_attention_params(bad, pr.num_rows()), Error);
  EXPECT_TRUE(cpu_attention_head_dim_supported(80));
  EXPECT_FALSE(cpu_attention_head_dim_supported(84));
  EXPECT_FALSE(cpu_attention_head_dim_supported(0));
}

TEST(WriteKvPages, PlacesRowsByPageTableAndRoundsToBf16) {
  const int page_size = 4, kv_heads = 2, dim = 8, num_pages = 5;
  const int64_t row = kv_heads * dim;
  const std::vector<int32_t> table = {3, 0, 4};  // positions 0-3 in page 3, 4-7 in page 0, 8- in page 4
  StepSequence seq;  // writes positions 6, 7, 8
  seq.num_new_tokens = 3;
  seq.num_cached_tokens = 6;
  seq.num_pages = static_cast<int32_t>(table.size());
  std::vector<float> k(3 * row), v(3 * row);
  for (size_t i = 0; i < k.size(); ++i) {
    k[i] = 1.0f + float(i) / 3.0f;  // not exactly representable in bf16
    v[i] = -float(i) - 0.001f;
  }
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    std::vector<uint8_t> kp(num_pages * page_size * row * dtype_size(dtype), 0);
    std::vector<uint8_t> vp(kp.size(), 0);
    const KvGeometry kv{/*num_layers=*/1, kv_heads, dim, page_size, dtype, num_pages, /*first_page=*/0};
    write_kv_pages({k.data(), v.data(), kp.data(), vp.data(), kv, nullptr, nullptr, std::span(&seq, 1), table.data()});
    auto at = [&](const std::vector<uint8_t>& pages, int64_t slot, int64_t e) -> float {
      if (dtype == DType::kF32) return reinterpret_cast<const float*>(pages.data())[slot * row + e];
      return bf16_bits_to_float(reinterpret_cast<const uint16_t*>(pages.data())[slot * row + e]);
    };
    auto expect_value = [&](float got, float src) {
      if (dtype == DType::kF32) {
        EXPECT_EQ(got, src);
      } else {
        EXPECT_EQ(got, bf16_bits_to_float(float_to_bf16_bits(src)));
      }
    };
    const int64_t slots[3] = {0 * page_size + 2, 0 * page_size + 3, 4 * page_size + 0};  // pos 6, 7, 8
    int64_t nonzero = 0;
    for (int i = 0; i < 3; ++i) {
      for (int64_t e = 0; e < row; ++e) {
        expect_value(at(kp, slots[i], e), k[i * row + e]);
        expect_value(at(vp, slots[i], e), v[i * row + e]);
      }
    }
    for (int64_t slot = 0; slot < num_pages * page_size; ++slot)
      for (int64_t e = 0; e < row; ++e) nonzero += at(kp, slot, e) != 0.0f;
    EXPECT_EQ(nonzero, 3 * row);  // nothing else touched
  }
}

// FP8 pages written by write_kv_pages: x / scale of the element's head, rounded to nearest even
// (the float64 definition: fp8_e4m3_to_float of the written byte is the representable value
// nearest x / scale, compared against every finite code), values beyond +-448 * scale saturate to
// +-448 (0x7E / 0xFE, never NaN), NaN stays NaN, and missing scales are an error.
TEST(WriteKvPagesFp8, ScaledRoundedSaturatedNaNKept) {
  const int kv_heads = 2, dim = 8, page_size = 4;
  const int64_t row = int64_t{kv_heads} * dim;
  const std::vector<float> k_scales = {0.5f, 2.0f}, v_scales = {0.25f, 1.0f};
  std::vector<float> k(row), v(row);
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> uni(-300.0f, 300.0f);
  for (auto& x : k) x = uni(rng);
  for (auto& x : v) x = uni(rng);
  // Beyond the range of each head's scale (448 * 0.5 = 224, 448 * 2 = 896, 448 * 0.25 = 112, 448).
  k[0] = 1e6f, k[1] = -225.0f, k[dim] = -2000.0f, k[dim + 1] = std::numeric_limits<float>::infinity();
  v[0] = 113.0f, v[1] = -1e30f, v[dim] = 449.0f * 1.0f + 100.0f;
  k[2] = std::numeric_limits<float>::quiet_NaN();
  v[dim + 2] = -std::numeric_limits<float>::quiet_NaN();
  StepSequence seq;
  seq.num_new_tokens = 1;
  seq.num_cached_tokens = 5;
  seq.num_pages = 2;
  const std::vector<int32_t> table = {1, 0};
  std::vector<uint8_t> kp(size_t(2) * page_size * row, 0), vp(kp.size(), 0);
  const KvGeometry kv{1, kv_heads, dim, page_size, DType::kF8E4M3, 2, 0};
  write_kv_pages({k.data(), v.data(), kp.data(), vp.data(), kv, k_scales.data(), v_scales.data(), std::span(&seq, 1),
                  table.data()});
  const int64_t slot = 0 * page_size + 1;  // position 5: page table entry 1 (page 0), offset 1
  auto nearest = [](double x) {  // the float64 definition: the nearest finite E4M3 value, saturated
    double best = 0.0, best_err = 1e300;
    for (int b = 0; b < 256; ++b) {
      const double y = fp8_e4m3_to_float(uint8_t(b));
      if (std::isnan(y)) continue;
      const double err = std::abs(y - x);
      if (err < best_err) best = y, best_err = err;
    }
    return best;
  };
  auto check = [&](const std::vector<uint8_t>& pages, const std::vector<float>& src, const std::vector<float>& scales) {
    for (int64_t e = 0; e < row; ++e) {
      const uint8_t byte = pages[size_t(slot * row + e)];
      const float x = src[size_t(e)];
      const double scaled = double(x) / scales[size_t(e / dim)];
      if (std::isnan(x)) {
        EXPECT_TRUE(std::isnan(fp8_e4m3_to_float(byte))) << e;
        continue;
      }
      EXPECT_FALSE(std::isnan(fp8_e4m3_to_float(byte))) << "element " << e << " = " << x << " became NaN";
      if (std::abs(scaled) >= 448.0) {
        EXPECT_EQ(byte, scaled > 0 ? 0x7E : 0xFE) << "element " << e << " = " << x << " must saturate";
      } else {
        EXPECT_EQ(fp8_e4m3_to_float(byte), nearest(scaled)) << "element " << e << " = " << x;
      }
    }
  };
  check(kp, k, k_scales);
  check(vp, v, v_scales);
  // Every other slot untouched.
  for (int64_t i = 0; i < int64_t(kp.size()); ++i)
    if (i / row != slot) EXPECT_EQ(kp[size_t(i)], 0) << i;
  EXPECT_THROW(write_kv_pages({k.data(), v.data(), kp.data(), vp.data(), kv, nullptr, v_scales.data(),
                               std::span(&seq, 1), table.data()}),
               Error);
  const std::vector<float> zero = {0.0f, 1.0f};
  EXPECT_THROW(write_kv_pages({k.data(), v.data(), kp.data(), vp.data(), kv, zero.data(), v_scales.data(),
                               std::span(&seq, 1), table.data()}),
               Error);
}

// Every E4M3 code read exactly, by every kernel and the reference, on both FP8 paths (a decode row:
// the rows read in the micro-kernels; the first row of a 40-token prefill: tiles converted first).
// Token 0's V row holds all 256 codes (KV head 0: 0x00..0x7F, head 1: 0x80..0xFF); a row that sees
// one key has the softmax weight exp(0) = 1, so its output is that V row: element d must be
// fp8_e4m3_to_float(code) * v_scale (computed in double, exact: 4 x 24 significant bits, then rounded
// once to float, as the kernels' one f32 product), equal as floats, and NaN for the codes 0x7F, 0xFF.
// The random K rows move only the score, which one key does not weigh. (The grid checks K in
// tolerance; its uniform values round to subnormal codes too rarely to tell a wrong one.)
TEST(PagedAttentionFp8, EveryCodeReadsExactly) {
  const int heads = 8, kv_heads = 2, dim = 128, page_size = 16;
  Problem pr(heads, kv_heads, dim, page_size, DType::kF8E4M3, {{1, 0}, {40, 0}}, 91);
  const int64_t row = int64_t{kv_heads} * dim;
  for (const auto& table : pr.tables)  // token 0 of each sequence: slot 0 of its first page
    for (int64_t e = 0; e < row; ++e) pr.v_pages[size_t(int64_t{table[0]} * page_size * row + e)] = uint8_t(e);
  std::vector<std::pair<std::string, std::function<void(const PagedAttentionParams&)>>> runs = {
      {"reference", paged_attention_reference}};
  for (Kernel k : {Kernel::kAvx2, Kernel::kAvx512, Kernel::kAvx512Bf16, Kernel::kAmx}) {
    if (missing_features(k).empty()) runs.push_back({kernel_name(k), [k](const PagedAttentionParams& p) { run_kernel(k, p); }});
  }
  for (const auto& [name, run] : runs) {
    std::vector<float> got(size_t(pr.num_rows()) * heads * dim, 0.0f);
    run(pr.params(got.data(), &test_pool()));
    int wrong = 0;
    for (const int token_row : {0, 1}) {  // the decode row; the prefill's first row
      for (int h = 0; h < heads; ++h) {
        const int kv_head = h / (heads / kv_heads);
        for (int d = 0; d < dim; ++d) {
          const uint8_t code = uint8_t(kv_head * dim + d);
          const float out = got[(size_t(token_row) * heads + h) * dim + d];
          const bool nan_code = (code & 0x7F) == 0x7F;
          const float want = float(double(fp8_e4m3_to_float(code)) * double(pr.v_scales[size_t(kv_head)]));
          const bool ok = nan_code ? std::isnan(out) : out == want;  // (-0 reads as +0: O sums from +0)
          if (!ok && ++wrong <= 5) {
            ADD_FAILURE() << name << (token_row == 0 ? " decode" : " prefill") << " row, head " << h << ": code 0x"
                          << std::hex << int(code) << std::dec << " read as " << out << ", want "
                          << (nan_code ? std::numeric_limits<float>::quiet_NaN() : want);
          }
        }
      }
    }
    EXPECT_EQ(wrong, 0) << name;
  }
}

// FP8 KV against the float64 reference over the unquantized values (the same problem, seed and
// draws, with f32 pages): the error FP8 quantization may cause, bounded from E4M3's definition.
// An element x stored as fp8(x / s) * s is within 2^-4 |x| (3 mantissa bits: half an ulp relative to
// the leading bit) or, below the normal range (|x| < 2^-6 s), within 2^-10 s (half the subnormal step
// 2^-9 s). Then per output element:
//   V part: |sum_j p_j dv_j| <= 2^-4 max|v| + 2^-10 max(s_v)
//   K part: each score moves by at most delta = scale * max_j sum_d |q_d| (2^-4 |k_jd| + 2^-10 s_k),
//           so each softmax weight by at most a factor e^{+-2 delta}: |sum_j dp_j v_j| <=
//           (e^{2 delta} - 1) max|v|
// plus f32 arithmetic (kF32Math). Every kernel and the reference reading FP8 pages must meet it; the
// mean error must also stay under the V part alone (errors of both signs average out).
TEST(PagedAttentionFp8, WithinQuantizationBound) {
  const int heads = 8, kv_heads = 2, dim = 64, page_size = 16;
  const std::vector<SeqSpec> specs = {{1, 0}, {1, 37}, {17, 130}, {3, 5}, {1, 400}};
  Problem fp8(heads, kv_heads, dim, page_size, DType::kF8E4M3, specs, 77);
  Problem exact(heads, kv_heads, dim, page_size, DType::kF32, specs, 77);
  ASSERT_EQ(fp8.q, exact.q);
  const auto want = exact.reference();
  // The bound's inputs, over the exact (f32) pages.
  const auto* kf = reinterpret_cast<const float*>(exact.k_pages.data());
  const auto* vf = reinterpret_cast<const float*>(exact.v_pages.data());
  const size_t num_floats = exact.k_pages.size() / sizeof(float);
  double max_v = 0.0, max_q = 0.0, max_k_row = 0.0;
  for (size_t i = 0; i < num_floats; ++i)
    if (!std::isnan(vf[i])) max_v = std::max(max_v, double(std::abs(vf[i])));  // (unwritten slots: 0xff NaN)
  for (float x : exact.q) max_q = std::max(max_q, double(std::abs(x)));
  const double max_sk = *std::max_element(fp8.k_scales.begin(), fp8.k_scales.end());
  const double max_sv = *std::max_element(fp8.v_scales.begin(), fp8.v_scales.end());
  for (size_t r = 0; r < num_floats / dim; ++r) {  // sum_d (2^-4 |k_d| + 2^-10 s_k) per written key row and head
    double sum = 0.0;
    bool written = true;
    for (int d = 0; d < dim; ++d) {
      const float x = kf[r * dim + d];
      written = written && !std::isnan(x);
      sum += std::ldexp(std::abs(double(x)), -4) + std::ldexp(max_sk, -10);
    }
    if (written) max_k_row = std::max(max_k_row, sum);
  }
  const double delta = max_q * max_k_row / std::sqrt(double(dim));
  const double v_part = std::ldexp(max_v, -4) + std::ldexp(max_sv, -10);
  const double bound = v_part + (std::exp(2.0 * delta) - 1.0) * max_v + kF32Math;
  std::vector<std::pair<std::string, std::function<void(const PagedAttentionParams&)>>> runs = {
      {"reference", paged_attention_reference}};
  for (Kernel k : {Kernel::kAvx2, Kernel::kAvx512, Kernel::kAmx}) {
    if (missing_features(k).empty()) runs.push_back({kernel_name(k), [k](const PagedAttentionParams& p) { run_kernel(k, p); }});
  }
  for (const auto& [name, run] : runs) {
    std::vector<float> got(want.size(), std::numeric_limits<float>::quiet_NaN());
    run(fp8.params(got.data(), &test_pool()));
    double worst = 0.0, sum = 0.0;
    for (size_t i = 0; i < want.size(); ++i) {
      const double err = std::isfinite(got[i]) ? std::abs(double(got[i]) - want[i]) : 1e30;
      worst = std::max(worst, err);
      sum += err;
    }
    EXPECT_LE(worst, bound) << name << " (delta " << delta << ", V part " << v_part << ")";
    EXPECT_LE(sum / double(want.size()), v_part) << name;
    EXPECT_GT(worst, 0.0) << name << ": FP8 pages read as exact values? (the quantization must show)";
  }
}

}  // namespace
}  // namespace spindle::kernels::cpu
