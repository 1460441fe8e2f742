// AVX-512 kernels (F, BW, VL, VNNI; compiled with -mavx512f -mavx512bw -mavx512vl
// -mavx512vnni -mavx2 -mfma -mf16c; only called when the CPU has all of them).
//
// The quantised dot products (decode, memory-bound) work on one 32-element block per 256-bit
// register with VNNI (vpdpbusd on ymm, AVX512VL; Zen 4 splits 512-bit ops in two halves):
//   Q4_0: unsigned nibbles (0..15) x signed Q8 activation, minus 8·Σx folded into the
//         accumulator's initial value (corr4 = -Σx broadcast to 8 lanes = -8·Σx in total);
//   Q8_0: (w ^ 0x80) = w + 128 unsigned x signed activation, minus 128·Σx (corr8 = -16·Σx per lane).
// F16/F32 use 512-bit FMAs with masked tails.
//
// Entries that fall back to the scalar code (not worth vectorising or exp-bound):
//   softmax, SwiGLU (exact expf per element), dequantRow.
// GCC 12's AVX-512 headers trigger false -W(maybe-)uninitialized warnings (_mm512_undefined_*).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "kernels.h"

namespace np {
namespace {

inline __mmask16 tailMask16(int64_t n) { return (__mmask16)((1u << n) - 1u); }

// ---- activation quantisation (bit-identical to the scalar code) ------------------------------

void quantizeQ8(const float* x, int64_t n, int8_t* qs, float* d, int32_t* sum) {
  const int64_t nb = n / QK;
  for (int64_t i = 0; i < nb; i++) {
    const __m512 v0 = _mm512_loadu_ps(x + i * QK), v1 = _mm512_loadu_ps(x + i * QK + 16);
    const __m512 a = _mm512_max_ps(_mm512_abs_ps(v0), _mm512_abs_ps(v1));
    const float amax = _mm512_reduce_max_ps(a);  // max is exact in any order
    const float dd = amax / 127.0f;
    const float id = amax != 0.0f ? 127.0f / amax : 0.0f;  // as llama.cpp's SIMD quantize_row_q8_0
    d[i] = fp16ToF32(f32ToFp16(dd));
    const __m512 vid = _mm512_set1_ps(id);
    __m512i s = _mm512_setzero_si512();
    for (int h = 0; h < 2; h++) {
      const __m512 v = _mm512_mul_ps(h ? v1 : v0, vid);
      const __m512 r = _mm512_roundscale_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);  // half to even
      const __m512i q = _mm512_cvttps_epi32(r);
      s = _mm512_add_epi32(s, q);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(qs + i * QK + 16 * h), _mm512_cvtepi32_epi8(q));
    }
    sum[i] = _mm512_reduce_add_epi32(s);
  }
}

inline float hsum256(__m256 v) {
  const __m128 lo = _mm256_castps256_ps128(v), hi = _mm256_extractf128_ps(v, 1);
  __m128 s = _mm_add_ps(lo, hi);
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// ---- quantised dots: R rows at a time share the activation loads. Every row does the
// exact same operation sequence whatever R is, so results do not depend on grouping. --------

// `next` (R pointers): the rows of the following group, prefetched block by block at the
// pace this group is consumed (hardware prefetchers lose track of many short row streams).
#define NP_PREFETCH(p) _mm_prefetch(reinterpret_cast<const char*>(p), _MM_HINT_T1)
#ifndef NP_AHEAD
#define NP_AHEAD 8
#endif

// Q4_0: pairs of blocks on 256 bits. [qs0|qs1] -> low nibbles [x0 0..15 | x1 0..15] and high
// nibbles [x0 16..31 | x1 16..31]; the activation is pre-permuted to match (Act::qp), so
// two vpdpbusd give lanes 0-3 = block 0 and 4-7 = block 1. Weight scales of 8 blocks come in
// with 8 word inserts and one vcvtph2ps (a gather is slower on Zen 4).
template <int R>
inline void dotQ4(const uint8_t* const* rows, const uint8_t* const* next, int64_t nb, const Act& x, float* out) {
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  const __m256i pidx0 = _mm256_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1);
  const __m256i two = _mm256_set1_epi32(2);
  __m256 acc[R];
  #pragma GCC unroll 16
  for (int r = 0; r < R; r++) acc[r] = _mm256_setzero_ps();
  int64_t b = 0;
  for (; b + 8 <= nb; b += 8) {
    #pragma GCC unroll 16
    for (int r = 0; r < R; r++) {
      const uint8_t* pf = next[r] + b * sizeof(BlockQ4_0);
      NP_PREFETCH(pf);
      NP_PREFETCH(pf + 64);
      NP_PREFETCH(pf + 128);
    }
    const __m256 dx8 = _mm256_loadu_ps(x.d + b);
    __m256 sc[R];
    #pragma GCC unroll 16
    for (int r = 0; r < R; r++) {
      const BlockQ4_0* blk = reinterpret_cast<const BlockQ4_0*>(rows[r]) + b;
      __m128i h = _mm_cvtsi32_si128(blk[0].d);
      h = _mm_insert_epi16(h, blk[1].d, 1);
      h = _mm_insert_epi16(h, blk[2].d, 2);
      h = _mm_insert_epi16(h, blk[3].d, 3);
      h = _mm_insert_epi16(h, blk[4].d, 4);
      h = _mm_insert_epi16(h, blk[5].d, 5);
      h = _mm_insert_epi16(h, blk[6].d, 6);
      h = _mm_insert_epi16(h, blk[7].d, 7);
      sc[r] = _mm256_mul_ps(_mm256_cvtph_ps(h), dx8);
    }
    __m256i pidx = pidx0;
    for (int p = 0; p < 4; p++) {
      const int8_t* xp = x.qp + (b + 2 * p) * QK;
      const __m256i xlo = _mm256_load_si256(reinterpret_cast<const __m256i*>(xp));
      const __m256i xhi = _mm256_load_si256(reinterpret_cast<const __m256i*>(xp + 32));
      const __m256i cv = _mm256_load_si256(reinterpret_cast<const __m256i*>(x.cvp + (b + 2 * p) * 4));
      #pragma GCC unroll 16
      for (int r = 0; r < R; r++) {
        const BlockQ4_0* blk = reinterpret_cast<const BlockQ4_0*>(rows[r]) + b + 2 * p;
        const __m256i v = _mm256_inserti128_si256(
            _mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk[0].qs))),
            _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk[1].qs)), 1);
        __m256i s = _mm256_dpbusd_epi32(cv, _mm256_and_si256(v, m4), xlo);
        s = _mm256_dpbusd_epi32(s, _mm256_and_si256(_mm256_srli_epi16(v, 4), m4), xhi);
        acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_permutevar8x32_ps(sc[r], pidx), acc[r]);
      }
      pidx = _mm256_add_epi32(pidx, two);
    }
  }
  for (; b + 2 <= nb; b += 2) {  // remaining pairs: same arithmetic, scalar scales
    const int8_t* xp = x.qp + b * QK;
    const __m256i xlo = _mm256_load_si256(reinterpret_cast<const __m256i*>(xp));
    const __m256i xhi = _mm256_load_si256(reinterpret_cast<const __m256i*>(xp + 32));
    const __m256i cv = _mm256_load_si256(reinterpret_cast<const __m256i*>(x.cvp + b * 4));
    #pragma GCC unroll 16
    for (int r = 0; r < R; r++) {
      const BlockQ4_0* blk = reinterpret_cast<const BlockQ4_0*>(rows[r]) + b;
      const __m256i v = _mm256_inserti128_si256(
          _mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk[0].qs))),
          _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk[1].qs)), 1);
      __m256i s = _mm256_dpbusd_epi32(cv, _mm256_and_si256(v, m4), xlo);
      s = _mm256_dpbusd_epi32(s, _mm256_and_si256(_mm256_srli_epi16(v, 4), m4), xhi);
      const float s0 = _cvtsh_ss(blk[0].d) * x.d[b], s1 = _cvtsh_ss(blk[1].d) * x.d[b + 1];
      const __m256 sp = _mm256_insertf128_ps(_mm256_castps128_ps256(_mm_set1_ps(s0)), _mm_set1_ps(s1), 1);
      acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), sp, acc[r]);
    }
  }
  if (b < nb) {  // odd block count: last block alone, natural activation layout
    const __m256i shifts = _mm256_setr_epi64x(0, 0, 4, 4);
    const __m256i xq = _mm256_load_si256(reinterpret_cast<const __m256i*>(x.qs + b * QK));
    const __m256i corr = _mm256_set1_epi32(x.corr4[b]);
    #pragma GCC unroll 16
    for (int r = 0; r < R; r++) {
      const BlockQ4_0* blk = reinterpret_cast<const BlockQ4_0*>(rows[r]) + b;
      __m256i w = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk->qs)));
      w = _mm256_and_si256(_mm256_srlv_epi64(w, shifts), m4);
      const __m256i s = _mm256_dpbusd_epi32(corr, w, xq);
      acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_set1_ps(_cvtsh_ss(blk->d) * x.d[b]), acc[r]);
    }
  }
  #pragma GCC unroll 16
  for (int r = 0; r < R; r++) out[r] = hsum256(acc[r]);
}

