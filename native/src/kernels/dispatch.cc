#include "dispatch.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <new>
#include <vector>

#include "../threads.h"

#ifdef NP_HAVE_OPENBLAS
#include <cblas.h>
#endif

namespace np {

#ifdef NP_HAVE_OPENBLAS
// May this call use OpenBLAS? Not on the scalar reference level, nor with NEURONPIPE_NO_BLAS=1
// (the built-in kernels; tests cover both). OpenBLAS itself runs single-threaded: the callers
// split work into fixed blocks on our pool, so results do not depend on the thread count.
static bool blasUsable() {
  const char* noBlas = std::getenv("NEURONPIPE_NO_BLAS");
  if (getSimd() == SIMD_SCALAR || (noBlas && noBlas[0] == '1')) return false;
  static const bool once = [] {
    openblas_set_num_threads(1);
    return true;
  }();
  return once;
}
#endif

// ---- CPU features / selection ----------------------------------------------------------

CpuFeat cpuFeatures() {
  __builtin_cpu_init();
  CpuFeat f;
  f.avx2 = __builtin_cpu_supports("avx2");
  f.fma = __builtin_cpu_supports("fma");
  // GCC 12 has no "f16c" key for __builtin_cpu_supports; read CPUID.1:ECX bit 29.
  {
    unsigned a, b, c, d;
    __asm__ volatile("cpuid" : "=a"(a), "=b"(b), "=c"(c), "=d"(d) : "a"(1), "c"(0));
    f.f16c = (c >> 29) & 1;
  }
  f.avx512f = __builtin_cpu_supports("avx512f");
  f.avx512bw = __builtin_cpu_supports("avx512bw");
  f.avx512vl = __builtin_cpu_supports("avx512vl");
  f.avx512vnni = __builtin_cpu_supports("avx512vnni");
  return f;
}

bool simdSupported(SimdLevel l) {
  static const CpuFeat f = cpuFeatures();
  switch (l) {
    case SIMD_SCALAR: return true;
    case SIMD_AVX2: return f.avx2 && f.fma && f.f16c;
    case SIMD_AVX512: return f.avx2 && f.fma && f.f16c && f.avx512f && f.avx512bw && f.avx512vl && f.avx512vnni;
  }
  return false;
}

SimdLevel bestSimd() {
  if (simdSupported(SIMD_AVX512)) return SIMD_AVX512;
  if (simdSupported(SIMD_AVX2)) return SIMD_AVX2;
  return SIMD_SCALAR;
}

namespace {
std::atomic<int> g_level{-1};
const Kernels* tableFor(SimdLevel l) {
  switch (l) {
    case SIMD_AVX512: return &kernelsAvx512();
    case SIMD_AVX2: return &kernelsAvx2();
    default: return &kScalar;
  }
}
}  // namespace

void setSimd(SimdLevel l) { g_level.store((int)l); }
SimdLevel getSimd() {
  int l = g_level.load();
  if (l < 0) {
    l = (int)bestSimd();
    g_level.store(l);
  }
  return (SimdLevel)l;
}
const char* simdName(SimdLevel l) {
  switch (l) {
    case SIMD_AVX512: return "avx512";
    case SIMD_AVX2: return "avx2";
    default: return "scalar";
  }
}
const Kernels& K() { return *tableFor(getSimd()); }

// ---- scratch --------------------------------------------------------------------------

namespace {
struct Scratch {
  void* p = nullptr;
  size_t cap = 0;
  ~Scratch() { std::free(p); }
  void* get(size_t n) {
    if (n > cap) {
      std::free(p);
      cap = (n + 4095) & ~size_t(4095);
      p = std::aligned_alloc(64, cap);
      if (!p) {
        cap = 0;
        throw std::bad_alloc();
      }
    }
    return p;
  }
};

inline size_t al64(size_t n) { return (n + 63) & ~size_t(63); }

// Memory for prepared activations of nTok rows of `cols` (one block of arrays per row).
struct ActSet {
  std::vector<Act> acts;
};

size_t actBytes(int type, int64_t cols) {
  if (typeQuantized(type)) {
    const int64_t nb = cols / QK;
    return al64(cols) + 4 * al64(nb * 4) + 2 * al64(nb * 32) + al64(cols) + al64(nb * 16 + 32);
  }
  return al64(cols * 4);
}

// Prepares activation t of X into memory `mem` (actBytes(type, cols) bytes).
void prepareAct(const Kernels& k, int type, const float* x, int64_t cols, uint8_t* mem, Act& a) {
  a = Act{};
  if (type == T_F32) {
    // Copied so that the output may alias the input (y written while other threads read x).
    float* f = reinterpret_cast<float*>(mem);
    std::memcpy(f, x, (size_t)cols * 4);
    a.f = f;
    return;
  }
  if (type == T_F16) {
    float* f = reinterpret_cast<float*>(mem);
    uint16_t tmp[256];
    for (int64_t s = 0; s < cols; s += 256) {
      const int64_t e = std::min<int64_t>(cols, s + 256);
      k.f32ToF16(x + s, tmp, e - s);
      k.f16ToF32(tmp, f + s, e - s);
    }
    a.f = f;
    return;
  }
  const int64_t nb = cols / QK;
  int8_t* qs = reinterpret_cast<int8_t*>(mem);
  float* d = reinterpret_cast<float*>(mem + al64(cols));
  int32_t* sum = reinterpret_cast<int32_t*>(mem + al64(cols) + al64(nb * 4));
  int32_t* c4 = reinterpret_cast<int32_t*>(mem + al64(cols) + 2 * al64(nb * 4));
  int32_t* c8 = reinterpret_cast<int32_t*>(mem + al64(cols) + 3 * al64(nb * 4));
  int32_t* cv = reinterpret_cast<int32_t*>(mem + al64(cols) + 4 * al64(nb * 4));
  float* dv = reinterpret_cast<float*>(mem + al64(cols) + 4 * al64(nb * 4) + al64(nb * 32));
  k.quantizeQ8(x, cols, qs, d, sum);
  for (int64_t i = 0; i < nb; i++) {
    c4[i] = -sum[i];
    c8[i] = -16 * sum[i];
    for (int j = 0; j < 8; j++) {
      cv[i * 8 + j] = type == T_Q4_0 ? c4[i] : c8[i];
      dv[i * 8 + j] = d[i];
    }
  }
  a.corrv = cv;
  a.dv = dv;
  if (type == T_Q4_0) {
    int8_t* qp = reinterpret_cast<int8_t*>(mem + al64(cols) + 4 * al64(nb * 4) + 2 * al64(nb * 32));
    int32_t* cvp = reinterpret_cast<int32_t*>(mem + al64(cols) + 4 * al64(nb * 4) + 2 * al64(nb * 32) + al64(cols));
    for (int64_t p = 0; p + 1 < nb; p += 2) {
      int8_t* o = qp + p * QK;  // 64 bytes per pair
      std::memcpy(o, qs + p * QK, 16);
      std::memcpy(o + 16, qs + (p + 1) * QK, 16);
      std::memcpy(o + 32, qs + p * QK + 16, 16);
      std::memcpy(o + 48, qs + (p + 1) * QK + 16, 16);
      for (int j = 0; j < 4; j++) {
        cvp[p * 4 + j] = -2 * sum[p];
        cvp[p * 4 + 4 + j] = -2 * sum[p + 1];
      }
    }
    a.qp = qp;
    a.cvp = cvp;
  }
  a.qs = qs;
  a.d = d;
  a.sum = sum;
  a.corr4 = c4;
  a.corr8 = c8;
}

thread_local Scratch t_act;   // prepared activations (calling thread)
thread_local Scratch t_tmp;   // per-thread temporaries (attention scores etc.)

inline int threadsFor(double work, double perThread) {
  // Use more threads only when each gets at least `perThread` units of work, and no more than
  // the calling thread's cap (poolSetCallerCap).
  const int cap = poolCallerCap();
  const int T = cap > 0 ? std::min(cap, poolGetThreads()) : poolGetThreads();
  if (T <= 1) return 1;
  const int n = (int)std::min<double>(T, std::max(1.0, work / perThread));
  return n;
}

// Rows per dynamically scheduled chunk: a multiple of 4 in [16, 128], about 8 chunks per
// thread (long chunks keep the row prefetch going; several per thread balance the load).
int64_t rowsPerChunk(int64_t rows, int T) {
  int64_t r = rows / (8 * (int64_t)T);
  r = std::max<int64_t>(16, std::min<int64_t>(128, r));
  return (r + 3) & ~int64_t(3);
}

}  // namespace

// ---- conversion -------------------------------------------------------------------------

void opQuantize(int type, const float* src, uint8_t* dst, int64_t rows, int64_t cols) {
  const Kernels& k = K();
  const size_t rb = rowBytesOf(type, cols);
  const int64_t rowsPerChunk = std::max<int64_t>(1, 65536 / std::max<int64_t>(cols, 1));
  const int64_t nChunks = (rows + rowsPerChunk - 1) / rowsPerChunk;
  const int T = threadsFor((double)rows * cols, 1 << 18);
  poolRun(nChunks, T, [&](int64_t c) {
    const int64_t r0 = c * rowsPerChunk, r1 = std::min(rows, r0 + rowsPerChunk);
    for (int64_t r = r0; r < r1; r++) {
      const float* x = src + r * cols;
      uint8_t* y = dst + (size_t)r * rb;
      switch (type) {
        case T_F32: std::memcpy(y, x, (size_t)cols * 4); break;
        case T_F16: k.f32ToF16(x, reinterpret_cast<uint16_t*>(y), cols); break;
        case T_Q4_0: scalarQuantizeQ4_0Row(x, cols, reinterpret_cast<BlockQ4_0*>(y)); break;
        case T_Q8_0: scalarQuantizeQ8_0Row(x, cols, reinterpret_cast<BlockQ8_0*>(y)); break;
      }
    }
  });
}

void opDequantRow(int type, const uint8_t* row, int64_t cols, float* out) { K().dequantRow(type, row, cols, out); }

namespace {
inline uint64_t splitmix64(uint64_t& s) {
  uint64_t z = (s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
inline uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
}  // namespace

// Chunks of 65536 values; chunk c runs xoshiro256** seeded by splitmix64(seed, c).
// The value at index i depends only on (seed, i), never on the thread count.
void opFillUniform(float* dst, int64_t n, uint64_t seed, float scale) {
  constexpr int64_t kChunk = 65536;
  const int64_t nChunks = (n + kChunk - 1) / kChunk;
  const int T = threadsFor((double)n, 1 << 18);
  poolRun(nChunks, T, [&](int64_t c) {
    uint64_t sm = seed ^ (0xD1B54A32D192ED03ull * (uint64_t)(c + 1));
    uint64_t s[4];
    for (auto& v : s) v = splitmix64(sm);
    const int64_t i0 = c * kChunk, i1 = std::min(n, i0 + kChunk);
    for (int64_t i = i0; i < i1; i++) {
      const uint64_t r = rotl(s[1] * 5, 7) * 9;
      const uint64_t t = s[1] << 17;
      s[2] ^= s[0];
      s[3] ^= s[1];
      s[1] ^= s[2];
      s[0] ^= s[3];
      s[2] ^= t;
      s[3] = rotl(s[3], 45);
      const float u = (float)(r >> 40) * (1.0f / 16777216.0f);  // [0,1), exact
      dst[i] = (2.0f * u - 1.0f) * scale;
    }
  });
}

// ---- matrix kernels ---------------------------------------------------------------------

void opMatvec(int type, const uint8_t* W, int64_t rows, int64_t cols, const float* x, float* y) {
  const Kernels& k = K();
  Act a;
  prepareAct(k, type, x, cols, static_cast<uint8_t*>(t_act.get(actBytes(type, cols))), a);
  const size_t rb = rowBytesOf(type, cols);
  const int T = threadsFor((double)rows * rb, 96 * 1024);
  const int64_t kRows = rowsPerChunk(rows, T);
  const int64_t nChunks = (rows + kRows - 1) / kRows;
  poolRun(nChunks, T, [&](int64_t c) {
    const int64_t r0 = c * kRows, r1 = std::min(rows, r0 + kRows);
    k.dotRows(type, W, rb, nullptr, r0, r1, cols, a, y + r0);
  });
}

void opMatvecRows(int type, const uint8_t* W, int64_t cols, const int32_t* idx, int64_t nIdx, const float* x,
                  float* y, size_t rowStride) {
  const Kernels& k = K();
  Act a;
  prepareAct(k, type, x, cols, static_cast<uint8_t*>(t_act.get(actBytes(type, cols))), a);
  const size_t rb = rowStride ? rowStride : rowBytesOf(type, cols);
  const int T = threadsFor((double)nIdx * rb, 96 * 1024);
  const int64_t kRows = rowsPerChunk(nIdx, T);
  const int64_t nChunks = (nIdx + kRows - 1) / kRows;
  poolRun(nChunks, T, [&](int64_t c) {
    const int64_t k0 = c * kRows, k1 = std::min(nIdx, k0 + kRows);
    k.dotRows(type, W, rb, idx, k0, k1, cols, a, y + k0);
  });
}

void opAxpyRows(int type, const uint8_t* W, int64_t cols, const int32_t* idx, int64_t nIdx, const float* coef,
                float* out, size_t rowStride) {
  const Kernels& k = K();
  const size_t rb = rowStride ? rowStride : rowBytesOf(type, cols);
  // Split the output columns into contiguous 32-aligned ranges, one per thread; every
  // thread runs over all k in ascending order for its columns.
  const int64_t nBlocks = (cols + QK - 1) / QK;
  const int T = std::min<int64_t>(threadsFor((double)nIdx * rb, 64 * 1024), nBlocks);
  poolRun(T, T, [&](int64_t c) {
    const int64_t c0 = std::min(cols, (nBlocks * c / T) * QK);
    const int64_t c1 = std::min(cols, (nBlocks * (c + 1) / T) * QK);
    if (c1 > c0) k.axpyRows(type, W, rb, idx, nIdx, coef, c0, c1, out);
  });
}

namespace {
// One pointer per row: W + r * rowBytes.
std::vector<const uint8_t*> rowTable(const uint8_t* W, int64_t rows, size_t rowBytes) {
  std::vector<const uint8_t*> t((size_t)rows);
  for (int64_t r = 0; r < rows; r++) t[(size_t)r] = W + (size_t)r * rowBytes;
  return t;
}
}  // namespace

void opMatmulTAccRows(int type, const uint8_t* const* rowPtrs, int64_t rows, int64_t cols, const float* H, int64_t ldh,
                      int64_t nTok, float* O) {
  if (nTok <= 0 || rows <= 0) return;
  const Kernels& k = K();
  constexpr int64_t kCols = 64;  // column groups (4 panels): each element's sum is the same whichever thread runs it
  const int64_t nChunks = (cols + kCols - 1) / kCols;
  const int T = threadsFor((double)rows * cols * (1.0 + nTok), 1 << 20);
  std::vector<Act> acts((size_t)nTok);
  if (!typeQuantized(type)) {  // f32 sums of H's values as they are
    for (int64_t t = 0; t < nTok; t++) acts[t].f = H + t * ldh;
  } else {
    const int64_t n32 = (rows + QK - 1) / QK * QK;  // H rows padded with zeros to whole groups
    const size_t ab = actBytes(T_Q8_0, n32);
    uint8_t* mem = static_cast<uint8_t*>(t_act.get((ab + (size_t)n32 * 4) * (size_t)nTok + 64));
    float* padded = reinterpret_cast<float*>(mem + ab * (size_t)nTok);
    const int Tp = threadsFor((double)nTok * n32, 1 << 16);
    poolRun(nTok, Tp, [&](int64_t t) {
      float* h = padded + t * n32;
      std::memcpy(h, H + t * ldh, (size_t)rows * 4);
      std::fill(h + rows, h + n32, 0.0f);
      prepareAct(k, T_Q8_0, h, n32, mem + ab * (size_t)t, acts[t]);
    });
  }
  poolRun(nChunks, T, [&](int64_t ch) {
    const int64_t c0 = ch * kCols, c1 = std::min(cols, c0 + kCols);
    k.matmulTAcc(type, rowPtrs, rows, c0, c1, acts.data(), nTok, O, cols);
  });
}

void opMatmulTAcc(int type, const uint8_t* W, int64_t rows, int64_t cols, const float* H, int64_t ldh, int64_t nTok,
                  float* O, size_t rowStride) {
  const std::vector<const uint8_t*> t = rowTable(W, rows, rowStride ? rowStride : rowBytesOf(type, cols));
  opMatmulTAccRows(type, t.data(), rows, cols, H, ldh, nTok, O);
}

void opMatmulRows(int type, const uint8_t* const* rowPtrs, int64_t rows, int64_t cols, const float* X, int64_t nTok,
                  float* Y) {
  const Kernels& k = K();
  const size_t ab = actBytes(type, cols);
  uint8_t* mem = static_cast<uint8_t*>(t_act.get(ab * (size_t)nTok + 64));
  std::vector<Act> acts((size_t)nTok);
  {
    const int T = threadsFor((double)nTok * cols, 1 << 16);
    poolRun(nTok, T, [&](int64_t t) { prepareAct(k, type, X + t * cols, cols, mem + ab * (size_t)t, acts[t]); });
  }
  constexpr int64_t kRows = 16;
  const int64_t nChunks = (rows + kRows - 1) / kRows;
  const int T = threadsFor((double)rows * rowBytesOf(type, cols) * (1.0 + nTok / 8.0), 96 * 1024);
  poolRun(nChunks, T, [&](int64_t c) {
    const int64_t r0 = c * kRows, r1 = std::min(rows, r0 + kRows);
    k.matmul(type, rowPtrs, r0, r1, cols, acts.data(), 0, nTok, Y, rows);
  });
}

void opMatmul(int type, const uint8_t* W, int64_t rows, int64_t cols, const float* X, int64_t nTok, float* Y,
              size_t rowStride) {
  const size_t rb = rowStride ? rowStride : rowBytesOf(type, cols);
#ifdef NP_HAVE_OPENBLAS
  // F32 prefill through OpenBLAS sgemm (not on the scalar reference path). OpenBLAS runs
  // single-threaded inside our pool on FIXED 64-row blocks: every block is one sgemm call
  // with the same arguments whatever the thread count, so results stay bit-identical.
  // NEURONPIPE_NO_BLAS=1 forces the built-in kernels (tests cover both).
  if (type == T_F32 && nTok >= 4 && blasUsable()) {
    // a copy of X: the output may alias it
    float* Xc = static_cast<float*>(t_act.get((size_t)(nTok * cols) * 4 + 64));
    std::memcpy(Xc, X, (size_t)(nTok * cols) * 4);
    constexpr int64_t kBlasRows = 64;
    const int64_t nChunks = (rows + kBlasRows - 1) / kBlasRows;
    const int T = threadsFor((double)rows * cols * nTok, 1 << 20);
    poolRun(nChunks, T, [&](int64_t c) {
      const int64_t r0 = c * kBlasRows, n = std::min(rows, r0 + kBlasRows) - r0;
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (blasint)nTok, (blasint)n, (blasint)cols, 1.0f, Xc,
                  (blasint)cols, reinterpret_cast<const float*>(W + (size_t)r0 * rb), (blasint)(rb / 4), 0.0f, Y + r0,
                  (blasint)rows);
    });
    return;
  }
#endif
  const std::vector<const uint8_t*> t = rowTable(W, rows, rb);
  opMatmulRows(type, t.data(), rows, cols, X, nTok, Y);
}

// ---- elementwise / small ops ---------------------------------------------------------------

void opRmsnorm(const float* x, const float* w, int64_t n, int64_t nTok, float eps, float* out) {
  const Kernels& k = K();
  const int T = threadsFor((double)n * nTok, 1 << 16);
  poolRun(nTok, T, [&](int64_t t) { k.rmsnorm(x + t * n, w, n, eps, out + t * n); });
}

void opRope(float* x, int64_t nTok, int64_t nHeads, int64_t headDim, int64_t ropeDim, int64_t pos0, float freqBase,
            bool neox) {
  // Each token is independent and computed identically whichever thread runs it.
  const int T = threadsFor((double)nTok * nHeads * ropeDim, 1 << 15);
  poolRun(nTok, T, [&](int64_t t) {
    scalarRope(x + t * nHeads * headDim, 1, nHeads, headDim, ropeDim, pos0 + t, freqBase, neox);
  });
}

void opSoftmax(float* x, int64_t n, int64_t nRows) {
  const Kernels& k = K();
  const int T = threadsFor((double)n * nRows, 1 << 16);
  poolRun(nRows, T, [&](int64_t r) { k.softmax(x + r * n, n); });
}

namespace {
template <class F>
void elementwise(int64_t n, F f) {
  constexpr int64_t kChunk = 16384;  // multiple of every SIMD width
  const int64_t nChunks = (n + kChunk - 1) / kChunk;
  const int T = threadsFor((double)n, 1 << 16);
  poolRun(nChunks, T, [&](int64_t c) {
    const int64_t i0 = c * kChunk, i1 = std::min(n, i0 + kChunk);
    f(i0, i1 - i0);
  });
}
}  // namespace

void opGated(int kind, const float* g, const float* u, float* out, int64_t n) {
  const Kernels& k = K();
  elementwise(n, [&](int64_t i, int64_t m) { k.gated(kind, g + i, u + i, out + i, m); });
}

void opAdd(const float* a, const float* b, float* out, int64_t n) {
  const Kernels& k = K();
  elementwise(n, [&](int64_t i, int64_t m) { k.add(a + i, b + i, out + i, m); });
}

int64_t opFlagAbove(const float* s, const float* t, int64_t n, int32_t* out) {
  int64_t m = 0;
  for (int64_t p = 0; p < n; p++) {
    out[m] = (int32_t)p;
    m += s[p] > t[p];  // branch-free: the store is overwritten until a flag keeps it
  }
  return m;
}

void opKvStore(int kvType, uint8_t* cache, int64_t rowLen, int64_t pos0, int64_t nTok, const float* src) {
  const Kernels& k = K();
  for (int64_t t = 0; t < nTok; t++) {
    const float* s = src + t * rowLen;
    if (kvType == T_F32) {
      std::memcpy(cache + (size_t)(pos0 + t) * rowLen * 4, s, (size_t)rowLen * 4);
    } else {
      k.f32ToF16(s, reinterpret_cast<uint16_t*>(cache) + (size_t)(pos0 + t) * rowLen, rowLen);
    }
  }
}

void opAttention(int kvType, const float* q, const uint8_t* kc, const uint8_t* vc, int64_t nHead, int64_t nHeadKv,
                 int64_t headDim, int64_t pos0, int64_t nTok, float* out) {
  const Kernels& k = K();
  const int64_t group = nHead / nHeadKv;
  const int64_t rowLen = nHeadKv * headDim;
  const float scale = 1.0f / std::sqrt((float)headDim);
  const int64_t nUnits = nTok * nHead;  // one unit = (token, head), computed by one thread
  const int64_t ctxUsed = pos0 + nTok;
  const int T = threadsFor((double)nUnits * ctxUsed * headDim, 1 << 15);
  poolRun(nUnits, T, [&](int64_t u) {
    const int64_t t = u / nHead, h = u % nHead, kvh = h / group;
    const int64_t n = pos0 + t + 1;
    float* sc = static_cast<float*>(t_tmp.get((size_t)n * 4));
    const float* qv = q + (t * nHead + h) * headDim;
    float* o = out + (t * nHead + h) * headDim;
    for (int64_t j = 0; j < n; j++) {
      float s;
      if (kvType == T_F32)
        s = k.dotF32(qv, reinterpret_cast<const float*>(kc) + j * rowLen + kvh * headDim, headDim);
      else
        s = k.dotF16(qv, reinterpret_cast<const uint16_t*>(kc) + j * rowLen + kvh * headDim, headDim);
      sc[j] = s * scale;
    }
    k.softmax(sc, n);
    for (int64_t i = 0; i < headDim; i++) o[i] = 0.0f;
    for (int64_t j = 0; j < n; j++) {
      if (kvType == T_F32)
        k.axpyF32(sc[j], reinterpret_cast<const float*>(vc) + j * rowLen + kvh * headDim, o, headDim);
      else
        k.axpyF16(sc[j], reinterpret_cast<const uint16_t*>(vc) + j * rowLen + kvh * headDim, o, headDim);
    }
  });
}

}  // namespace np
