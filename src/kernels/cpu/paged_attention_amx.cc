// Paged attention with AMX-BF16 tiles for the two matrix products, softmax in AVX-512 f32.
//
// A task (one KV head, a query block of M <= 16 rows = block tokens x GQA group) walks the keys
// in tiles of 32:
//   S^T [32 keys x 16 rows] = K [32 keys x D] . Q^T          A = K rows: tile loads straight from
//                                                                the pages where a 16-key half is one
//                                                                page's run and D % 32 == 0, else a
//                                                                gathered, zero-padded copy,
//                                                            B = Q^T in pair-interleaved (VNNI) form,
//                                                                built once per task (vector transpose)
//   online softmax on S^T: one zmm per key, lane = query row (all vertical ops)
//   O [16 rows x D] += P [16 x 32 keys] . V [32 keys x D]    A = P (bf16; a 16x16 dword transpose of
//                                                                the key-pair vectors), B = V tile
//                                                                repacked to key-pair-interleaved form
// The scores of tile i + 1 are computed before the softmax of tile i (the AMX unit then works
// while the vector units do). O stays in tiles 4..7 for the whole task when D <= 64, else it lives
// in thread-local memory and goes through a tile block by block. Q and P are rounded to bf16; K and
// V are read exactly; accumulation is f32.
//
// The softmax runs in base 2: Q is pre-scaled by scale * log2(e), so S^T holds log2-domain scores
// and every exponential is a 2^x (one range reduction, a degree-3 polynomial). O and l are kept
// relative to a reference max per row that moves only when a score exceeds it by kRebaseLog2
// (P <= 2^8 in between), so most tiles rescale nothing. The reference max is converted back to
// natural units for finish_task, so split partials merge with the other kernels' convention (any
// reference gives the same merge). Key tiles that every real row sees in full (the causal mask's
// interior) skip the per-key visibility masks; padding rows (Q = 0) then hold finite scores that
// finish_task never writes.
//
// Tile configuration: loaded at the start of every AMX task and released (_tile_release) at its
// end. A per-thread "already configured" flag is not safe here: other AMX users on the same pool
// threads (oneDNN matmuls between attention calls) load their own configuration or release the
// tiles, and a stale flag would then compute garbage or fault. One ldtilecfg per task (>= one
// query block x all its keys) costs nothing measurable, and releasing returns the tile state to
// init so context switches do not save 8 KiB of tile data.
//
// The process must already hold AMX permission (arch_prctl ARCH_REQ_XCOMP_PERM; the backend
// requests it through platform/cpu_info). Decode-sized tasks (<= 8 rows per KV head), query
// blocks over 16 rows (GQA groups above 16) and f32 KV run the avx512 path (bf16 dot products
// for bf16 KV), where AMX would not win or does not apply; so do sequences of at most
// kDecodeSizedMaxNewTokens new tokens (speculative verifies: their rows must be the decode step's,
// and AMX rounds Q and P to bf16; paged_attention.h).
#include <immintrin.h>

#include "kernels/cpu/amx_tile_config.h"
#include "kernels/cpu/avx512_transpose.h"
#include "kernels/cpu/paged_attention.h"
#include "kernels/cpu/paged_attention_avx512_isa.h"
#include "kernels/cpu/paged_attention_tiled.h"