// A Q8_0 row's last block when the count is odd, on 256 bits: 8 lanes of its scaled partial dot.
inline __m256 lastBlockQ8(const BlockQ8_0* blk, __m256i xq, __m256i corr, __m256 dx) {
  const __m256i w = _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk->qs)), _mm256_set1_epi8((char)0x80));
  const __m256i s = _mm256_dpbusd_epi32(corr, w, xq);
  const __m256 dw = _mm256_cvtph_ps(_mm_set1_epi16((short)blk->d));
  return _mm256_mul_ps(_mm256_cvtepi32_ps(s), _mm256_mul_ps(dw, dx));
}

// Two Q8_0 blocks of a row on 512 bits (lanes 0-7 block 0, 8-15 block 1), scaled and added to acc.
inline __m512 pairFmaQ8(const BlockQ8_0* blk, __m512i xq, __m512i cv, __m512 dv, __m512 acc) {
  __m512i w = _mm512_inserti64x4(
      _mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk[0].qs))),
      _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk[1].qs)), 1);
  w = _mm512_xor_si512(w, _mm512_set1_epi8((char)0x80));
  const __m512i s = _mm512_dpbusd_epi32(cv, w, xq);
  const __m256i dh = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_set1_epi16((short)blk[0].d)),
                                             _mm_set1_epi16((short)blk[1].d), 1);
  return _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(_mm512_cvtph_ps(dh), dv), acc);
}

template <int R>
inline void dotQ8(const uint8_t* const* rows, const uint8_t* const* next, int64_t nb, const Act& x, float* out) {
  __m512 acc[R];
  #pragma GCC unroll 16
  for (int r = 0; r < R; r++) acc[r] = _mm512_setzero_ps();
  int64_t b = 0;
  for (; b + 2 <= nb; b += 2) {
    #pragma GCC unroll 16
    for (int r = 0; r < R; r++) {
      NP_PREFETCH(next[r] + b * sizeof(BlockQ8_0));
      NP_PREFETCH(next[r] + b * sizeof(BlockQ8_0) + 64);
    }
    const __m512i xq = _mm512_load_si512(x.qs + b * QK);
    const __m512i cv = _mm512_load_si512(x.corrv + b * 8);
    const __m512 dv = _mm512_load_ps(x.dv + b * 8);
    #pragma GCC unroll 16
    for (int r = 0; r < R; r++) {
      acc[r] = pairFmaQ8(reinterpret_cast<const BlockQ8_0*>(rows[r]) + b, xq, cv, dv, acc[r]);
    }
  }
  __m256 tail[R];
  #pragma GCC unroll 16
  for (int r = 0; r < R; r++) tail[r] = _mm256_setzero_ps();
  if (b < nb) {  // odd block count: last block on 256 bits
    const __m256i xq = _mm256_load_si256(reinterpret_cast<const __m256i*>(x.qs + b * QK));
    const __m256i corr = _mm256_set1_epi32(x.corr8[b]);
    const __m256 dx = _mm256_set1_ps(x.d[b]);
    #pragma GCC unroll 16
    for (int r = 0; r < R; r++) tail[r] = lastBlockQ8(reinterpret_cast<const BlockQ8_0*>(rows[r]) + b, xq, corr, dx);
  }
  #pragma GCC unroll 16
  for (int r = 0; r < R; r++) out[r] = _mm512_reduce_add_ps(acc[r]) + hsum256(tail[r]);
}

// Short Q8_0 rows (at most kShortBlocks blocks: a linear predictor's fc2, rank <= 256): a
// per-row horizontal sum costs more than such a row's dot, so 16 rows go together and their
// 16 accumulators are reduced at once (three shuffle-and-add stages and one lane permutation).
// Lanes never mix rows: a row's result does not depend on which rows share its group.
constexpr int64_t kShortBlocks = 8;

