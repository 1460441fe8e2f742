// AVX2 + FMA + F16C kernels (compiled with -mavx2 -mfma -mf16c; only called when the CPU
// has them). Quantised dots use the classic maddubs/madd scheme, one 32-element block
// per 256-bit register:
//   Q4_0: maddubs(unsigned nibbles, signed x) -> madd(1) -> + corr (-8·Σx spread over 8 lanes);
//   Q8_0: maddubs(|w|, sign(x, w)) -> madd(1)  (|w| <= 127 for ggml-quantised data, so the
//         int16 pair sums cannot saturate).
// Tails of F32/F16 rows are handled by a scalar loop that does the same per-element
// operation (std::fma) as the vector body.
//
// Entries that fall back to the scalar code: softmax, SwiGLU (exact expf), dequantRow.
#include <immintrin.h>

#include <algorithm>
#include <cmath>

#include "kernels.h"

namespace np {
namespace {

inline float hsum256(__m256 v) {
  const __m128 lo = _mm256_castps256_ps128(v), hi = _mm256_extractf128_ps(v, 1);
  __m128 s = _mm_add_ps(lo, hi);
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

inline float f16(uint16_t h) { return _cvtsh_ss(h); }

// ---- activation quantisation (bit-identical to the scalar code) -------------------------------

void quantizeQ8(const float* x, int64_t n, int8_t* qs, float* d, int32_t* sum) {
  const int64_t nb = n / QK;
  const __m256 signMask = _mm256_set1_ps(-0.0f);
  for (int64_t i = 0; i < nb; i++) {
    __m256 v[4];
    __m256 a = _mm256_setzero_ps();
    for (int h = 0; h < 4; h++) {
      v[h] = _mm256_loadu_ps(x + i * QK + 8 * h);
      a = _mm256_max_ps(a, _mm256_andnot_ps(signMask, v[h]));
    }
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    const float amax = _mm_cvtss_f32(m);
    const float dd = amax / 127.0f;
    const float id = amax != 0.0f ? 127.0f / amax : 0.0f;  // as llama.cpp's SIMD quantize_row_q8_0
    d[i] = fp16ToF32(f32ToFp16(dd));
    const __m256 vid = _mm256_set1_ps(id);
    __m256i q32[4];
    __m256i s = _mm256_setzero_si256();
    for (int h = 0; h < 4; h++) {
      const __m256 p = _mm256_mul_ps(v[h], vid);
      q32[h] = _mm256_cvttps_epi32(_mm256_round_ps(p, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));  // half to even
      s = _mm256_add_epi32(s, q32[h]);
    }
    // pack 32 int32 -> 32 int8 in order
    const __m256i p01 = _mm256_packs_epi32(q32[0], q32[1]);  // lanes interleaved by 128
    const __m256i p23 = _mm256_packs_epi32(q32[2], q32[3]);
    __m256i p = _mm256_packs_epi16(p01, p23);
    p = _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(qs + i * QK), p);
    __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
    s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0x4E));
    s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0xB1));
    sum[i] = _mm_cvtsi128_si32(s4);
  }
}

// ---- quantised dots (R rows share activation loads; per-row ops independent of R) ---------

// `next` (R pointers): rows read later (see dotRows), prefetched at the pace these are consumed,
// as in avx512.cc: the hardware prefetchers lose track of many short row streams. Prefetching
// took the Q4_0 matvec out of cache from 6.0 to 10.4 GB/s on one thread of a Zen 3 VM; one
// group ahead into L1 measured as well as or better than two groups or L2.
// The address is formed as an integer: the last pass of a row reaches a little past its end,
// and a pointer may not (a prefetch itself never faults).
inline void prefetch(const uint8_t* row, size_t offset) {
  _mm_prefetch(reinterpret_cast<const char*>(reinterpret_cast<uintptr_t>(row) + offset), _MM_HINT_T0);
}
constexpr int kAhead = 4;  // rows ahead, for a matvec's single row stream

