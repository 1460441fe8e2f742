// Scalar reference kernels. Every SIMD path is tested against these.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "kernels.h"

namespace np {

// ---- weight quantisation (exactly ggml quantize_row_q4_0_ref / q8_0_ref) ----------

void scalarQuantizeQ4_0Row(const float* x, int64_t n, BlockQ4_0* y) {
  const int64_t nb = n / QK;
  for (int64_t i = 0; i < nb; i++) {
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < QK; j++) {
      const float v = x[i * QK + j];
      if (amax < std::fabs(v)) {
        amax = std::fabs(v);
        max = v;
      }
    }
    const float d = max / -8;
    const float id = d ? 1.0f / d : 0.0f;
    y[i].d = f32ToFp16(d);
    for (int j = 0; j < QK / 2; ++j) {
      const float x0 = x[i * QK + j] * id;
      const float x1 = x[i * QK + QK / 2 + j] * id;
      const uint8_t xi0 = (uint8_t)std::min<int>(15, (int8_t)(x0 + 8.5f));
      const uint8_t xi1 = (uint8_t)std::min<int>(15, (int8_t)(x1 + 8.5f));
      y[i].qs[j] = (uint8_t)(xi0 | (xi1 << 4));
    }
  }
}

void scalarQuantizeQ8_0Row(const float* x, int64_t n, BlockQ8_0* y) {
  const int64_t nb = n / QK;
  for (int64_t i = 0; i < nb; i++) {
    float amax = 0.0f;
    for (int j = 0; j < QK; j++) amax = std::max(amax, std::fabs(x[i * QK + j]));
    const float d = amax / ((1 << 7) - 1);
    const float id = d ? 1.0f / d : 0.0f;
    y[i].d = f32ToFp16(d);
    for (int j = 0; j < QK; ++j) y[i].qs[j] = (int8_t)std::round(x[i * QK + j] * id);
  }
}

// Activation quantisation to separate arrays, with the arithmetic of llama.cpp's x86 SIMD
// quantize_row_q8_0 (what the peer runs on this CPU): id = 127/amax (not 1/d) and rounding
// half to even. Weight quantisation (scalarQuantizeQ8_0Row) keeps the reference's roundf.
static void quantizeQ8(const float* x, int64_t n, int8_t* qs, float* d, int32_t* sum) {
  const int64_t nb = n / QK;
  for (int64_t i = 0; i < nb; i++) {
    const float* xb = x + i * QK;
    float amax = 0.0f;
    for (int j = 0; j < QK; j++) amax = std::max(amax, std::fabs(xb[j]));
    const float dd = amax / 127.0f;
    const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    d[i] = fp16ToF32(f32ToFp16(dd));
    int32_t s = 0;
    for (int j = 0; j < QK; ++j) {
      const int8_t q = (int8_t)std::nearbyint(xb[j] * id);  // default rounding: half to even
      qs[i * QK + j] = q;
      s += q;
    }
    sum[i] = s;
  }
}

// ---- dots -------------------------------------------------------------------------

static float dotRowQ4(const uint8_t* row, int64_t cols, const Act& x) {
  const BlockQ4_0* b = reinterpret_cast<const BlockQ4_0*>(row);
  const int64_t nb = cols / QK;
  float sumf = 0.0f;
  for (int64_t i = 0; i < nb; i++) {
    const int8_t* q = x.qs + i * QK;
    int sumi = 0;
    for (int j = 0; j < QK / 2; j++) {
      const int v0 = (b[i].qs[j] & 0x0F) - 8;
      const int v1 = (b[i].qs[j] >> 4) - 8;
      sumi += v0 * q[j] + v1 * q[j + QK / 2];
    }
    sumf += (float)sumi * fp16ToF32(b[i].d) * x.d[i];
  }
  return sumf;
}