inline void dotQ8Short16(const uint8_t* const* rows, int64_t nb, const Act& x, float* out) {
  __m512 acc[16];
  #pragma GCC unroll 16
  for (int r = 0; r < 16; r++) acc[r] = _mm512_setzero_ps();
  int64_t b = 0;
  for (; b + 2 <= nb; b += 2) {
    const __m512i xq = _mm512_load_si512(x.qs + b * QK);
    const __m512i cv = _mm512_load_si512(x.corrv + b * 8);
    const __m512 dv = _mm512_load_ps(x.dv + b * 8);
    #pragma GCC unroll 16
    for (int r = 0; r < 16; r++) {
      acc[r] = pairFmaQ8(reinterpret_cast<const BlockQ8_0*>(rows[r]) + b, xq, cv, dv, acc[r]);
    }
  }
  if (b < nb) {  // odd block count: the last block on 256 bits, added to lanes 0-7
    const __m256i xq = _mm256_load_si256(reinterpret_cast<const __m256i*>(x.qs + b * QK));
    const __m256i corr = _mm256_set1_epi32(x.corr8[b]);
    const __m256 dx = _mm256_set1_ps(x.d[b]);
    #pragma GCC unroll 16
    for (int r = 0; r < 16; r++)
      acc[r] = _mm512_add_ps(acc[r], _mm512_zextps256_ps512(lastBlockQ8(reinterpret_cast<const BlockQ8_0*>(rows[r]) + b, xq, corr, dx)));
  }
  // 16 vectors -> lane r = the sum of acc[r]'s lanes. a_i: 128-bit quarters [2i: q0+q2, q1+q3 | 2i+1: …]
  __m512 a[8];
  #pragma GCC unroll 8
  for (int i = 0; i < 8; i++)
    a[i] = _mm512_add_ps(_mm512_shuffle_f32x4(acc[2 * i], acc[2 * i + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                         _mm512_shuffle_f32x4(acc[2 * i], acc[2 * i + 1], _MM_SHUFFLE(3, 2, 3, 2)));
  // c_j: quarter q holds 4 partial sums of row 4j + q
  __m512 c[4];
  #pragma GCC unroll 4
  for (int j = 0; j < 4; j++)
    c[j] = _mm512_add_ps(_mm512_shuffle_f32x4(a[2 * j], a[2 * j + 1], _MM_SHUFFLE(2, 0, 2, 0)),
                         _mm512_shuffle_f32x4(a[2 * j], a[2 * j + 1], _MM_SHUFFLE(3, 1, 3, 1)));
  // within each quarter: e lane (4q + j) = the sum of row 4j + q
  const __m512 d01 = _mm512_add_ps(_mm512_unpacklo_ps(c[0], c[1]), _mm512_unpackhi_ps(c[0], c[1]));
  const __m512 d23 = _mm512_add_ps(_mm512_unpacklo_ps(c[2], c[3]), _mm512_unpackhi_ps(c[2], c[3]));
  const __m512 e = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(d01), _mm512_castps_pd(d23))),
                                 _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(d01), _mm512_castps_pd(d23))));
  // lane r of the result is row r = 4j + q, found at lane 4q + j
  const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
  _mm512_storeu_ps(out, _mm512_permutexvar_ps(order, e));
}

template <bool F16>
inline __m512 loadW(const uint8_t* row, int64_t j) {
  if (F16) return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + 2 * j)));
  return _mm512_loadu_ps(reinterpret_cast<const float*>(row) + j);
}
template <bool F16>
inline __m512 loadWMask(const uint8_t* row, int64_t j, __mmask16 m) {
  if (F16) return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, row + 2 * j));
  return _mm512_maskz_loadu_ps(m, reinterpret_cast<const float*>(row) + j);
}

template <bool F16, int R>
inline void dotF(const uint8_t* const* rows, const uint8_t* const* next, int64_t cols, const float* x, float* out) {
  __m512 acc[R];
  #pragma GCC unroll 16
  for (int r = 0; r < R; r++) acc[r] = _mm512_setzero_ps();
  int64_t j = 0;
  for (; j + 16 <= cols; j += 16) {
    #pragma GCC unroll 16
    for (int r = 0; r < R; r++) NP_PREFETCH(next[r] + j * (F16 ? 2 : 4));
    const __m512 xv = _mm512_loadu_ps(x + j);
    #pragma GCC unroll 16
    for (int r = 0; r < R; r++) acc[r] = _mm512_fmadd_ps(loadW<F16>(rows[r], j), xv, acc[r]);
  }
  if (j < cols) {
    const __mmask16 m = tailMask16(cols - j);
    const __m512 xv = _mm512_maskz_loadu_ps(m, x + j);
    #pragma GCC unroll 16
    for (int r = 0; r < R; r++) acc[r] = _mm512_fmadd_ps(loadWMask<F16>(rows[r], j, m), xv, acc[r]);
  }
  #pragma GCC unroll 16
  for (int r = 0; r < R; r++) out[r] = _mm512_reduce_add_ps(acc[r]);
}

template <int R>
inline void dotGroup(int type, const uint8_t* const* rows, const uint8_t* const* next, int64_t cols, const Act& x,
                     float* out) {
  switch (type) {
    case T_Q4_0: dotQ4<R>(rows, next, cols / QK, x, out); break;
    case T_Q8_0: dotQ8<R>(rows, next, cols / QK, x, out); break;
    case T_F16: dotF<true, R>(rows, next, cols, x.f, out); break;
    default: dotF<false, R>(rows, next, cols, x.f, out); break;
  }
}

void dotRows(int type, const uint8_t* W, size_t rowBytes, const int32_t* idx, int64_t k0, int64_t k1, int64_t cols,
             const Act& x, float* y) {
  auto rowAt = [&](int64_t k) { return W + (size_t)(idx ? idx[std::min(k, k1 - 1)] : std::min(k, k1 - 1)) * rowBytes; };
  if (type == T_Q8_0 && cols / QK <= kShortBlocks) {
    // every row through the 16-row kernel (the last group repeats row k1 - 1), so a row's bits
    // do not depend on where a chunk starts
    const uint8_t* rows16[16];
    alignas(64) float tmp[16];
    for (int64_t k = k0; k < k1; k += 16) {
      for (int r = 0; r < 16; r++) rows16[r] = rowAt(k + r);
      dotQ8Short16(rows16, cols / QK, x, tmp);
      std::memcpy(y + (k - k0), tmp, (size_t)std::min<int64_t>(16, k1 - k) * sizeof(float));
    }
    return;
  }
  const uint8_t* rows[4];
  const uint8_t* next[4];
  int64_t k = k0;
  for (; k + 4 <= k1; k += 4) {
    for (int r = 0; r < 4; r++) {
      rows[r] = rowAt(k + r);
      next[r] = rowAt(k + NP_AHEAD + r);
    }
    dotGroup<4>(type, rows, next, cols, x, y + (k - k0));
  }
  for (; k < k1; k++) {
    rows[0] = rowAt(k);
    next[0] = rowAt(k + 1);
    dotGroup<1>(type, rows, next, cols, x, y + (k - k0));
  }
}

// ---- matmul of F32/F16: RT rows x TT tokens tiles -------------------------------------------