inline __m256i unpackQ4(const BlockQ4_0* blk) {
  const __m256i v = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk->qs)));
  return _mm256_and_si256(_mm256_srlv_epi64(v, _mm256_setr_epi64x(0, 0, 4, 4)), _mm256_set1_epi8(0x0F));
}

// Q4_0: pairs of blocks per register with the pre-permuted activation (Act::qp, see
// kernels.h): maddubs(low nibbles, x lo) + maddubs(high nibbles, x hi) (int16 sums <= 7620),
// madd(1) -> lanes 0-3 block 2p, 4-7 block 2p+1, + cvp (-8·Σx per block). Scales of 8 blocks
// per row: word inserts + one vcvtph2ps, times the 8 activation scales.
inline __m256i q4PairSum(const BlockQ4_0* blk, __m256i xlo, __m256i xhi, __m256i cv) {
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  const __m256i v = _mm256_inserti128_si256(
      _mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk[0].qs))),
      _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk[1].qs)), 1);
  const __m256i p = _mm256_add_epi16(_mm256_maddubs_epi16(_mm256_and_si256(v, m4), xlo),
                                     _mm256_maddubs_epi16(_mm256_and_si256(_mm256_srli_epi16(v, 4), m4), xhi));
  return _mm256_add_epi32(_mm256_madd_epi16(p, _mm256_set1_epi16(1)), cv);
}

template <int R>
inline void dotQ4(const uint8_t* const* rows, const uint8_t* const* next, int64_t nb, const Act& x, float* out) {
  const __m256i ones = _mm256_set1_epi16(1);
  const __m256i pidx0 = _mm256_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1);
  const __m256i two = _mm256_set1_epi32(2);
  __m256 acc[R];
  #pragma GCC unroll 16
  for (int r = 0; r < R; r++) acc[r] = _mm256_setzero_ps();
  int64_t b = 0;
  for (; b + 8 <= nb; b += 8) {
    #pragma GCC unroll 16
    for (int r = 0; r < R; r++) {
      const size_t o = b * sizeof(BlockQ4_0);  // 144 bytes of the row per 8 blocks
      prefetch(next[r], o);
      prefetch(next[r], o + 64);
      prefetch(next[r], o + 128);
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
        const __m256i s = q4PairSum(reinterpret_cast<const BlockQ4_0*>(rows[r]) + b + 2 * p, xlo, xhi, cv);
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
      const __m256i s = q4PairSum(blk, xlo, xhi, cv);
      const float s0 = f16(blk[0].d) * x.d[b], s1 = f16(blk[1].d) * x.d[b + 1];
      const __m256 sp = _mm256_insertf128_ps(_mm256_castps128_ps256(_mm_set1_ps(s0)), _mm_set1_ps(s1), 1);
      acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), sp, acc[r]);
    }
  }
  if (b < nb) {  // odd block count: last block alone, natural activation layout
    const __m256i xq = _mm256_load_si256(reinterpret_cast<const __m256i*>(x.qs + b * QK));
    const __m256i corr = _mm256_set1_epi32(x.corr4[b]);
    #pragma GCC unroll 16
    for (int r = 0; r < R; r++) {
      const BlockQ4_0* blk = reinterpret_cast<const BlockQ4_0*>(rows[r]) + b;
      const __m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(unpackQ4(blk), xq), ones);
      const __m256 s = _mm256_cvtepi32_ps(_mm256_add_epi32(p, corr));
      acc[r] = _mm256_fmadd_ps(s, _mm256_set1_ps(f16(blk->d) * x.d[b]), acc[r]);
    }
  }
  #pragma GCC unroll 16
  for (int r = 0; r < R; r++) out[r] = hsum256(acc[r]);
}

inline __m256i dotQ8Block(const BlockQ8_0* blk, __m256i xq) {
  const __m256i w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk->qs));
  const __m256i p = _mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(xq, w));
  return _mm256_madd_epi16(p, _mm256_set1_epi16(1));
}