namespace spindle::kernels::cpu {
namespace {

constexpr int kAmxRows = 16;  // query rows per task (M), tile rows
constexpr int kAmxKeys = 32;  // keys per tile (two 16-key S^T tiles, one 32-key P.V step)
// kLog2E, kLn2: paged_attention_tiled.h.

// Tile registers, all 16 rows x 64 bytes (GCC's _tile_* macros paste the register number, so the
// calls below spell these numbers literally):
enum : int {
  kTileS = 0,   // C: S^T, 16 keys x 16 rows f32
  kTileKV = 1,  // A: 16 keys x 32 dims bf16 (S^T), then B: 16 key pairs x 16 dims (P.V)
  kTileQ = 2,   // B: 16 dim pairs x 16 rows
  kTileP = 3,   // A: 16 rows x 32 keys bf16
  kTileO = 4,   // C: O's 16-dim blocks 0..3 in tiles 4..7 (resident), or block by block in tile 4
};
constexpr int kMaxResidentBlocks = 4;  // O of head_dim <= 64 stays in tiles 4..7 for the whole task

// The scores may exceed a row's reference max by this much (log2 units) before O and l are rebased
// on a new one, so P <= 2^8 (finite in f32 and bf16) and most tiles skip the rescale of O.
constexpr float kRebaseLog2 = 8.0f;

struct AmxScratch {
  Scratch<uint16_t> q_pairs;  // [Dp / 2][16 rows][2]
  Scratch<uint16_t> k_tile;   // [32 keys][Dp], zero padded
  Scratch<uint16_t> v_pairs;  // [Dv / 16 blocks][16 key pairs][16 dims][2]
  Scratch<float> st;          // [2 tiles][32 keys][16 rows]
  Scratch<uint32_t> p_rows;   // [16 rows][16 key pairs]
  Scratch<float> o;           // [16 rows][Dv]
};

AmxScratch& amx_scratch() {
  thread_local AmxScratch scratch;
  return scratch;
}

// 2^x for finite x <= kRebaseLog2: one range reduction and a degree-3 minimax polynomial on
// [-1/2, 1/2], 7.5e-5 relative error (P is rounded to bf16 next: 2^-9). Under 2^-126 the result
// is a denormal or 0. Six vector instructions.
inline __m512 exp2_finite(__m512 x) {
  const __m512 n = _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m512 f = _mm512_sub_ps(x, n);  // [-1/2, 1/2]
  __m512 y = _mm512_set1_ps(5.517166853e-02f);
  y = _mm512_fmadd_ps(y, f, _mm512_set1_ps(2.426111251e-01f));
  y = _mm512_fmadd_ps(y, f, _mm512_set1_ps(6.932609677e-01f));
  y = _mm512_fmadd_ps(y, f, _mm512_set1_ps(9.999280572e-01f));
  return _mm512_scalef_ps(y, n);
}

// exp2_finite for x that may be -inf (masked keys, rows that saw no key yet): exactly 0 there and
// wherever x < -126.
inline __m512 exp2_masked(__m512 x) {
  const __mmask16 normal = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-126.0f), _CMP_GE_OQ);
  return _mm512_maskz_mov_ps(normal, exp2_finite(_mm512_max_ps(x, _mm512_set1_ps(-126.0f))));
}

inline __mmask32 word_mask(int count) {  // the first min(count, 32) 16-bit lanes
  return count >= 32 ? __mmask32(0xffffffffu) : count <= 0 ? __mmask32(0) : __mmask32((1u << count) - 1);
}

// Resident O: blocks [0, nb) of O in tiles 4..7 (nb <= kMaxResidentBlocks), o [16 rows][Dv] f32.
inline void o_tiles_zero(int nb) {
  _tile_zero(4);
  if (nb > 1) _tile_zero(5);
  if (nb > 2) _tile_zero(6);
  if (nb > 3) _tile_zero(7);
}
inline void o_tiles_store(float* o, int Dv, int nb) {
  _tile_stored(4, o, Dv * 4);
  if (nb > 1) _tile_stored(5, o + 16, Dv * 4);
  if (nb > 2) _tile_stored(6, o + 32, Dv * 4);
  if (nb > 3) _tile_stored(7, o + 48, Dv * 4);
}
inline void o_tiles_load(const float* o, int Dv, int nb) {
  _tile_loadd(4, o, Dv * 4);
  if (nb > 1) _tile_loadd(5, o + 16, Dv * 4);
  if (nb > 2) _tile_loadd(6, o + 32, Dv * 4);
  if (nb > 3) _tile_loadd(7, o + 48, Dv * 4);
}
// O_b += P . V_b for the resident blocks (P in tile 3, V's key-pair blocks in vp).
inline void o_tiles_accumulate(const uint16_t* vp, int nb) {
  _tile_loadd(1, vp, 64);
  _tile_dpbf16ps(4, 3, 1);
  if (nb > 1) {
    _tile_loadd(1, vp + 16 * 32, 64);
    _tile_dpbf16ps(5, 3, 1);
  }
  if (nb > 2) {
    _tile_loadd(1, vp + 2 * 16 * 32, 64);
    _tile_dpbf16ps(6, 3, 1);
  }
  if (nb > 3) {
    _tile_loadd(1, vp + 3 * 16 * 32, 64);
    _tile_dpbf16ps(7, 3, 1);
  }
}

