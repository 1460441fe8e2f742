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
// Batched axpyRows: out[t·cols + c] += Σ_k coef[t·ldc + k]·W[idx[k]][c] for each of nTok tokens,
// k ascending: every token's output is bit-identical to opAxpyRows with its coefficients. The
// rows are taken a few dozen at a time for all tokens, so they are read from memory once.
void opAxpyRowsBatch(int type, const uint8_t* W, int64_t cols, const int32_t* idx, int64_t nIdx, const float* coef,
                     int64_t ldc, int64_t nTok, float* out, size_t rowStride = 0);
// The same sum through OpenBLAS sgemm on dequantised rows (fixed column blocks: deterministic
// whatever the thread count, not bit-identical to opAxpyRowsBatch). Returns false, doing
// nothing, without OpenBLAS, on the scalar level or with NEURONPIPE_NO_BLAS=1.
bool opGemmRowsAcc(int type, const uint8_t* W, int64_t cols, const int32_t* idx, int64_t nIdx, const float* coef,
                   int64_t ldc, int64_t nTok, float* out, size_t rowStride = 0);
// Y (nTok, rows) = X (nTok, cols) · W^T; rowStride as in opMatvecRows.
void opMatmul(int type, const uint8_t* W, int64_t rows, int64_t cols, const float* X, int64_t nTok, float* Y,
              size_t rowStride = 0);

void opRmsnorm(const float* x, const float* w, int64_t n, int64_t nTok, float eps, float* out);
void opRope(float* x, int64_t nTok, int64_t nHeads, int64_t headDim, int64_t ropeDim, int64_t pos0, float freqBase,
            bool neox);
void opSoftmax(float* x, int64_t n, int64_t nRows);
void opGated(int kind, const float* g, const float* u, float* out, int64_t n);
void opAdd(const float* a, const float* b, float* out, int64_t n);
void opKvStore(int kvType, uint8_t* cache, int64_t rowLen, int64_t pos0, int64_t nTok, const float* src);
void opAttention(int kvType, const float* q, const uint8_t* kc, const uint8_t* vc, int64_t nHead, int64_t nHeadKv,
                 int64_t headDim, int64_t pos0, int64_t nTok, float* out);

}  // namespace np