template <int R>
inline void dotQ8(const uint8_t* const* rows, const uint8_t* const* next, int64_t nb, const Act& x, float* out) {
  __m256 acc[R];
  #pragma GCC unroll 16
  for (int r = 0; r < R; r++) acc[r] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; b++) {
    #pragma GCC unroll 16
    for (int r = 0; r < R; r++) prefetch(next[r], b * sizeof(BlockQ8_0));  // 34-byte steps: every line
    const __m256i xq = _mm256_load_si256(reinterpret_cast<const __m256i*>(x.qs + b * QK));
    const float dx = x.d[b];
    #pragma GCC unroll 16
    for (int r = 0; r < R; r++) {
      const BlockQ8_0* blk = reinterpret_cast<const BlockQ8_0*>(rows[r]) + b;
      const __m256 s = _mm256_cvtepi32_ps(dotQ8Block(blk, xq));
      acc[r] = _mm256_fmadd_ps(s, _mm256_set1_ps(f16(blk->d) * dx), acc[r]);
    }
  }
  #pragma GCC unroll 16
  for (int r = 0; r < R; r++) out[r] = hsum256(acc[r]);
}

template <bool F16>
inline __m256 loadW(const uint8_t* row, int64_t j) {
  if (F16) return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 2 * j)));
  return _mm256_loadu_ps(reinterpret_cast<const float*>(row) + j);
}
template <bool F16>
inline float loadW1(const uint8_t* row, int64_t j) {
  if (F16) return f16(reinterpret_cast<const uint16_t*>(row)[j]);
  return reinterpret_cast<const float*>(row)[j];
}