template <bool F16, int RT, int TT>
inline void tileF(const uint8_t* const* rows, int64_t cols, const Act* xs, float* const* outs) {
  __m512 acc[RT][TT];
  #pragma GCC unroll 16
  for (int r = 0; r < RT; r++)
    #pragma GCC unroll 16
    for (int t = 0; t < TT; t++) acc[r][t] = _mm512_setzero_ps();
  int64_t j = 0;
  for (; j + 16 <= cols; j += 16) {
    __m512 w[RT];
    #pragma GCC unroll 16
    for (int r = 0; r < RT; r++) w[r] = loadW<F16>(rows[r], j);
    #pragma GCC unroll 16
    for (int t = 0; t < TT; t++) {
      const __m512 xv = _mm512_loadu_ps(xs[t].f + j);
      #pragma GCC unroll 16
      for (int r = 0; r < RT; r++) acc[r][t] = _mm512_fmadd_ps(w[r], xv, acc[r][t]);
    }
  }
  if (j < cols) {
    const __mmask16 m = tailMask16(cols - j);
    __m512 w[RT];
    #pragma GCC unroll 16
    for (int r = 0; r < RT; r++) w[r] = loadWMask<F16>(rows[r], j, m);
    #pragma GCC unroll 16
    for (int t = 0; t < TT; t++) {
      const __m512 xv = _mm512_maskz_loadu_ps(m, xs[t].f + j);
      #pragma GCC unroll 16
      for (int r = 0; r < RT; r++) acc[r][t] = _mm512_fmadd_ps(w[r], xv, acc[r][t]);
    }
  }
  #pragma GCC unroll 16
  for (int r = 0; r < RT; r++)
    #pragma GCC unroll 16
    for (int t = 0; t < TT; t++) outs[t][r] = _mm512_reduce_add_ps(acc[r][t]);
}

template <int RT, int TT>
inline void tile(int type, const uint8_t* const* rows, int64_t cols, const Act* xs, float* const* outs) {
  if (type == T_F16) tileF<true, RT, TT>(rows, cols, xs, outs);
  else tileF<false, RT, TT>(rows, cols, xs, outs);
}

template <int RT>
inline void tileRowGroup(int type, const uint8_t* const* rows, int64_t cols, const Act* xs, int64_t t, int64_t t1,
                         float* Y, int64_t ldy, int64_t r) {
  constexpr int TT = 4;
  float* outs[TT];
  for (; t + TT <= t1; t += TT) {
    for (int i = 0; i < TT; i++) outs[i] = Y + (t + i) * ldy + r;
    tile<RT, TT>(type, rows, cols, xs + t, outs);
  }
  for (; t < t1; t++) {
    outs[0] = Y + t * ldy + r;
    tile<RT, 1>(type, rows, cols, xs + t, outs);
  }
}

// ---- Q4_0 / Q8_0 matmul on repacked 16-row panels ---------------------------------------
//
// One 512-bit vpdpbusd per 4 columns of 16 rows: lane r of the weight vector holds 4 bytes of
// row r, the activation's 4 bytes come in as an embedded broadcast, so after 8 of them each lane
// holds the exact integer dot of its row's 32-element block. Then one convert and one FMA per
// (16 rows, token, block) apply the scales (dw·dx) -- against three float ops per 32 MACs when
// the lanes split one row's block.
// Weights are unsigned: Q4_0 its nibble (0..15), Q8_0 q + 128; the accumulator starts at
// -8·Σx or -128·Σx of the block to cancel the offset (integer, exact).
// A panel is repacked per call from the row-major blocks (16 rows x 32 bytes per block, then
// transposed by dword), used by every token, so the repack is paid once per 16 rows.
// Per output element: Σ over blocks in order of fma(float(int dot), dw·dx, acc) -- the same
// whatever the row or token ranges (deterministic across threads).

constexpr int kPanelRows = 16;
constexpr size_t kPanelBlock = 512 + 64;  // 8 x 64 bytes (dword-transposed), 16 fp32 scales

// Index vectors of the 3-stage 16x8 dword transpose (vpermt2d): stage s output j takes its 16
// dwords from two stage s-1 vectors. Built once by searching where each (row, k) sits.
struct TransposeIdx {
  __m512i idx[3][8];
  int src[3][8][2];
  TransposeIdx() {
    // layout[v][p] = row * 8 + k of dword p of vector v
    int cur[8][16], next[8][16];
    for (int i = 0; i < 8; i++)
      for (int p = 0; p < 16; p++) cur[i][p] = (2 * i + p / 8) * 8 + p % 8;
    for (int s = 0; s < 3; s++) {
      for (int j = 0; j < 8; j++)
        for (int q = 0; q < 16; q++) {
          int r, k;
          if (s == 0) { r = 4 * (j >> 1) + q / 4; k = 4 * (j & 1) + q % 4; }       // 4 rows x 4 k
          else if (s == 1) { r = 8 * (j >> 2) + q / 2; k = 2 * (j & 3) + q % 2; }  // 8 rows x 2 k
          else { r = q; k = j; }                                                  // 16 rows x 1 k
          next[j][q] = r * 8 + k;
        }
      for (int j = 0; j < 8; j++) {
        int a = -1, b = -1;
        alignas(64) int32_t ix[16];
        for (int q = 0; q < 16; q++) {
          int v = -1, pos = -1;
          for (int i = 0; i < 8 && v < 0; i++)
            for (int p = 0; p < 16; p++)
              if (cur[i][p] == next[j][q]) { v = i; pos = p; break; }
          if (a < 0 || a == v) { a = v; ix[q] = pos; }
          else { if (b < 0) b = v; ix[q] = 16 + pos; }
        }
        src[s][j][0] = a;
        src[s][j][1] = b < 0 ? a : b;
        idx[s][j] = _mm512_load_si512(ix);
      }
      std::memcpy(cur, next, sizeof cur);
    }
  }
};

inline void transpose16x8(const uint8_t* in, uint8_t* out) {
  static const TransposeIdx T;
  __m512i v[8], u[8];
  for (int i = 0; i < 8; i++) v[i] = _mm512_load_si512(in + 64 * i);
  for (int s = 0; s < 3; s++) {
    for (int j = 0; j < 8; j++) u[j] = _mm512_permutex2var_epi32(v[T.src[s][j][0]], T.idx[s][j], v[T.src[s][j][1]]);
    for (int j = 0; j < 8; j++) v[j] = u[j];
  }
  for (int j = 0; j < 8; j++) _mm512_store_si512(out + 64 * j, v[j]);
}