static float dotRowQ8(const uint8_t* row, int64_t cols, const Act& x) {
  const BlockQ8_0* b = reinterpret_cast<const BlockQ8_0*>(row);
  const int64_t nb = cols / QK;
  float sumf = 0.0f;
  for (int64_t i = 0; i < nb; i++) {
    const int8_t* q = x.qs + i * QK;
    int sumi = 0;
    for (int j = 0; j < QK; j++) sumi += b[i].qs[j] * q[j];
    sumf += (float)sumi * fp16ToF32(b[i].d) * x.d[i];
  }
  return sumf;
}

static float dotRowF16(const uint8_t* row, int64_t cols, const float* x) {
  const uint16_t* w = reinterpret_cast<const uint16_t*>(row);
  float s = 0.0f;
  for (int64_t j = 0; j < cols; j++) s += fp16ToF32(w[j]) * x[j];
  return s;
}

static float dotRowF32(const uint8_t* row, int64_t cols, const float* x) {
  const float* w = reinterpret_cast<const float*>(row);
  float s = 0.0f;
  for (int64_t j = 0; j < cols; j++) s += w[j] * x[j];
  return s;
}

static float dotRow(int type, const uint8_t* row, int64_t cols, const Act& x) {
  switch (type) {
    case T_Q4_0: return dotRowQ4(row, cols, x);
    case T_Q8_0: return dotRowQ8(row, cols, x);
    case T_F16: return dotRowF16(row, cols, x.f);
    default: return dotRowF32(row, cols, x.f);
  }
}

static void dotRows(int type, const uint8_t* W, size_t rowBytes, const int32_t* idx, int64_t k0, int64_t k1,
                    int64_t cols, const Act& x, float* y) {
  for (int64_t k = k0; k < k1; k++) {
    const int64_t r = idx ? idx[k] : k;
    y[k - k0] = dotRow(type, W + (size_t)r * rowBytes, cols, x);
  }
}

static void matmul(int type, const uint8_t* const* rows, int64_t r0, int64_t r1, int64_t cols,
                   const Act* xs, int64_t t0, int64_t t1, float* Y, int64_t ldy) {
  for (int64_t r = r0; r < r1; r++)
    for (int64_t t = t0; t < t1; t++) Y[t * ldy + r] = dotRow(type, rows[r], cols, xs[t]);
}

// ---- dequantisation / axpy ----------------------------------------------------------

static void dequantRange(int type, const uint8_t* row, int64_t c0, int64_t c1, float* out) {
  switch (type) {
    case T_F32: {
      const float* w = reinterpret_cast<const float*>(row);
      for (int64_t c = c0; c < c1; c++) out[c - c0] = w[c];
      break;
    }
    case T_F16: {
      const uint16_t* w = reinterpret_cast<const uint16_t*>(row);
      for (int64_t c = c0; c < c1; c++) out[c - c0] = fp16ToF32(w[c]);
      break;
    }
    case T_Q4_0: {
      const BlockQ4_0* b = reinterpret_cast<const BlockQ4_0*>(row);
      for (int64_t i = c0 / QK; i < c1 / QK; i++) {
        const float d = fp16ToF32(b[i].d);
        float* o = out + (i * QK - c0);
        for (int j = 0; j < QK / 2; j++) {
          o[j] = (float)((b[i].qs[j] & 0x0F) - 8) * d;
          o[j + QK / 2] = (float)((b[i].qs[j] >> 4) - 8) * d;
        }
      }
      break;
    }
    case T_Q8_0: {
      const BlockQ8_0* b = reinterpret_cast<const BlockQ8_0*>(row);
      for (int64_t i = c0 / QK; i < c1 / QK; i++) {
        const float d = fp16ToF32(b[i].d);
        float* o = out + (i * QK - c0);
        for (int j = 0; j < QK; j++) o[j] = (float)b[i].qs[j] * d;
      }
      break;
    }
  }
}

static void dequantRow(int type, const uint8_t* row, int64_t cols, float* out) { dequantRange(type, row, 0, cols, out); }

