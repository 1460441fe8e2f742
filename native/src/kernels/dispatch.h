// High-level operations: run-time SIMD selection + threading over the kernel tables.
// Pointers are already bounds-checked by addon.cc.
#pragma once
#include <cstdint>
#include <string>

#include "kernels.h"

namespace np {

enum SimdLevel : int { SIMD_SCALAR = 0, SIMD_AVX2 = 1, SIMD_AVX512 = 2 };

struct CpuFeat {
  bool avx2, fma, f16c, avx512f, avx512bw, avx512vl, avx512vnni;
};
CpuFeat cpuFeatures();
SimdLevel bestSimd();
bool simdSupported(SimdLevel l);
void setSimd(SimdLevel l);  // caller checked support
SimdLevel getSimd();
const char* simdName(SimdLevel l);
const Kernels& K();

void opQuantize(int type, const float* src, uint8_t* dst, int64_t rows, int64_t cols);
void opDequantRow(int type, const uint8_t* row, int64_t cols, float* out);
void opFillUniform(float* dst, int64_t n, uint64_t seed, float scale);

void opMatvec(int type, const uint8_t* W, int64_t rows, int64_t cols, const float* x, float* y);
// rowStride: bytes from one row to the next (0 = the packed row size rowBytesOf(type, cols)).
void opMatvecRows(int type, const uint8_t* W, int64_t cols, const int32_t* idx, int64_t nIdx, const float* x,
                  float* y, size_t rowStride = 0);
void opAxpyRows(int type, const uint8_t* W, int64_t cols, const int32_t* idx, int64_t nIdx, const float* coef,
                float* out, size_t rowStride = 0);
// O (nTok, cols) += H (nTok, ldh)[:, :rows] · W, W's rows the reduction (a pack's neuron-major
// down columns): each 32 rows requantised per column to int8 and H quantised to Q8_0 (see
// Kernels::matmulTAcc). Sums run over the rows in groups of 32 in order, after what O holds:
// calls over consecutive ranges of rows (multiples of 32) give the bits of one call over all.
void opMatmulTAcc(int type, const uint8_t* W, int64_t rows, int64_t cols, const float* H, int64_t ldh, int64_t nTok,
                  float* O, size_t rowStride = 0);
// The same with one pointer per row (rows from several buffers: a pack's resident neurons in the
// cache and the others in staging).
void opMatmulTAccRows(int type, const uint8_t* const* rowPtrs, int64_t rows, int64_t cols, const float* H, int64_t ldh,
                      int64_t nTok, float* O);
// Y (nTok, rows) = X (nTok, cols) · W^T; rowStride as in opMatvecRows.
void opMatmul(int type, const uint8_t* W, int64_t rows, int64_t cols, const float* X, int64_t nTok, float* Y,
              size_t rowStride = 0);
// The same with one pointer per row (no OpenBLAS: F32 through the built-in kernels).
void opMatmulRows(int type, const uint8_t* const* rowPtrs, int64_t rows, int64_t cols, const float* X, int64_t nTok,
                  float* Y);

void opRmsnorm(const float* x, const float* w, int64_t n, int64_t nTok, float eps, float* out);
void opRope(float* x, int64_t nTok, int64_t nHeads, int64_t headDim, int64_t ropeDim, int64_t pos0, float freqBase,
            bool neox);
void opSoftmax(float* x, int64_t n, int64_t nRows);
void opGated(int kind, const float* g, const float* u, float* out, int64_t n);
void opAdd(const float* a, const float* b, float* out, int64_t n);
// The positions p with s[p] > t[p], ascending, into out (n slots); returns how many.
int64_t opFlagAbove(const float* s, const float* t, int64_t n, int32_t* out);
void opKvStore(int kvType, uint8_t* cache, int64_t rowLen, int64_t pos0, int64_t nTok, const float* src);
void opAttention(int kvType, const float* q, const uint8_t* kc, const uint8_t* vc, int64_t nHead, int64_t nHeadKv,
                 int64_t headDim, int64_t pos0, int64_t nTok, float* out);

}  // namespace np