// Rows rows[0 .. n-1] (n <= 16; the rest zero) into `panel` (nb x kPanelBlock bytes, 64-aligned).
void repackPanel(int type, const uint8_t* const* rows, int n, int64_t nb, uint8_t* panel) {
  alignas(64) uint8_t tmp[512];
  const __m128i m4 = _mm_set1_epi8(0x0F);
  const __m256i flip = _mm256_set1_epi8((char)0x80);
  for (int64_t b = 0; b < nb; b++) {
    uint8_t* pb = panel + (size_t)b * kPanelBlock;
    float* sc = reinterpret_cast<float*>(pb + 512);
    for (int r = 0; r < kPanelRows; r++) {
      uint8_t* t = tmp + 32 * r;
      if (r >= n) {
        _mm256_store_si256(reinterpret_cast<__m256i*>(t), _mm256_setzero_si256());
        sc[r] = 0.0f;
        continue;
      }
      const uint8_t* row = rows[r];
      if (type == T_Q4_0) {
        const BlockQ4_0* blk = reinterpret_cast<const BlockQ4_0*>(row) + b;
        const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk->qs));
        _mm_store_si128(reinterpret_cast<__m128i*>(t), _mm_and_si128(q, m4));
        _mm_store_si128(reinterpret_cast<__m128i*>(t + 16), _mm_and_si128(_mm_srli_epi16(q, 4), m4));
        sc[r] = fp16ToF32(blk->d);
      } else {
        const BlockQ8_0* blk = reinterpret_cast<const BlockQ8_0*>(row) + b;
        const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk->qs));
        _mm256_store_si256(reinterpret_cast<__m256i*>(t), _mm256_xor_si256(q, flip));
        sc[r] = fp16ToF32(blk->d);
      }
    }
    transpose16x8(tmp, pb);
  }
}

inline int32_t load4(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// TT tokens x 16 rows of one panel: Y[t * ldy + lane] for lanes in `m` (Acc: added to what is there,
// as the first term of the sum).
template <int TT, bool Acc = false>
inline void panelTile(const uint8_t* panel, int64_t nb, const Act* xs, int32_t corrMul, float* Y, int64_t ldy,
                      __mmask16 m) {
  const int8_t* xq[TT];
  #pragma GCC unroll 16
  for (int t = 0; t < TT; t++) xq[t] = xs[t].qs;
  __m512 acc[TT];
  #pragma GCC unroll 16
  for (int t = 0; t < TT; t++) acc[t] = Acc ? _mm512_maskz_loadu_ps(m, Y + t * ldy) : _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; b++) {
    const uint8_t* pb = panel + (size_t)b * kPanelBlock;
    __m512i s[TT];
    #pragma GCC unroll 16
    for (int t = 0; t < TT; t++) s[t] = _mm512_set1_epi32(-corrMul * xs[t].sum[b]);
    #pragma GCC unroll 8
    for (int k = 0; k < 8; k++) {
      const __m512i w = _mm512_load_si512(pb + 64 * k);
      #pragma GCC unroll 16
      for (int t = 0; t < TT; t++) s[t] = _mm512_dpbusd_epi32(s[t], w, _mm512_set1_epi32(load4(xq[t] + b * QK + 4 * k)));
    }
    const __m512 dw = _mm512_load_ps(reinterpret_cast<const float*>(pb + 512));
    #pragma GCC unroll 16
    for (int t = 0; t < TT; t++)
      acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s[t]), _mm512_mul_ps(dw, _mm512_set1_ps(xs[t].d[b])), acc[t]);
  }
  #pragma GCC unroll 16
  for (int t = 0; t < TT; t++) _mm512_mask_storeu_ps(Y + t * ldy, m, acc[t]);
}

// Tokens [t0, t1) over one panel in tiles of 8, then 4, 2, 1: Y[t * ldy + lane].
template <bool Acc>
inline void panelTokens(const uint8_t* panel, int64_t nb, const Act* xs, int64_t t0, int64_t t1, int32_t corrMul,
                        float* Y, int64_t ldy, __mmask16 m) {
  int64_t t = t0;
  for (; t + 8 <= t1; t += 8) panelTile<8, Acc>(panel, nb, xs + t, corrMul, Y + t * ldy, ldy, m);
  if (t + 4 <= t1) { panelTile<4, Acc>(panel, nb, xs + t, corrMul, Y + t * ldy, ldy, m); t += 4; }
  if (t + 2 <= t1) { panelTile<2, Acc>(panel, nb, xs + t, corrMul, Y + t * ldy, ldy, m); t += 2; }
  if (t < t1) panelTile<1, Acc>(panel, nb, xs + t, corrMul, Y + t * ldy, ldy, m);
}

struct PanelBuf {
  uint8_t* p = nullptr;
  size_t cap = 0;
  ~PanelBuf() { std::free(p); }
  uint8_t* get(size_t n) {
    if (n > cap) {
      std::free(p);
      p = static_cast<uint8_t*>(std::aligned_alloc(64, (n + 63) / 64 * 64));
      cap = p ? n : 0;
    }
    return p;
  }
};
thread_local PanelBuf t_panel;

void matmulPanels(int type, const uint8_t* const* rows, int64_t r0, int64_t r1, int64_t cols, const Act* xs,
                  int64_t t0, int64_t t1, float* Y, int64_t ldy) {
  const int64_t nb = cols / QK;
  const int32_t corrMul = type == T_Q4_0 ? 8 : 128;
  uint8_t* panel = t_panel.get((size_t)nb * kPanelBlock);
  if (!panel) std::abort();  // out of memory for 16 rows of repacked weights
  for (int64_t r = r0; r < r1; r += kPanelRows) {
    const int n = (int)std::min<int64_t>(kPanelRows, r1 - r);
    repackPanel(type, rows + r, n, nb, panel);
    const __mmask16 m = tailMask16(n);
    panelTokens<false>(panel, nb, xs, t0, t1, corrMul, Y + r, ldy, m);
  }
}

// ---- matmulTAcc (kernels.h): rows are the reduction; panels requantised per 32-row group ---

// 16 values of row `row` at columns c..c+15 (lanes past `m` zero), as f32.
inline __m512 weights16(int type, const uint8_t* row, int64_t c, __mmask16 m) {
  switch (type) {
    case T_Q4_0: {
      const BlockQ4_0* blk = reinterpret_cast<const BlockQ4_0*>(row) + c / QK;
      __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk->qs));
      if (c % QK) q = _mm_srli_epi16(q, 4);  // elements 16..31: the high nibbles
      const __m512i i = _mm512_sub_epi32(_mm512_cvtepu8_epi32(_mm_and_si128(q, _mm_set1_epi8(0x0F))), _mm512_set1_epi32(8));
      return _mm512_mul_ps(_mm512_cvtepi32_ps(i), _mm512_set1_ps(fp16ToF32(blk->d)));
    }
    case T_Q8_0: {
      const BlockQ8_0* blk = reinterpret_cast<const BlockQ8_0*>(row) + c / QK;
      const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk->qs + c % QK));
      return _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q)), _mm512_set1_ps(fp16ToF32(blk->d)));
    }
    case T_F16: return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, row + 2 * c));
    default: return _mm512_maskz_loadu_ps(m, row + 4 * c);
  }
}