template <bool F16, int R>
inline void dotF(const uint8_t* const* rows, const uint8_t* const* next, int64_t cols, const float* x, float* out) {
  __m256 acc[R];
  #pragma GCC unroll 16
  for (int r = 0; r < R; r++) acc[r] = _mm256_setzero_ps();
  int64_t j = 0;
  for (; j + 8 <= cols; j += 8) {
    if (j % (F16 ? 32 : 16) == 0) {  // a cache line of each next row
      #pragma GCC unroll 16
      for (int r = 0; r < R; r++) prefetch(next[r], j * (F16 ? 2 : 4));
    }
    const __m256 xv = _mm256_loadu_ps(x + j);
    #pragma GCC unroll 16
    for (int r = 0; r < R; r++) acc[r] = _mm256_fmadd_ps(loadW<F16>(rows[r], j), xv, acc[r]);
  }
  #pragma GCC unroll 16
  for (int r = 0; r < R; r++) {
    float s = hsum256(acc[r]);
    for (int64_t c = j; c < cols; c++) s = std::fma(loadW1<F16>(rows[r], c), x[c], s);
    out[r] = s;
  }
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

// Contiguous rows (a matvec) one at a time, the row kAhead further on prefetched at the pace
// this one is read: a single sequential stream, which the hardware prefetchers follow too.
// Groups of 4 rows sharing the activation loads ran as fast out of L2 but slower out of memory
// (4 streams 2.3 KB apart): on a Zen 3 VM, 11,008 x 4,096 Q4_0, 7.2 -> 10.0 GB/s on one thread
// and 12.1 -> 16.5 on two. Gathered rows (idx) keep groups of 4, the next group prefetched:
// there one row at a time measured 6-9% slower. Each row's sum is the same either way.
void dotRows(int type, const uint8_t* W, size_t rowBytes, const int32_t* idx, int64_t k0, int64_t k1, int64_t cols,
             const Act& x, float* y) {
  auto rowAt = [&](int64_t k) { return W + (size_t)(idx ? idx[std::min(k, k1 - 1)] : std::min(k, k1 - 1)) * rowBytes; };
  int64_t k = k0;
  if (idx) {
    constexpr int G = 4;  // gathered rows per group; the next group is prefetched
    const uint8_t* rows[G];
    const uint8_t* next[G];
    for (; k + G <= k1; k += G) {
      for (int r = 0; r < G; r++) {
        rows[r] = rowAt(k + r);
        next[r] = rowAt(k + G + r);
      }
      dotGroup<G>(type, rows, next, cols, x, y + (k - k0));
    }
  }
  for (; k < k1; k++) {
    const uint8_t* row = rowAt(k);
    const uint8_t* next = rowAt(k + kAhead);
    dotGroup<1>(type, &row, &next, cols, x, y + (k - k0));
  }
}

// ---- matmul tiles: per element exactly the dotRows operations ---------------------------------

template <int RT, int TT>
inline void tileQ(int type, const uint8_t* const* rows, int64_t nb, const Act* xs, float* const* outs) {
  const __m256i ones = _mm256_set1_epi16(1);
  __m256 acc[RT][TT];
  #pragma GCC unroll 16
  for (int r = 0; r < RT; r++)
    #pragma GCC unroll 16
    for (int t = 0; t < TT; t++) acc[r][t] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; b++) {
    __m256i w[RT], sw[RT];
    float dw[RT];
    #pragma GCC unroll 16
    for (int r = 0; r < RT; r++) {
      if (type == T_Q4_0) {
        const BlockQ4_0* blk = reinterpret_cast<const BlockQ4_0*>(rows[r]) + b;
        w[r] = unpackQ4(blk);
        sw[r] = w[r];
        dw[r] = f16(blk->d);
      } else {
        const BlockQ8_0* blk = reinterpret_cast<const BlockQ8_0*>(rows[r]) + b;
        sw[r] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk->qs));
        w[r] = _mm256_sign_epi8(sw[r], sw[r]);
        dw[r] = f16(blk->d);
      }
    }
    #pragma GCC unroll 16
    for (int t = 0; t < TT; t++) {
      const __m256i xq = _mm256_load_si256(reinterpret_cast<const __m256i*>(xs[t].qs + b * QK));
      const float dx = xs[t].d[b];
      if (type == T_Q4_0) {
        const __m256i corr = _mm256_set1_epi32(xs[t].corr4[b]);
        #pragma GCC unroll 16
        for (int r = 0; r < RT; r++) {
          const __m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(w[r], xq), ones);
          const __m256 s = _mm256_cvtepi32_ps(_mm256_add_epi32(p, corr));
          acc[r][t] = _mm256_fmadd_ps(s, _mm256_set1_ps(dw[r] * dx), acc[r][t]);
        }
      } else {
        #pragma GCC unroll 16
        for (int r = 0; r < RT; r++) {
          const __m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(w[r], _mm256_sign_epi8(xq, sw[r])), ones);
          acc[r][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_set1_ps(dw[r] * dx), acc[r][t]);
        }
      }
    }
  }
  #pragma GCC unroll 16
  for (int r = 0; r < RT; r++)
    #pragma GCC unroll 16
    for (int t = 0; t < TT; t++) outs[t][r] = hsum256(acc[r][t]);
}

template <bool F16, int RT, int TT>
inline void tileF(const uint8_t* const* rows, int64_t cols, const Act* xs, float* const* outs) {
  __m256 acc[RT][TT];
  #pragma GCC unroll 16
  for (int r = 0; r < RT; r++)
    #pragma GCC unroll 16
    for (int t = 0; t < TT; t++) acc[r][t] = _mm256_setzero_ps();
  int64_t j = 0;
  for (; j + 8 <= cols; j += 8) {
    __m256 w[RT];
    #pragma GCC unroll 16
    for (int r = 0; r < RT; r++) w[r] = loadW<F16>(rows[r], j);
    #pragma GCC unroll 16
    for (int t = 0; t < TT; t++) {
      const __m256 xv = _mm256_loadu_ps(xs[t].f + j);
      #pragma GCC unroll 16
      for (int r = 0; r < RT; r++) acc[r][t] = _mm256_fmadd_ps(w[r], xv, acc[r][t]);
    }
  }
  #pragma GCC unroll 16
  for (int r = 0; r < RT; r++)
    #pragma GCC unroll 16
    for (int t = 0; t < TT; t++) {
      float s = hsum256(acc[r][t]);
      for (int64_t c = j; c < cols; c++) s = std::fma(loadW1<F16>(rows[r], c), xs[t].f[c], s);
      outs[t][r] = s;
    }
}