// o[m][:] *= corr[m] for the 16 rows.
inline void scale_rows(float* o, int Dv, __m512 corr) {
  alignas(64) float corr_rows[kAmxRows];
  _mm512_store_ps(corr_rows, corr);
  for (int m = 0; m < kAmxRows; ++m) {
    const __m512 c = _mm512_set1_ps(corr_rows[m]);
    float* row = o + size_t(m) * Dv;
    for (int d = 0; d < Dv; d += 16) _mm512_store_ps(row + d, _mm512_mul_ps(_mm512_load_ps(row + d), c));
  }
}

void amx_task(const PagedAttentionParams& p, const Task& t, float* partials) {
  const int D = p.kv.head_dim;
  const int Dp = round_up(D, 32);  // K / Q dims, zero padded to whole 32-dim tiles
  const int Dv = round_up(D, 16);  // O / V dims, whole 16-dim blocks
  const int num_vblocks = Dv / 16;
  const bool resident = num_vblocks <= kMaxResidentBlocks;
  const int group = p.num_heads / p.kv.num_kv_heads;
  const auto& s = p.sequences[t.seq];
  const int M = (t.q_end - t.q_begin) * group;  // <= kAmxRows
  // K's 16-key halves are read by tile loads straight from the pages where a half is one page's
  // run of keys and its rows are whole 32-dim tiles; else they are copied into k_tile.
  const bool k_in_place = D % 32 == 0 && p.kv.page_size % 16 == 0;
  const int64_t kv_row = int64_t{p.kv.num_kv_heads} * D;  // elements from one key to the next in a page
  const auto* k_base = static_cast<const uint16_t*>(p.k_pages) + int64_t{t.kv_head} * D;

  AmxScratch& sc = amx_scratch();
  uint16_t* qp = sc.q_pairs.get(size_t(Dp) * kAmxRows);
  uint16_t* kt = sc.k_tile.get(size_t(kAmxKeys) * Dp);
  uint16_t* vp = sc.v_pairs.get(size_t(num_vblocks) * 16 * 32);
  float* st = sc.st.get(size_t(2) * kAmxKeys * kAmxRows);
  uint32_t* pr = sc.p_rows.get(size_t(kAmxRows) * 16);
  float* o = sc.o.get(size_t(kAmxRows) * Dv);

  // Q^T pairs: qp[(i * 16 + m) * 2 + e] = bf16(scale * log2(e) * q[m][2i + e]); zero past M rows or D dims.
  const float q_scale = p.scale * kLog2E;
  alignas(64) int limit[kAmxRows];
  int all_rows_see = std::numeric_limits<int>::max();  // keys [0, all_rows_see) are visible to every real row
  const float* q_src[kAmxRows];
  for (int m = 0; m < kAmxRows; ++m) {
    q_src[m] = nullptr;
    limit[m] = 0;  // padding rows see nothing
    if (m < M) {
      const RowCoord c = row_coord(group, t.kv_head, t.q_begin, M, m);
      q_src[m] = q_row(p, s, c.token, c.head);
      limit[m] = visible_keys(p, s, c.token);
      all_rows_see = imin(all_rows_see, limit[m]);
    }
  }
  // 32 dims at a time: row m's 16 bf16 pairs (one dword each), then a 16 x 16 dword transpose puts
  // pair i of every row in qp row i.
  const __m512 q_scale_v = _mm512_set1_ps(q_scale);
  for (int d0 = 0; d0 < Dp; d0 += 32) {
    __m512i w[kAmxRows];
    const __mmask16 lo_mask = _cvtu32_mask16(D - d0 >= 16 ? 0xffffu : (1u << imax(0, D - d0)) - 1);
    const __mmask16 hi_mask = _cvtu32_mask16(D - d0 >= 32 ? 0xffffu : (1u << imax(0, imin(16, D - d0 - 16))) - 1);
    for (int m = 0; m < kAmxRows; ++m) {
      if (q_src[m] == nullptr) {
        w[m] = _mm512_setzero_si512();
        continue;
      }
      const __m512 lo = _mm512_mul_ps(_mm512_maskz_loadu_ps(lo_mask, q_src[m] + d0), q_scale_v);
      const __m512 hi = _mm512_mul_ps(_mm512_maskz_loadu_ps(hi_mask, q_src[m] + d0 + 16), q_scale_v);
      w[m] = (__m512i)_mm512_cvtne2ps_pbh(hi, lo);  // bf16 of dims d0 .. d0 + 31, in order
    }
    transpose16x16(w);
    for (int i = 0; i < 16; ++i) _mm512_store_si512(qp + (size_t(d0 / 2) + i) * kAmxRows * 2, w[i]);
  }
  if (!resident) std::memset(o, 0, sizeof(float) * kAmxRows * Dv);
  const __m512i limits = _mm512_load_si512(limit);
  // Per row (lane): the reference max m_run of O and l (-inf until the row sees a key), and m_use,
  // the same but 0 where m_run is -inf, which the scores are taken relative to.
  __m512 m_run = _mm512_set1_ps(kNegInf);
  __m512 m_use = _mm512_setzero_ps();
  __m512 l_run = _mm512_setzero_ps();

  __m512i idx_lo, idx_hi;  // interleave two 32 x bf16 rows: (a[i], b[i]) for i in [0, 16) / [16, 32)
  {
    alignas(64) uint16_t lo[32], hi[32];
    for (int i = 0; i < 16; ++i) {
      lo[2 * i] = uint16_t(i);
      lo[2 * i + 1] = uint16_t(32 + i);
      hi[2 * i] = uint16_t(16 + i);
      hi[2 * i + 1] = uint16_t(48 + i);
    }
    idx_lo = _mm512_load_si512(lo);
    idx_hi = _mm512_load_si512(hi);
  }
  alignas(64) uint16_t pair_idx[32];  // [even keys 0..15 | odd keys 0..15] -> (even[m], odd[m]) pairs
  for (int i = 0; i < 16; ++i) {
    pair_idx[2 * i] = uint16_t(i);
    pair_idx[2 * i + 1] = uint16_t(16 + i);
  }
  const __m512i pair_perm = _mm512_load_si512(pair_idx);

  const uint16_t* k_rows[kAmxKeys];
  const uint16_t* v_rows[kAmxKeys];
  // S^T = K . Q^T of the tile at k0 (n keys) into st_out [32 keys][16 rows], two 16-key tiles (a
  // half without keys is left out: its scores are masked).
  const auto tile_scores = [&](int k0, int n, float* st_out) {
    if (k_in_place && k0 % 16 == 0) {
      for (int half = 0; half < 2 && half * 16 < n; ++half) {
        const int key = k0 + half * 16;
        const int64_t slot =
            int64_t{p.page_tables[s.page_table_offset + key / p.kv.page_size]} * p.kv.page_size + key % p.kv.page_size;
        const uint16_t* k_half = k_base + slot * kv_row;  // keys past n: the page's other slots, masked
        _tile_zero(0);
        for (int c = 0; c < Dp / 32; ++c) {
          _tile_loadd(1, k_half + c * 32, kv_row * 2);
          _tile_loadd(2, qp + size_t(c) * 16 * kAmxRows * 2, 64);
          _tile_dpbf16ps(0, 1, 2);
        }
        _tile_stored(0, st_out + half * 16 * kAmxRows, 64);
      }
      return;
    }
    // K tile, contiguous and zero padded (pages scatter keys; D may not fill the last 32 dims).
    gather_rows(p, s, p.k_pages, t.kv_head, k0, n, k_rows);
    for (int j = 0; j < kAmxKeys; ++j) {
      uint16_t* dst = kt + size_t(j) * Dp;
      for (int d = 0; d < Dp; d += 32) {
        const __m512i x = j < n ? _mm512_maskz_loadu_epi16(word_mask(D - d), k_rows[j] + d) : _mm512_setzero_si512();
        _mm512_store_si512(dst + d, x);
      }
    }
    for (int half = 0; half < 2; ++half) {
      _tile_zero(0);
      for (int c = 0; c < Dp / 32; ++c) {
        _tile_loadd(1, kt + size_t(half * 16) * Dp + c * 32, Dp * 2);
        _tile_loadd(2, qp + size_t(c) * 16 * kAmxRows * 2, 64);
        _tile_dpbf16ps(0, 1, 2);
      }
      _tile_stored(0, st_out + half * 16 * kAmxRows, 64);
    }
  };

  load_full_amx_tiles(8);
  if (resident) o_tiles_zero(num_vblocks);
  // The scores of the next tile are computed before this tile's softmax, so the AMX unit works on
  // them while the vector units run the softmax (st holds two tiles' scores, alternating).
  if (t.k_begin < t.k_end) tile_scores(t.k_begin, imin(kAmxKeys, t.k_end - t.k_begin), st);
  for (int k0 = t.k_begin, parity = 0; k0 < t.k_end; k0 += kAmxKeys, parity ^= 1) {
    const int n = imin(kAmxKeys, t.k_end - k0);
    const float* st_tile = st + parity * kAmxKeys * kAmxRows;
    if (k0 + kAmxKeys < t.k_end) {
      const int next_n = imin(kAmxKeys, t.k_end - k0 - kAmxKeys);
      if (k0 + 2 * kAmxKeys < t.k_end)
        prefetch_tile(p, s, t.kv_head, 1, k0 + 2 * kAmxKeys, imin(kAmxKeys, t.k_end - k0 - 2 * kAmxKeys));
      tile_scores(k0 + kAmxKeys, next_n, st + (parity ^ 1) * kAmxKeys * kAmxRows);
    }
    gather_rows(p, s, p.v_pages, t.kv_head, k0, n, v_rows);

    // Online softmax, lane = query row.
    __m512 sv[kAmxKeys];
    __m512 tile_max = _mm512_set1_ps(kNegInf);
    const bool full = n == kAmxKeys && k0 + kAmxKeys <= all_rows_see;  // every real row sees every key
    if (full) {
      for (int j = 0; j < kAmxKeys; ++j) {
        sv[j] = _mm512_load_ps(st_tile + j * kAmxRows);
        tile_max = _mm512_max_ps(tile_max, sv[j]);
      }
    } else {
      for (int j = 0; j < kAmxKeys; ++j) {
        const __mmask16 visible = j < n ? _mm512_cmpgt_epi32_mask(limits, _mm512_set1_epi32(k0 + j)) : __mmask16(0);
        sv[j] = _mm512_mask_mov_ps(_mm512_set1_ps(kNegInf), visible, _mm512_load_ps(st_tile + j * kAmxRows));
        tile_max = _mm512_max_ps(tile_max, sv[j]);
      }
    }
    // A row whose scores would exceed 2^kRebaseLog2 rebases O and l on its new max (the first
    // visible tile of every row does: m_run is -inf until then).
    if (_mm512_cmp_ps_mask(tile_max, _mm512_add_ps(m_run, _mm512_set1_ps(kRebaseLog2)), _CMP_GT_OQ) != 0) {
      const __m512 m_new = _mm512_max_ps(m_run, tile_max);
      const __mmask16 none = _mm512_cmp_ps_mask(m_new, _mm512_set1_ps(kNegInf), _CMP_EQ_OQ);
      m_use = _mm512_mask_mov_ps(m_new, none, _mm512_setzero_ps());
      const __m512 corr = exp2_masked(_mm512_sub_ps(m_run, m_use));  // 0 where m_run is -inf
      l_run = _mm512_mul_ps(l_run, corr);
      m_run = m_new;
      if (resident) {
        o_tiles_store(o, Dv, num_vblocks);
        scale_rows(o, Dv, corr);
        o_tiles_load(o, Dv, num_vblocks);
      } else {
        scale_rows(o, Dv, corr);
      }
    }
    __m512 sum = _mm512_setzero_ps();
    __m512i w[16];
    for (int i = 0; i < 16; ++i) {
      __m512 pe, po;
      if (full) {
        pe = exp2_finite(_mm512_sub_ps(sv[2 * i], m_use));
        po = exp2_finite(_mm512_sub_ps(sv[2 * i + 1], m_use));
      } else {
        pe = exp2_masked(_mm512_sub_ps(sv[2 * i], m_use));
        po = exp2_masked(_mm512_sub_ps(sv[2 * i + 1], m_use));
      }
      sum = _mm512_add_ps(sum, _mm512_add_ps(pe, po));
      const __m512i both = (__m512i)_mm512_cvtne2ps_pbh(po, pe);  // [bf16(pe) | bf16(po)]
      w[i] = _mm512_permutexvar_epi16(pair_perm, both);           // dword m = (pe[m], po[m])
    }
    l_run = _mm512_add_ps(l_run, sum);
    transpose16x16(w);  // w[m] = row m of P: 16 key pairs
    for (int m = 0; m < kAmxRows; ++m) _mm512_store_si512(pr + m * 16, w[m]);

    // V tile as key pairs: vp[((b * 16) + i) * 32 + 2 d + e] = V[2i + e][16 b + d]; zero past n / D.
    for (int i = 0; i < 16; ++i) {
      const bool has_a = 2 * i < n, has_b = 2 * i + 1 < n;
      for (int d = 0; d < Dv; d += 32) {
        const __mmask32 mask = word_mask(D - d);
        const __m512i a = has_a ? _mm512_maskz_loadu_epi16(mask, v_rows[2 * i] + d) : _mm512_setzero_si512();
        const __m512i b = has_b ? _mm512_maskz_loadu_epi16(mask, v_rows[2 * i + 1] + d) : _mm512_setzero_si512();
        const int blk = d / 16;
        _mm512_store_si512(vp + (size_t(blk) * 16 + i) * 32, _mm512_permutex2var_epi16(a, idx_lo, b));
        if (blk + 1 < num_vblocks)
          _mm512_store_si512(vp + (size_t(blk + 1) * 16 + i) * 32, _mm512_permutex2var_epi16(a, idx_hi, b));
      }
    }
    // O += P . V block by block.
    _tile_loadd(3, pr, 64);
    if (resident) {
      o_tiles_accumulate(vp, num_vblocks);
    } else {
      for (int b = 0; b < num_vblocks; ++b) {
        _tile_loadd(4, o + b * 16, Dv * 4);
        _tile_loadd(1, vp + size_t(b) * 16 * 32, 64);
        _tile_dpbf16ps(4, 3, 1);
        _tile_stored(4, o + b * 16, Dv * 4);
      }
    }
  }
  if (resident) o_tiles_store(o, Dv, num_vblocks);
  _tile_release();

  alignas(64) float m_out[kAmxRows], l_out[kAmxRows];
  _mm512_store_ps(m_out, _mm512_mul_ps(m_run, _mm512_set1_ps(kLn2)));  // back to natural units (-inf stays)
  _mm512_store_ps(l_out, l_run);
  finish_task(p, t, M, m_out, l_out, o, partials, Dv);
}

}  // namespace

void paged_attention_amx(const PagedAttentionParams& p) {
  check_optimized_attention_params(p, count_query_rows(p.sequences), "amx");
  if (p.kv.dtype != DType::kBF16) {
    paged_attention_avx512(p, false);
    return;
  }
  const int group = p.num_heads / p.kv.num_kv_heads;
  const Plan plan = make_plan(p, kAmxRows);
  run_plan(p, plan, [&](const Task& t, float* partials) {
    const int rows = (t.q_end - t.q_begin) * group;
    const bool verify_sized = p.sequences[static_cast<size_t>(t.seq)].num_new_tokens <= kDecodeSizedMaxNewTokens;
    if (t.num_heads == 1 && rows > kAllHeadsMaxRows && rows <= kAmxRows && !verify_sized) {
      amx_task(p, t, partials);
    } else {
      vector_task<Avx512>(p, t, partials, true);
    }
  });
}

}  // namespace spindle::kernels::cpu