// Columns c..c+15 of rows [0, nRows) into a panel (kPanelBlock per 32-row group): lane = column,
// dword k of a lane = rows 4k..4k+3 of the group as unsigned bytes (q + 128), then the 16 scales.
void repackPanelT(int type, const uint8_t* const* rows, int64_t nRows, int64_t c, __mmask16 m, uint8_t* panel) {
  const int64_t nG = (nRows + QK - 1) / QK;
  const __m128i flip = _mm_set1_epi8((char)0x80);
  for (int64_t g = 0; g < nG; g++) {
    __m512 v[QK];
    __m512 amax = _mm512_setzero_ps();
    for (int j = 0; j < QK; j++) {
      const int64_t n = g * QK + j;
      v[j] = n < nRows ? weights16(type, rows[n], c, m) : _mm512_setzero_ps();
      amax = _mm512_max_ps(amax, _mm512_abs_ps(v[j]));
    }
    uint8_t* pb = panel + (size_t)g * kPanelBlock;
    _mm512_store_ps(reinterpret_cast<float*>(pb + 512), _mm512_div_ps(amax, _mm512_set1_ps(127.0f)));
    const __mmask16 nz = _mm512_cmpneq_ps_mask(amax, _mm512_setzero_ps());
    const __m512 inv = _mm512_maskz_div_ps(nz, _mm512_set1_ps(127.0f), amax);
    __m128i q[QK];
    for (int j = 0; j < QK; j++) {
      const __m512 r = _mm512_roundscale_ps(_mm512_mul_ps(v[j], inv), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
      q[j] = _mm512_cvtepi32_epi8(_mm512_cvttps_epi32(r));
    }
    // 4 rows x 16 columns of bytes -> 16 dwords (one per column): two rounds of unpacks
    for (int k = 0; k < 8; k++) {
      const __m128i a = _mm_unpacklo_epi8(q[4 * k], q[4 * k + 1]), a2 = _mm_unpackhi_epi8(q[4 * k], q[4 * k + 1]);
      const __m128i b = _mm_unpacklo_epi8(q[4 * k + 2], q[4 * k + 3]), b2 = _mm_unpackhi_epi8(q[4 * k + 2], q[4 * k + 3]);
      __m128i* out = reinterpret_cast<__m128i*>(pb + 64 * k);
      _mm_store_si128(out + 0, _mm_xor_si128(_mm_unpacklo_epi16(a, b), flip));
      _mm_store_si128(out + 1, _mm_xor_si128(_mm_unpackhi_epi16(a, b), flip));
      _mm_store_si128(out + 2, _mm_xor_si128(_mm_unpacklo_epi16(a2, b2), flip));
      _mm_store_si128(out + 3, _mm_xor_si128(_mm_unpackhi_epi16(a2, b2), flip));
    }
  }
}

// F32/F16: TT tokens x 16 columns, rows ascending, f32 FMAs.
template <int TT>
inline void floatTileT(int type, const uint8_t* const* rows, int64_t nRows, int64_t c, __mmask16 m,
                       const Act* xs, float* O, int64_t ldo) {
  __m512 acc[TT];
  #pragma GCC unroll 16
  for (int t = 0; t < TT; t++) acc[t] = _mm512_maskz_loadu_ps(m, O + t * ldo + c);
  for (int64_t n = 0; n < nRows; n++) {
    const __m512 w = weights16(type, rows[n], c, m);
    #pragma GCC unroll 16
    for (int t = 0; t < TT; t++) acc[t] = _mm512_fmadd_ps(_mm512_set1_ps(xs[t].f[n]), w, acc[t]);
  }
  #pragma GCC unroll 16
  for (int t = 0; t < TT; t++) _mm512_mask_storeu_ps(O + t * ldo + c, m, acc[t]);
}

void matmulTAcc(int type, const uint8_t* const* rows, int64_t nRows, int64_t c0, int64_t c1, const Act* xs,
                int64_t nTok, float* O, int64_t ldo) {
  if (!typeQuantized(type)) {
    for (int64_t c = c0; c < c1; c += kPanelRows) {
      const __mmask16 m = tailMask16(std::min<int64_t>(kPanelRows, c1 - c));
      int64_t t = 0;
      for (; t + 8 <= nTok; t += 8) floatTileT<8>(type, rows, nRows, c, m, xs + t, O + t * ldo, ldo);
      for (; t < nTok; t++) floatTileT<1>(type, rows, nRows, c, m, xs + t, O + t * ldo, ldo);
    }
    return;
  }
  const int64_t nG = (nRows + QK - 1) / QK;
  uint8_t* panel = t_panel.get((size_t)nG * kPanelBlock);
  if (!panel) std::abort();  // out of memory for one panel
  for (int64_t c = c0; c < c1; c += kPanelRows) {
    const __mmask16 m = tailMask16(std::min<int64_t>(kPanelRows, c1 - c));
    repackPanelT(type, rows, nRows, c, m, panel);
    panelTokens<true>(panel, nG, xs, 0, nTok, 128, O + c, ldo, m);
  }
}

void matmul(int type, const uint8_t* const* rows, int64_t r0, int64_t r1, int64_t cols, const Act* xs,
            int64_t t0, int64_t t1, float* Y, int64_t ldy) {
  if (typeQuantized(type)) return matmulPanels(type, rows, r0, r1, cols, xs, t0, t1, Y, ldy);
  // Token blocks outer so the (small) weight chunk stays in cache while activations stream.
  constexpr int64_t kTokBlock = 16;
  for (int64_t tb = t0; tb < t1; tb += kTokBlock) {
    const int64_t te = std::min(t1, tb + kTokBlock);
    int64_t r = r0;
    for (; r + 4 <= r1; r += 4) tileRowGroup<4>(type, rows + r, cols, xs, tb, te, Y, ldy, r);
    for (; r < r1; r++) tileRowGroup<1>(type, rows + r, cols, xs, tb, te, Y, ldy, r);
  }
}

// ---- axpyRows: out[c] = fma(coef_k, w_kc, out[c]) for k ascending -------------------------

// 16 weights of a float row at column c (m < 16 only at the end of the row).
template <int TYPE>
inline __m512 w16(const uint8_t* row, int64_t c, __mmask16 m) {
  return m == 0xFFFF ? loadW<TYPE == T_F16>(row, c) : loadWMask<TYPE == T_F16>(row, c, m);
}

// Rows are scattered (cache slots), so they are streamed: G rows at a time run over the
// columns [c0, c1) while `out` stays in L1, and the next G rows are prefetched meanwhile. Each
// out[c] still takes fma(coef_k, w_kc, ·) for k ascending — the same sum, bit for bit, as any
// other tiling.
template <int TYPE, int G>
inline void axpyGroup(const uint8_t* const* r, const float* coef, const uint8_t* const* next, int nNext, size_t lo,
                      size_t hi, int64_t c0, int64_t c1, float* out) {
  __m512 a[G];
  for (int j = 0; j < G; j++) a[j] = _mm512_set1_ps(coef[j]);
  for (int j = 0; j < nNext; j++) {
    for (size_t o = lo; o < hi; o += 64) _mm_prefetch(reinterpret_cast<const char*>(next[j] + o), _MM_HINT_T0);
  }
  for (int64_t c = c0; c < c1; c += 16) {
    const __mmask16 m = tailMask16(std::min<int64_t>(16, c1 - c));
    __m512 acc = _mm512_maskz_loadu_ps(m, out + c);
    for (int j = 0; j < G; j++) acc = _mm512_fmadd_ps(a[j], w16<TYPE>(r[j], c, m), acc);
    _mm512_mask_storeu_ps(out + c, m, acc);
  }
}

// Quantised rows, block by block: each 32-column block of G rows is loaded once (its bytes and
// scale) and its two halves taken into two accumulators that stay in registers across the G rows;
// the same fma(coef_k, w_kc, ·) chain in k order as w16, w_kc the exact (q - 8)·d or q·d.
// Q4_0: w comes from a 16-entry table of the block, (i - 8)·d for i < 16, looked up by vpermps,
// which reads only the low 4 bits of each index: the bytes widened to 32 bits index the low
// nibbles as they are and, shifted right by 4, the high ones — no masking, no per-half convert
// and multiply. Q8_0: the 32 bytes widened, converted and scaled (hardware fp16 scale).
template <int TYPE>
inline void blockWeights(const uint8_t* row, int64_t b, __m512& lo, __m512& hi) {
  if constexpr (TYPE == T_Q4_0) {
    const __m512 centred = _mm512_setr_ps(-8, -7, -6, -5, -4, -3, -2, -1, 0, 1, 2, 3, 4, 5, 6, 7);
    const BlockQ4_0* blk = reinterpret_cast<const BlockQ4_0*>(row) + b;
    const __m512 table = _mm512_mul_ps(centred, _mm512_cvtph_ps(_mm256_set1_epi16((short)blk->d)));
    const __m512i q = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk->qs)));
    lo = _mm512_permutexvar_ps(q, table);
    hi = _mm512_permutexvar_ps(_mm512_srli_epi32(q, 4), table);
  } else {
    const BlockQ8_0* blk = reinterpret_cast<const BlockQ8_0*>(row) + b;
    const __m512 d = _mm512_cvtph_ps(_mm256_set1_epi16((short)blk->d));
    const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk->qs));
    lo = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm256_castsi256_si128(q))), d);
    hi = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm256_extracti128_si256(q, 1))), d);
  }
}