template <int RT, int TT>
inline void tile(int type, const uint8_t* const* rows, int64_t cols, const Act* xs, float* const* outs) {
  switch (type) {
    case T_Q4_0:
    case T_Q8_0: tileQ<RT, TT>(type, rows, cols / QK, xs, outs); break;
    case T_F16: tileF<true, RT, TT>(rows, cols, xs, outs); break;
    default: tileF<false, RT, TT>(rows, cols, xs, outs); break;
  }
}

template <int RT>
inline void tileRowGroup(int type, const uint8_t* const* rows, int64_t cols, const Act* xs, int64_t t, int64_t t1,
                         float* Y, int64_t ldy, int64_t r) {
  constexpr int TT = 3;  // 4x3 accumulators + 4 weights fit the 16 ymm registers
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

void matmul(int type, const uint8_t* const* rows, int64_t r0, int64_t r1, int64_t cols, const Act* xs,
            int64_t t0, int64_t t1, float* Y, int64_t ldy) {
  constexpr int64_t kTokBlock = 15;
  for (int64_t tb = t0; tb < t1; tb += kTokBlock) {
    const int64_t te = std::min(t1, tb + kTokBlock);
    int64_t r = r0;
    for (; r + 4 <= r1; r += 4) tileRowGroup<4>(type, rows + r, cols, xs, tb, te, Y, ldy, r);
    for (; r < r1; r++) tileRowGroup<1>(type, rows + r, cols, xs, tb, te, Y, ldy, r);
  }
}

// ---- axpyRows: out[c] = fma(coef_k, w_kc, out[c]) for k ascending -------------------------

// Rows are scattered (cache slots), so they are streamed: G rows at a time run over the columns
// [c0, c1) while `out` stays in L1, and the next G rows are prefetched meanwhile (as avx512.cc;
// a tile of columns run over every row instead re-reads each row's lines once per tile and
// reached 10-18% of the dense matvec's GB/s). Each out[c] takes one fma per row, k ascending,
// whatever the tiling or thread count: the sum is the same bit for bit.

// Q4_0: out[c] = fma(coef_k·d, q - 8, out[c]), the block's scale folded into the coefficient
// (coef_k·d rounded once; the scalar code rounds coef_k·((q - 8)·d) instead, within the tolerance
// of test/native/simd.test.ts), so a weight costs one fma instead of a dequantising fma and an
// accumulating one: +22% on a Zen 3 VM, old and new alternated in one process; sparse-bench
// 46-49% -> 56-64% of the dense matvec's GB/s (docs/benchmarks.md, 2026-12-07 (stop 57)).
// q - 8 comes exact from the float bits 0x4B000000 | q (2^23 + q) less 2^23 + 8.
struct Q4Nibbles {
  const __m256i mask = _mm256_set1_epi32(0x0F), magic = _mm256_set1_epi32(0x4B000000);
  const __m256 bias = _mm256_set1_ps(8388616.0f);  // 2^23 + 8
  __m256 value(__m256i q) const { return _mm256_sub_ps(_mm256_castsi256_ps(_mm256_or_si256(q, magic)), bias); }
  // acc[0..4) (the block's 32 columns) += a·(q - 8)
  void axpy(const BlockQ4_0* blk, __m256 a, __m256* acc) const {
    // each byte zero-extended to 32 bits straight from memory: t & 15 the low nibble, t >> 4 the high
    const __m256i t0 = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(blk->qs)));
    const __m256i t1 = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(blk->qs + 8)));
    acc[0] = _mm256_fmadd_ps(a, value(_mm256_and_si256(t0, mask)), acc[0]);
    acc[1] = _mm256_fmadd_ps(a, value(_mm256_and_si256(t1, mask)), acc[1]);
    acc[2] = _mm256_fmadd_ps(a, value(_mm256_srli_epi32(t0, 4)), acc[2]);
    acc[3] = _mm256_fmadd_ps(a, value(_mm256_srli_epi32(t1, 4)), acc[3]);
  }
};