static void axpyRows(int type, const uint8_t* W, size_t rowBytes, const int32_t* idx, int64_t nIdx,
                     const float* coef, int64_t c0, int64_t c1, float* out) {
  float tmp[512];
  for (int64_t k = 0; k < nIdx; k++) {
    const float a = coef[k];
    const uint8_t* row = W + (size_t)idx[k] * rowBytes;
    for (int64_t s = c0; s < c1; s += 512) {
      const int64_t e = std::min<int64_t>(c1, s + 512);
      dequantRange(type, row, s, e, tmp);
      for (int64_t c = s; c < e; c++) out[c] += a * tmp[c - s];
    }
  }
}

// ---- small vector ops ----------------------------------------------------------------

static void f32ToF16(const float* x, uint16_t* y, int64_t n) {
  for (int64_t i = 0; i < n; i++) y[i] = f32ToFp16(x[i]);
}
static void f16ToF32(const uint16_t* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; i++) y[i] = fp16ToF32(x[i]);
}
static float dotF32(const float* a, const float* b, int64_t n) {
  float s = 0.0f;
  for (int64_t i = 0; i < n; i++) s += a[i] * b[i];
  return s;
}
static float dotF16(const float* a, const uint16_t* b, int64_t n) {
  float s = 0.0f;
  for (int64_t i = 0; i < n; i++) s += a[i] * fp16ToF32(b[i]);
  return s;
}
static void axpyF32(float a, const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; i++) y[i] += a * x[i];
}
static void axpyF16(float a, const uint16_t* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; i++) y[i] += a * fp16ToF32(x[i]);
}

// ggml_compute_forward_rms_norm_f32 + ggml_mul: sum of squares in double, (x*scale)*w.
static void rmsnorm(const float* x, const float* w, int64_t n, float eps, float* out) {
  double sum = 0.0;
  for (int64_t i = 0; i < n; i++) sum += (double)(x[i] * x[i]);
  const float mean = (float)(sum / (double)n);
  const float scale = 1.0f / std::sqrt(mean + eps);
  for (int64_t i = 0; i < n; i++) out[i] = (x[i] * scale) * w[i];
}

// ggml soft_max: max subtraction, expf, sum in double, multiply by 1/sum.
static void softmax(float* x, int64_t n) {
  if (n <= 0) return;
  float mx = -INFINITY;
  for (int64_t i = 0; i < n; i++) mx = std::max(mx, x[i]);
  double sum = 0.0;
  for (int64_t i = 0; i < n; i++) {
    const float v = std::exp(x[i] - mx);
    x[i] = v;
    sum += (double)v;
  }
  const float inv = (float)(1.0 / sum);
  for (int64_t i = 0; i < n; i++) x[i] *= inv;
}

static void gated(int kind, const float* g, const float* u, float* out, int64_t n) {
  switch (kind) {
    case 0:
      for (int64_t i = 0; i < n; i++) out[i] = (g[i] / (1.0f + std::exp(-g[i]))) * u[i];
      break;
    case 1:
      for (int64_t i = 0; i < n; i++) out[i] = (g[i] > 0.0f ? g[i] : 0.0f) * u[i];
      break;
    default:
      for (int64_t i = 0; i < n; i++) out[i] = (g[i] > 0.0f ? g[i] : 0.0f) * (u[i] > 0.0f ? u[i] : 0.0f);
      break;
  }
}

static void add(const float* a, const float* b, float* out, int64_t n) {
  for (int64_t i = 0; i < n; i++) out[i] = a[i] + b[i];
}