template <int TYPE, int G>
inline void axpyGroupBlocks(const uint8_t* const* r, const float* coef, const uint8_t* const* next, int nNext,
                            int64_t b0, int64_t b1, float* out) {
  constexpr size_t kBlock = TYPE == T_Q4_0 ? sizeof(BlockQ4_0) : sizeof(BlockQ8_0);
  // the next rows, at the pace these are consumed: two lines every ~64 bytes of blocks (Q4_0 4
  // blocks = 72 bytes, Q8_0 2 = 68), so each line is asked for twice (every 128 bytes: 10% slower)
  constexpr int64_t kPace = (64 + kBlock - 1) / kBlock;
  __m512 a[G];
  for (int j = 0; j < G; j++) a[j] = _mm512_set1_ps(coef[j]);
  for (int64_t b = b0; b < b1; b++) {
    if ((b - b0) % kPace == 0) {
      for (int j = 0; j < nNext; j++) {
        const char* p = reinterpret_cast<const char*>(next[j] + b * kBlock);
        _mm_prefetch(p, _MM_HINT_T0);
        _mm_prefetch(p + 64, _MM_HINT_T0);
      }
    }
    __m512 accLo = _mm512_loadu_ps(out + b * QK), accHi = _mm512_loadu_ps(out + b * QK + 16);
    #pragma GCC unroll 8
    for (int j = 0; j < G; j++) {
      __m512 wl, wh;
      blockWeights<TYPE>(r[j], b, wl, wh);
      accLo = _mm512_fmadd_ps(a[j], wl, accLo);
      accHi = _mm512_fmadd_ps(a[j], wh, accHi);
    }
    _mm512_storeu_ps(out + b * QK, accLo);
    _mm512_storeu_ps(out + b * QK + 16, accHi);
  }
}

template <int TYPE>
void axpyRowsT(const uint8_t* W, size_t rowBytes, const int32_t* idx, int64_t nIdx, const float* coef, int64_t c0,
               int64_t c1, float* out) {
  if constexpr (TYPE == T_Q4_0 || TYPE == T_Q8_0) {
    // c0 and c1 are block aligned for Q types (dispatch splits columns by blocks)
    constexpr int G = 8;
    const int64_t b0 = c0 / QK, b1 = (c1 + QK - 1) / QK;
    const uint8_t* rows[2 * G];
    auto rowAt = [&](int64_t k) { return W + (size_t)idx[k] * rowBytes; };
    int64_t k = 0;
    for (; k + G <= nIdx; k += G) {
      int nNext = 0;
      for (int j = 0; j < G; j++) rows[j] = rowAt(k + j);
      for (int64_t q = k + G; q < std::min(nIdx, k + 2 * G); q++) rows[G + nNext++] = rowAt(q);
      axpyGroupBlocks<TYPE, G>(rows, coef + k, rows + G, nNext, b0, b1, out);
    }
    for (; k < nIdx; k++) {
      rows[0] = rowAt(k);
      axpyGroupBlocks<TYPE, 1>(rows, coef + k, rows, 0, b0, b1, out);
    }
    return;
  }
  constexpr int G = 4;
  // F16 / F32: bytes of a row that hold columns [c0, c1)
  const size_t lo = (size_t)c0 * (TYPE == T_F16 ? 2 : 4), hi = (size_t)c1 * (TYPE == T_F16 ? 2 : 4);
  const uint8_t* rows[2 * G];
  auto rowAt = [&](int64_t k) { return W + (size_t)idx[k] * rowBytes; };
  int64_t k = 0;
  for (; k + G <= nIdx; k += G) {
    int nNext = 0;
    for (int j = 0; j < G; j++) rows[j] = rowAt(k + j);
    for (int64_t q = k + G; q < std::min(nIdx, k + 2 * G); q++) rows[G + nNext++] = rowAt(q);
    axpyGroup<TYPE, G>(rows, coef + k, rows + G, nNext, lo, hi, c0, c1, out);
  }
  for (; k < nIdx; k++) {
    rows[0] = rowAt(k);
    axpyGroup<TYPE, 1>(rows, coef + k, rows, 0, lo, hi, c0, c1, out);
  }
}