// G Q4_0 rows over blocks [b0, b1): four blocks at a time (their scales converted together), two
// blocks' 64 columns in eight registers across the G rows (eight independent fma chains).
template <int G>
inline void axpyGroupQ4(const uint8_t* const* r, const float* coef, const uint8_t* const* next, int nNext,
                        int64_t b0, int64_t b1, float* out) {
  const Q4Nibbles nib;
  auto block = [&](int j, int64_t b) { return reinterpret_cast<const BlockQ4_0*>(r[j]) + b; };
  int64_t b = b0;
  for (; b + 4 <= b1; b += 4) {
    for (int j = 0; j < nNext; j++) {  // 72 bytes of each row per step: the next rows' 128
      prefetch(next[j], b * sizeof(BlockQ4_0));
      prefetch(next[j], b * sizeof(BlockQ4_0) + 64);
    }
    alignas(16) float sc[G][4];  // coef_j·d of the 4 blocks of row j
    #pragma GCC unroll 8
    for (int j = 0; j < G; j++) {
      const BlockQ4_0* blk = block(j, b);
      __m128i h = _mm_cvtsi32_si128(blk[0].d);
      h = _mm_insert_epi16(h, blk[1].d, 1);
      h = _mm_insert_epi16(h, blk[2].d, 2);
      h = _mm_insert_epi16(h, blk[3].d, 3);
      _mm_store_ps(sc[j], _mm_mul_ps(_mm_cvtph_ps(h), _mm_set1_ps(coef[j])));
    }
    for (int e = 0; e < 4; e += 2) {
      __m256 acc[8];
      for (int h = 0; h < 8; h++) acc[h] = _mm256_loadu_ps(out + (b + e) * QK + 8 * h);
      #pragma GCC unroll 8
      for (int j = 0; j < G; j++) {
        nib.axpy(block(j, b + e), _mm256_broadcast_ss(&sc[j][e]), acc);
        nib.axpy(block(j, b + e + 1), _mm256_broadcast_ss(&sc[j][e + 1]), acc + 4);
      }
      for (int h = 0; h < 8; h++) _mm256_storeu_ps(out + (b + e) * QK + 8 * h, acc[h]);
    }
  }
  for (; b < b1; b++) {
    __m256 acc[4];
    for (int h = 0; h < 4; h++) acc[h] = _mm256_loadu_ps(out + b * QK + 8 * h);
    for (int j = 0; j < G; j++) nib.axpy(block(j, b), _mm256_set1_ps(coef[j] * f16(block(j, b)->d)), acc);
    for (int h = 0; h < 4; h++) _mm256_storeu_ps(out + b * QK + 8 * h, acc[h]);
  }
}

// Q8_0 rows, block by block: the 32 weights q·d of a block exact (an 8-bit integer times an
// fp16 scale needs at most 19 bits of mantissa), then fma(coef_k, w, ·); a 32-column block of
// `out` stays in four registers across the G rows' blocks.
template <int G>
inline void axpyGroupQ8(const uint8_t* const* r, const float* coef, const uint8_t* const* next, int nNext,
                        int64_t b0, int64_t b1, float* out) {
  constexpr size_t kBlock = sizeof(BlockQ8_0);
  constexpr int64_t kPace = (64 + kBlock - 1) / kBlock;  // the next rows' lines at the pace these are read
  for (int64_t b = b0; b < b1; b++) {
    if ((b - b0) % kPace == 0) {
      for (int j = 0; j < nNext; j++) {
        prefetch(next[j], b * kBlock);
        prefetch(next[j], b * kBlock + 64);
      }
    }
    __m256 acc[4];
    for (int h = 0; h < 4; h++) acc[h] = _mm256_loadu_ps(out + b * QK + 8 * h);
    #pragma GCC unroll 8
    for (int j = 0; j < G; j++) {
      const BlockQ8_0* blk = reinterpret_cast<const BlockQ8_0*>(r[j]) + b;
      const __m256 d = _mm256_set1_ps(f16(blk->d));
      const __m256 a = _mm256_broadcast_ss(coef + j);
      for (int h = 0; h < 4; h++) {
        const __m128i q = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(blk->qs + 8 * h));
        acc[h] = _mm256_fmadd_ps(a, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q)), d), acc[h]);
      }
    }
    for (int h = 0; h < 4; h++) _mm256_storeu_ps(out + b * QK + 8 * h, acc[h]);
  }
}