// ggml rope (ext_factor 0, freq_scale 1, attn_factor 1): theta starts at pos and is
// multiplied by theta_scale = powf(base, -2/ropeDim) per pair.
void scalarRope(float* x, int64_t nTok, int64_t nHeads, int64_t headDim, int64_t ropeDim, int64_t pos0,
                float freqBase, bool neox) {
  const float thetaScale = std::pow(freqBase, -2.0f / (float)ropeDim);
  float cs[1024];  // cos/sin cache for one position (ropeDim <= 1024 checked by caller)
  for (int64_t t = 0; t < nTok; t++) {
    float theta = (float)(pos0 + t);
    for (int64_t i0 = 0; i0 < ropeDim; i0 += 2) {
      cs[i0] = std::cos(theta);
      cs[i0 + 1] = std::sin(theta);
      theta *= thetaScale;
    }
    for (int64_t h = 0; h < nHeads; h++) {
      float* v = x + (t * nHeads + h) * headDim;
      for (int64_t i0 = 0; i0 < ropeDim; i0 += 2) {
        const float c = cs[i0], s = cs[i0 + 1];
        const int64_t a = neox ? i0 / 2 : i0;
        const int64_t b = neox ? i0 / 2 + ropeDim / 2 : i0 + 1;
        const float x0 = v[a], x1 = v[b];
        v[a] = x0 * c - x1 * s;
        v[b] = x0 * s + x1 * c;
      }
    }
  }
}

// ---- matmulTAcc (kernels.h): the reference the SIMD version matches bit for bit -------------

static float weightAt(int type, const uint8_t* row, int64_t c) {
  switch (type) {
    case T_F32: { float v; std::memcpy(&v, row + 4 * c, 4); return v; }
    case T_F16: { uint16_t h; std::memcpy(&h, row + 2 * c, 2); return fp16ToF32(h); }
    case T_Q4_0: {
      const BlockQ4_0& b = reinterpret_cast<const BlockQ4_0*>(row)[c / QK];
      const int j = (int)(c % QK);
      const int q = j < QK / 2 ? (b.qs[j] & 0x0F) : (b.qs[j - QK / 2] >> 4);
      return (float)(q - 8) * fp16ToF32(b.d);
    }
    default: {
      const BlockQ8_0& b = reinterpret_cast<const BlockQ8_0*>(row)[c / QK];
      return (float)b.qs[c % QK] * fp16ToF32(b.d);
    }
  }
}

static void matmulTAcc(int type, const uint8_t* const* rows, int64_t nRows, int64_t c0, int64_t c1,
                       const Act* xs, int64_t nTok, float* O, int64_t ldo) {
  if (!typeQuantized(type)) {
    for (int64_t c = c0; c < c1; c++)
      for (int64_t t = 0; t < nTok; t++) {
        float acc = O[t * ldo + c];
        for (int64_t n = 0; n < nRows; n++) acc = std::fma(xs[t].f[n], weightAt(type, rows[n], c), acc);
        O[t * ldo + c] = acc;
      }
    return;
  }
  const int64_t nG = (nRows + QK - 1) / QK;
  std::vector<int8_t> q((size_t)(nG * QK));
  std::vector<float> s((size_t)nG);
  for (int64_t c = c0; c < c1; c++) {
    for (int64_t g = 0; g < nG; g++) {
      float v[QK], amax = 0.0f;
      for (int j = 0; j < QK; j++) {
        const int64_t n = g * QK + j;
        v[j] = n < nRows ? weightAt(type, rows[n], c) : 0.0f;
        amax = std::max(amax, std::fabs(v[j]));
      }
      s[(size_t)g] = amax / 127.0f;
      const float inv = amax != 0.0f ? 127.0f / amax : 0.0f;
      for (int j = 0; j < QK; j++) q[(size_t)(g * QK + j)] = (int8_t)(int32_t)std::nearbyint(v[j] * inv);
    }
    for (int64_t t = 0; t < nTok; t++) {
      float acc = O[t * ldo + c];
      for (int64_t g = 0; g < nG; g++) {
        int32_t dot = 0;
        for (int j = 0; j < QK; j++) dot += (int32_t)q[(size_t)(g * QK + j)] * xs[t].qs[g * QK + j];
        acc = std::fma((float)dot, s[(size_t)g] * xs[t].d[g], acc);
      }
      O[t * ldo + c] = acc;
    }
  }
}

const Kernels kScalar = {
    "scalar", quantizeQ8, dotRows, matmul, axpyRows, dequantRow, f32ToF16, f16ToF32, dotF32, dotF16,
    axpyF32,  axpyF16,    rmsnorm, softmax, gated,   add,     matmulTAcc,
};

}  // namespace np