void axpyRows(int type, const uint8_t* W, size_t rowBytes, const int32_t* idx, int64_t nIdx, const float* coef,
              int64_t c0, int64_t c1, float* out) {
  switch (type) {
    case T_Q4_0: return axpyRowsT<T_Q4_0>(W, rowBytes, idx, nIdx, coef, c0, c1, out);
    case T_Q8_0: return axpyRowsT<T_Q8_0>(W, rowBytes, idx, nIdx, coef, c0, c1, out);
    case T_F16: return axpyRowsT<T_F16>(W, rowBytes, idx, nIdx, coef, c0, c1, out);
    default: return axpyRowsT<T_F32>(W, rowBytes, idx, nIdx, coef, c0, c1, out);
  }
}

// ---- small vector ops ----------------------------------------------------------------------

void f32ToF16(const float* x, uint16_t* y, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(y + i),
                        _mm512_cvtps_ph(_mm512_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  if (i < n) {
    const __mmask16 m = tailMask16(n - i);
    _mm256_mask_storeu_epi16(y + i, m,
                             _mm512_cvtps_ph(_mm512_maskz_loadu_ps(m, x + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
}
void f16ToF32(const uint16_t* x, float* y, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    _mm512_storeu_ps(y + i, _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + i))));
  if (i < n) {
    const __mmask16 m = tailMask16(n - i);
    _mm512_mask_storeu_ps(y + i, m, _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, x + i)));
  }
}
float dotF32(const float* a, const float* b, int64_t n) {
  __m512 acc = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) acc = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), acc);
  if (i < n) {
    const __mmask16 m = tailMask16(n - i);
    acc = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, a + i), _mm512_maskz_loadu_ps(m, b + i), acc);
  }
  return _mm512_reduce_add_ps(acc);
}
float dotF16(const float* a, const uint16_t* b, int64_t n) {
  __m512 acc = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    acc = _mm512_fmadd_ps(_mm512_loadu_ps(a + i),
                          _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + i))), acc);
  if (i < n) {
    const __mmask16 m = tailMask16(n - i);
    acc = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, a + i), _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, b + i)), acc);
  }
  return _mm512_reduce_add_ps(acc);
}
void axpyF32(float a, const float* x, float* y, int64_t n) {
  const __m512 av = _mm512_set1_ps(a);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, _mm512_fmadd_ps(av, _mm512_loadu_ps(x + i), _mm512_loadu_ps(y + i)));
  if (i < n) {
    const __mmask16 m = tailMask16(n - i);
    _mm512_mask_storeu_ps(y + i, m,
                          _mm512_fmadd_ps(av, _mm512_maskz_loadu_ps(m, x + i), _mm512_maskz_loadu_ps(m, y + i)));
  }
}
void axpyF16(float a, const uint16_t* x, float* y, int64_t n) {
  const __m512 av = _mm512_set1_ps(a);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    _mm512_storeu_ps(y + i, _mm512_fmadd_ps(av, _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + i))),
                                            _mm512_loadu_ps(y + i)));
  if (i < n) {
    const __mmask16 m = tailMask16(n - i);
    _mm512_mask_storeu_ps(y + i, m,
                          _mm512_fmadd_ps(av, _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, x + i)),
                                          _mm512_maskz_loadu_ps(m, y + i)));
  }
}

// Sum of squares: f32 products widened to double, 8 double lanes, fixed reduction order.
void rmsnorm(const float* x, const float* w, int64_t n, float eps, float* out) {
  __m512d acc = _mm512_setzero_pd();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(x + i);
    acc = _mm512_add_pd(acc, _mm512_cvtps_pd(_mm256_mul_ps(v, v)));
  }
  if (i < n) {
    const __mmask8 m = (__mmask8)((1u << (n - i)) - 1u);
    const __m256 v = _mm256_maskz_loadu_ps(m, x + i);
    acc = _mm512_add_pd(acc, _mm512_cvtps_pd(_mm256_mul_ps(v, v)));
  }
  const double sum = _mm512_reduce_add_pd(acc);
  const float mean = (float)(sum / (double)n);
  const float scale = 1.0f / std::sqrt(mean + eps);
  const __m512 sv = _mm512_set1_ps(scale);
  for (i = 0; i + 16 <= n; i += 16)
    _mm512_storeu_ps(out + i, _mm512_mul_ps(_mm512_mul_ps(_mm512_loadu_ps(x + i), sv), _mm512_loadu_ps(w + i)));
  if (i < n) {
    const __mmask16 m = tailMask16(n - i);
    _mm512_mask_storeu_ps(out + i, m,
                          _mm512_mul_ps(_mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + i), sv), _mm512_maskz_loadu_ps(m, w + i)));
  }
}

void gated(int kind, const float* g, const float* u, float* out, int64_t n) {
  if (kind == 0) {  // SwiGLU: exact expf per element, as the scalar path
    kScalar.gated(kind, g, u, out, n);
    return;
  }
  const __m512 z = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i < n; i += 16) {
    const __mmask16 m = n - i >= 16 ? (__mmask16)0xFFFF : tailMask16(n - i);
    const __m512 gv = _mm512_max_ps(_mm512_maskz_loadu_ps(m, g + i), z);
    __m512 uv = _mm512_maskz_loadu_ps(m, u + i);
    if (kind == 2) uv = _mm512_max_ps(uv, z);
    _mm512_mask_storeu_ps(out + i, m, _mm512_mul_ps(gv, uv));
  }
}

void add(const float* a, const float* b, float* out, int64_t n) {
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = n - i >= 16 ? (__mmask16)0xFFFF : tailMask16(n - i);
    _mm512_mask_storeu_ps(out + i, m, _mm512_add_ps(_mm512_maskz_loadu_ps(m, a + i), _mm512_maskz_loadu_ps(m, b + i)));
  }
}

}  // namespace

const Kernels& kernelsAvx512() {
  static const Kernels k = [] {
    Kernels t = kScalar;
    t.name = "avx512";
    t.quantizeQ8 = quantizeQ8;
    t.dotRows = dotRows;
    t.matmul = matmul;
    t.axpyRows = axpyRows;
    t.f32ToF16 = f32ToF16;
    t.f16ToF32 = f16ToF32;
    t.dotF32 = dotF32;
    t.dotF16 = dotF16;
    t.axpyF32 = axpyF32;
    t.axpyF16 = axpyF16;
    t.rmsnorm = rmsnorm;
    t.gated = gated;
    t.add = add;
    t.matmulTAcc = matmulTAcc;
    // softmax, dequantRow: scalar (exp-bound / not hot).
    return t;
  }();
  return k;
}

}  // namespace np