// Float rows (F16 / F32): 8 columns at a time, the last < 8 by scalar fma in the same order.
template <bool F16, int G>
inline void axpyGroup(const uint8_t* const* r, const float* coef, const uint8_t* const* next, int nNext, size_t lo,
                      size_t hi, int64_t c0, int64_t c1, float* out) {
  for (int j = 0; j < nNext; j++) {
    for (size_t o = lo; o < hi; o += 64) prefetch(next[j], o);
  }
  int64_t c = c0;
  for (; c + 8 <= c1; c += 8) {
    __m256 acc = _mm256_loadu_ps(out + c);
    for (int j = 0; j < G; j++) acc = _mm256_fmadd_ps(_mm256_broadcast_ss(coef + j), loadW<F16>(r[j], c), acc);
    _mm256_storeu_ps(out + c, acc);
  }
  for (; c < c1; c++)
    for (int j = 0; j < G; j++) out[c] = std::fma(coef[j], loadW1<F16>(r[j], c), out[c]);
}

// G rows (pointers r[0..G), coefficients coef[0..G)) over the columns, the next nNext prefetched.
template <int TYPE, int G>
inline void axpyRowGroup(const uint8_t* const* r, const float* coef, const uint8_t* const* next, int nNext,
                         int64_t c0, int64_t c1, float* out) {
  // quantised: c0 and c1 are block aligned (dispatch splits columns by blocks)
  if constexpr (TYPE == T_Q4_0) {
    axpyGroupQ4<G>(r, coef, next, nNext, c0 / QK, (c1 + QK - 1) / QK, out);
  } else if constexpr (TYPE == T_Q8_0) {
    axpyGroupQ8<G>(r, coef, next, nNext, c0 / QK, (c1 + QK - 1) / QK, out);
  } else {
    constexpr size_t kBytes = TYPE == T_F16 ? 2 : 4;
    axpyGroup<TYPE == T_F16, G>(r, coef, next, nNext, (size_t)c0 * kBytes, (size_t)c1 * kBytes, c0, c1, out);
  }
}

