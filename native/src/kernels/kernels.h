// Kernel table: one instance per SIMD level (scalar, avx2, avx512). dispatch.cc picks
// the active table at run time and does all threading; kernels here work on ranges and
// never touch the pool. Every entry of every table must compute each output element
// in an order that does not depend on the range it is handed (determinism across
// thread counts).
#pragma once
#include <cstdint>

#include "types.h"

namespace np {

// A prepared activation vector (prepared once per call, shared read-only by threads).
//   F32: f = x.          F16: f = x rounded to fp16 and back (ggml converts x to f16).
//   Q4_0/Q8_0: x quantised per 32-block to Q8_0 (exactly quantize_row_q8_0):
//   qs (int8, 32 per block, 64-byte aligned), d (fp16-rounded scale as f32),
//   sum (Σ qs of the block), corr4 = -sum, corr8 = -16*sum (helpers for VNNI paths).
struct Act {
  const float* f = nullptr;
  const int8_t* qs = nullptr;
  const float* d = nullptr;
  const int32_t* sum = nullptr;
  const int32_t* corr4 = nullptr;
  const int32_t* corr8 = nullptr;
  // Per block, 8 copies each (so one 512-bit load covers two blocks):
  const int32_t* corrv = nullptr;  // corr4 (Q4_0) or corr8 (Q8_0) of the block, x8
  const float* dv = nullptr;       // d of the block, x8
  // Q4_0 only, per pair of blocks (2p, 2p+1): qp = 64 bytes [x2p[0..15], x2p+1[0..15],
  // x2p[16..31], x2p+1[16..31]] (matches [low nibbles | high nibbles] of two weight blocks),
  // cvp = 8 int32 [-2·sum(2p) x4, -2·sum(2p+1) x4] (= -8·Σx per block over 4 lanes).
  const int8_t* qp = nullptr;
  const int32_t* cvp = nullptr;
};

struct Kernels {
  const char* name;
  // x (n floats, n % 32 == 0) -> Q8_0 parts. Bit-identical across levels.
  void (*quantizeQ8)(const float* x, int64_t n, int8_t* qs, float* d, int32_t* sum);
  // y[k - k0] = W[row_k] . x for k in [k0, k1), row_k = idx ? idx[k] : k.
  void (*dotRows)(int type, const uint8_t* W, size_t rowBytes, const int32_t* idx, int64_t k0, int64_t k1,
                  int64_t cols, const Act& x, float* y);
  // Y[t*ldy + r] = rows[r] . X_t for r in [r0, r1), t in [t0, t1) (rows: one pointer per row). Per
  // element independent of the ranges (may differ from dotRows by rounding: a different tiling).
  void (*matmul)(int type, const uint8_t* const* rows, int64_t r0, int64_t r1, int64_t cols,
                 const Act* xs, int64_t t0, int64_t t1, float* Y, int64_t ldy);
  // out[c] += Σ_k coef[k] * W[idx[k], c] for c in [c0, c1) (block aligned for Q types), k ascending.
  void (*axpyRows)(int type, const uint8_t* W, size_t rowBytes, const int32_t* idx, int64_t nIdx,
                   const float* coef, int64_t c0, int64_t c1, float* out);
  void (*dequantRow)(int type, const uint8_t* row, int64_t cols, float* out);
  void (*f32ToF16)(const float* x, uint16_t* y, int64_t n);
  void (*f16ToF32)(const uint16_t* x, float* y, int64_t n);
  float (*dotF32)(const float* a, const float* b, int64_t n);
  float (*dotF16)(const float* a, const uint16_t* b, int64_t n);
  void (*axpyF32)(float a, const float* x, float* y, int64_t n);  // y += a*x
  void (*axpyF16)(float a, const uint16_t* x, float* y, int64_t n);
  void (*rmsnorm)(const float* x, const float* w, int64_t n, float eps, float* out);
  void (*softmax)(float* x, int64_t n);
  void (*gated)(int kind, const float* g, const float* u, float* out, int64_t n);
  void (*add)(const float* a, const float* b, float* out, int64_t n);
  // O[t*ldo + c] += Σ_n H_t[n] · W[n][c] for c in [c0, c1) (c0 a multiple of 16), t in [0, nTok):
  // the rows W[n] = rows[n], n < nRows, are the reduction (a pack's neuron-major down columns).
  //   F32/F16: xs[t].f = H_t;  acc = O[t, c];  for n ascending: acc = fma(H_t[n], W[n][c], acc).
  //   Q4_0/Q8_0: each group G of 32 rows is requantised per column to int8 (s = amax/127 of the
  //   32 values, q = round(v/s)), xs[t] is H_t quantised to Q8_0 over nRows rounded up to 32
  //   (zeros past nRows), and acc = O[t, c]; for G ascending:
  //   acc = fma(float(Σ_{n∈G} q[n][c]·hq[t][n]), s[G][c]·d_t[G], acc)   (integer dots exact).
  // Either way the same bits at every level and whatever the column range.
  void (*matmulTAcc)(int type, const uint8_t* const* rows, int64_t nRows, int64_t c0, int64_t c1,
                     const Act* xs, int64_t nTok, float* O, int64_t ldo);
};

extern const Kernels kScalar;
// Filled by avx2.cc / avx512.cc (entries not specialised there point at scalar code).
const Kernels& kernelsAvx2();
const Kernels& kernelsAvx512();

// Scalar building blocks reused by SIMD tables.
void scalarQuantizeQ4_0Row(const float* x, int64_t n, BlockQ4_0* y);
void scalarQuantizeQ8_0Row(const float* x, int64_t n, BlockQ8_0* y);
void scalarRope(float* x, int64_t nTok, int64_t nHeads, int64_t headDim, int64_t ropeDim, int64_t pos0,
                float freqBase, bool neox);

}  // namespace np