template <int TYPE>
void axpyRowsT(const uint8_t* W, size_t rowBytes, const int32_t* idx, int64_t nIdx, const float* coef, int64_t c0,
               int64_t c1, float* out) {
  constexpr int G = 4;  // 2, 4 and 8 rows measured: 8 spills on two threads
  const uint8_t* rows[2 * G];
  auto rowAt = [&](int64_t k) { return W + (size_t)idx[k] * rowBytes; };
  int64_t k = 0;
  for (; k + G <= nIdx; k += G) {
    int nNext = 0;
    for (int j = 0; j < G; j++) rows[j] = rowAt(k + j);
    for (int64_t q = k + G; q < std::min(nIdx, k + 2 * G); q++) rows[G + nNext++] = rowAt(q);
    axpyRowGroup<TYPE, G>(rows, coef + k, rows + G, nNext, c0, c1, out);
  }
  for (; k < nIdx; k++) {
    rows[0] = rowAt(k);
    axpyRowGroup<TYPE, 1>(rows, coef + k, rows, 0, c0, c1, out);
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
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(y + i),
                     _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  for (; i < n; i++) y[i] = _cvtss_sh(x[i], _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}
void f16ToF32(const uint16_t* x, float* y, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(y + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x + i))));
  for (; i < n; i++) y[i] = f16(x[i]);
}
float dotF32(const float* a, const float* b, int64_t n) {
  __m256 acc = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc);
  float s = hsum256(acc);
  for (; i < n; i++) s = std::fma(a[i], b[i], s);
  return s;
}
float dotF16(const float* a, const uint16_t* b, int64_t n) {
  __m256 acc = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    acc = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b + i))),
                          acc);
  float s = hsum256(acc);
  for (; i < n; i++) s = std::fma(a[i], f16(b[i]), s);
  return s;
}
void axpyF32(float a, const float* x, float* y, int64_t n) {
  const __m256 av = _mm256_set1_ps(a);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_fmadd_ps(av, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
  for (; i < n; i++) y[i] = std::fma(a, x[i], y[i]);
}
void axpyF16(float a, const uint16_t* x, float* y, int64_t n) {
  const __m256 av = _mm256_set1_ps(a);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(y + i, _mm256_fmadd_ps(av, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x + i))),
                                            _mm256_loadu_ps(y + i)));
  for (; i < n; i++) y[i] = std::fma(a, f16(x[i]), y[i]);
}

void rmsnorm(const float* x, const float* w, int64_t n, float eps, float* out) {
  __m256d acc0 = _mm256_setzero_pd(), acc1 = _mm256_setzero_pd();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(x + i);
    const __m256 sq = _mm256_mul_ps(v, v);
    acc0 = _mm256_add_pd(acc0, _mm256_cvtps_pd(_mm256_castps256_ps128(sq)));
    acc1 = _mm256_add_pd(acc1, _mm256_cvtps_pd(_mm256_extractf128_ps(sq, 1)));
  }
  const __m256d a = _mm256_add_pd(acc0, acc1);
  const __m128d h = _mm_add_pd(_mm256_castpd256_pd128(a), _mm256_extractf128_pd(a, 1));
  double sum = _mm_cvtsd_f64(_mm_add_sd(h, _mm_unpackhi_pd(h, h)));
  for (; i < n; i++) sum += (double)(x[i] * x[i]);
  const float mean = (float)(sum / (double)n);
  const float scale = 1.0f / std::sqrt(mean + eps);
  const __m256 sv = _mm256_set1_ps(scale);
  for (i = 0; i + 8 <= n; i += 8)
    _mm256_storeu_ps(out + i, _mm256_mul_ps(_mm256_mul_ps(_mm256_loadu_ps(x + i), sv), _mm256_loadu_ps(w + i)));
  for (; i < n; i++) out[i] = (x[i] * scale) * w[i];
}

void gated(int kind, const float* g, const float* u, float* out, int64_t n) {
  if (kind == 0) {  // SwiGLU: exact expf per element, as the scalar path
    kScalar.gated(kind, g, u, out, n);
    return;
  }
  const __m256 z = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 gv = _mm256_max_ps(_mm256_loadu_ps(g + i), z);
    __m256 uv = _mm256_loadu_ps(u + i);
    if (kind == 2) uv = _mm256_max_ps(uv, z);
    _mm256_storeu_ps(out + i, _mm256_mul_ps(gv, uv));
  }
  for (; i < n; i++) {
    const float gv = g[i] > 0.0f ? g[i] : 0.0f;
    const float uv = kind == 2 ? (u[i] > 0.0f ? u[i] : 0.0f) : u[i];
    out[i] = gv * uv;
  }
}

void add(const float* a, const float* b, float* out, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(out + i, _mm256_add_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i)));
  for (; i < n; i++) out[i] = a[i] + b[i];
}

}  // namespace

const Kernels& kernelsAvx2() {
  static const Kernels k = [] {
    Kernels t = kScalar;
    t.name = "avx2";
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
    // softmax, dequantRow: scalar (exp-bound / not hot).
    return t;
  }();
  return k;
}

}  // namespace np
