#include "predictor/predictor.h"
#include "threads.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace np {
namespace {

struct Rng {  // xoshiro256** seeded by splitmix64
  uint64_t s[4];
  explicit Rng(uint64_t seed) {
    for (auto& v : s) {
      seed += 0x9E3779B97F4A7C15ull;
      uint64_t z = seed;
      z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
      z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
      v = z ^ (z >> 31);
    }
  }
  static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  uint64_t next() {
    const uint64_t r = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0]; s[3] ^= s[1]; s[1] ^= s[2]; s[0] ^= s[3]; s[2] ^= t; s[3] = rotl(s[3], 45);
    return r;
  }
  float uniform() { return (float)((next() >> 40) * (1.0 / 16777216.0)); }  // [0,1)
};

inline bool bit(const uint8_t* row, int64_t i) { return (row[i >> 3] >> (i & 7)) & 1; }

// h (hidden) = relu(W1T^T x), W1T: (nEmbd, hidden). Inner loop over hidden (vectorisable, fixed order).
inline void hiddenOf(const float* w1t, const float* x, int64_t nEmbd, int64_t hidden, float* h) {
  for (int64_t k = 0; k < hidden; k++) h[k] = 0.f;
  for (int64_t j = 0; j < nEmbd; j++) {
    const float xj = x[j];
    const float* w = w1t + j * hidden;
    for (int64_t k = 0; k < hidden; k++) h[k] += xj * w[k];
  }
  for (int64_t k = 0; k < hidden; k++) h[k] = h[k] > 0.f ? h[k] : 0.f;
}

// z (nFF) = W2T^T h, W2T: (hidden, nFF).
inline void logitsOf(const float* w2t, const float* h, int64_t hidden, int64_t nFF, float* z) {
  for (int64_t i = 0; i < nFF; i++) z[i] = 0.f;
  for (int64_t k = 0; k < hidden; k++) {
    const float hk = h[k];
    if (hk == 0.f) continue;
    const float* w = w2t + k * nFF;
    for (int64_t i = 0; i < nFF; i++) z[i] += hk * w[i];
  }
}

void transpose(const float* a, int64_t rows, int64_t cols, float* out) {  // out (cols, rows)
  for (int64_t r = 0; r < rows; r++)
    for (int64_t c = 0; c < cols; c++) out[c * rows + r] = a[r * cols + c];
}

}  // namespace

PredTrainResult predTrain(const float* x, const uint8_t* y, int64_t nTok, int64_t nEmbd, int64_t nFF, int64_t hidden,
                          const PredTrainOpts& o, float* fc1, float* fc2) {
  const int64_t rowBytes = nFF / 8;
  // Global input scale s = 1/rms(x) (double sum in token order); training sees s·x and s is
  // folded into fc1 at the end, so the stored predictor takes the raw residual stream.
  double ss = 0;
  for (int64_t i = 0; i < nTok * nEmbd; i++) ss += (double)x[i] * x[i];
  const float s = ss > 0 ? (float)(1.0 / std::sqrt(ss / (double)(nTok * nEmbd))) : 1.f;

  const int64_t n1 = nEmbd * hidden, n2 = hidden * nFF;
  std::vector<float> w1t(n1), w2t(n2), g1(n1), g2(n2), m1(n1, 0.f), v1(n1, 0.f), m2(n2, 0.f), v2(n2, 0.f);
  Rng rng(o.seed);
  const float a1 = std::sqrt(6.f / (float)nEmbd), a2 = std::sqrt(3.f / (float)hidden);
  for (auto& w : w1t) w = (2.f * rng.uniform() - 1.f) * a1;
  for (auto& w : w2t) w = (2.f * rng.uniform() - 1.f) * a2;

  std::vector<int64_t> perm(nTok);
  for (int64_t i = 0; i < nTok; i++) perm[i] = i;
  const int64_t B = std::max<int64_t>(1, std::min(o.batch, nTok));
  std::vector<float> xs(B * nEmbd), H(B * hidden), G(nFF), dH(hidden), z(nFF);
  const float pw = (float)o.posWeight;
  const double b1 = 0.9, b2 = 0.999, eps = 1e-8;
  int64_t step = 0;
  double lastLoss = 0;
  for (int64_t ep = 0; ep < o.epochs; ep++) {
    for (int64_t i = nTok - 1; i > 0; i--) std::swap(perm[i], perm[(int64_t)(rng.next() % (uint64_t)(i + 1))]);
    double lossSum = 0;
    for (int64_t b0 = 0; b0 < nTok; b0 += B) {
      const int64_t nb = std::min(B, nTok - b0);
      std::fill(g1.begin(), g1.end(), 0.f);
      std::fill(g2.begin(), g2.end(), 0.f);
      const float inv = 1.f / (float)nb;
      for (int64_t t = 0; t < nb; t++) {
        const int64_t tok = perm[b0 + t];
        float* xt = &xs[t * nEmbd];
        for (int64_t j = 0; j < nEmbd; j++) xt[j] = x[tok * nEmbd + j] * s;
        float* h = &H[t * hidden];
        hiddenOf(w1t.data(), xt, nEmbd, hidden, h);
        logitsOf(w2t.data(), h, hidden, nFF, z.data());
        const uint8_t* yr = y + tok * rowBytes;
        double l = 0;
        const bool wantLoss = ep == o.epochs - 1;  // the loss is only reported for the last epoch
        for (int64_t i = 0; i < nFF; i++) {
          const float zi = z[i];
          const float e = std::exp(-std::fabs(zi));
          const float sig = zi >= 0.f ? 1.f / (1.f + e) : e / (1.f + e);
          const bool on = bit(yr, i);
          G[i] = on ? pw * (sig - 1.f) * inv : sig * inv;
          if (wantLoss) {
            const float sp = (zi > 0.f ? zi : 0.f) + std::log1p(e);  // softplus(z) = -log(1-σ(z))
            l += on ? pw * (sp - zi) : sp;                           // -log σ(z) = softplus(z) - z
          }
        }
        lossSum += l;
        // dW2T[k][i] += h_k G_i ; dH_k = Σ_i G_i W2T[k][i] (8 fixed partial sums)
        for (int64_t k = 0; k < hidden; k++) {
          const float hk = h[k];
          if (hk == 0.f) { dH[k] = 0.f; continue; }
          const float* w = &w2t[k * nFF];
          float* g = &g2[k * nFF];
          float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
          int64_t i = 0;
          for (; i + 8 <= nFF; i += 8)
            for (int q = 0; q < 8; q++) {
              g[i + q] += hk * G[i + q];
              acc[q] += G[i + q] * w[i + q];
            }
          for (; i < nFF; i++) {
            g[i] += hk * G[i];
            acc[0] += G[i] * w[i];
          }
          dH[k] = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
        }
        // dW1T[j][k] += x_j dH_k
        for (int64_t j = 0; j < nEmbd; j++) {
          const float xj = xt[j];
          float* g = &g1[j * hidden];
          for (int64_t k = 0; k < hidden; k++) g[k] += xj * dH[k];
        }
      }
      // Adam
      step++;
      const float c1 = (float)(o.lr / (1.0 - std::pow(b1, (double)step)));
      const float c2 = (float)(1.0 / std::sqrt(1.0 - std::pow(b2, (double)step)));
      auto adam = [&](std::vector<float>& w, std::vector<float>& g, std::vector<float>& m, std::vector<float>& v) {
        const int64_t n = (int64_t)w.size();
        for (int64_t i = 0; i < n; i++) {
          m[i] = (float)b1 * m[i] + (float)(1 - b1) * g[i];
          v[i] = (float)b2 * v[i] + (float)(1 - b2) * g[i] * g[i];
          w[i] -= c1 * m[i] / (std::sqrt(v[i]) * c2 + (float)eps);
        }
      };
      adam(w1t, g1, m1, v1);
      adam(w2t, g2, m2, v2);
    }
    lastLoss = lossSum / ((double)nTok * nFF);
  }
  // fold s into fc1, write fc1 (hidden, nEmbd) and fc2 (nFF, hidden)
  for (auto& w : w1t) w *= s;
  transpose(w1t.data(), nEmbd, hidden, fc1);
  transpose(w2t.data(), hidden, nFF, fc2);

  // threshold: largest t with recall(score >= t) >= targetRecall on the training set; the
  // predictor then predicts active when score > t', t' = the next float below t.
  std::vector<float> pos;
  std::vector<float> h(hidden);
  uint64_t nPos = 0;
  for (int64_t t = 0; t < nTok; t++) {
    hiddenOf(w1t.data(), x + t * nEmbd, nEmbd, hidden, h.data());
    logitsOf(w2t.data(), h.data(), hidden, nFF, z.data());
    const uint8_t* yr = y + t * rowBytes;
    for (int64_t i = 0; i < nFF; i++)
      if (bit(yr, i)) pos.push_back(z[i]);
  }
  nPos = pos.size();
  PredTrainResult r{lastLoss, 0.f, 1.0, 0.0};
  if (nPos > 0) {
    std::sort(pos.begin(), pos.end());
    const double miss = std::floor((1.0 - o.targetRecall) * (double)nPos);  // positives allowed below threshold
    const size_t kk = (size_t)std::min<double>(miss, (double)nPos - 1);
    r.threshold = std::nextafter(pos[kk], -INFINITY);
  }
  uint64_t c[4];
  predEval(fc1, fc2, nEmbd, hidden, nFF, x, y, nTok, r.threshold, c);
  r.trainRecall = c[0] + c[2] ? (double)c[0] / (double)(c[0] + c[2]) : 1.0;
  r.trainActive = (double)(c[0] + c[1]) / ((double)nTok * nFF);
  return r;
}

// Decode path: no transposes (the training layout would cost two matrix copies per call). Each
// output element sums in the same order as hiddenOf/logitsOf, so scores are bit-identical to
// training's; rows are split across the pool, which never changes a row's order.
void predScores(const float* fc1, const float* fc2, int64_t nEmbd, int64_t hidden, int64_t nFF, const float* x,
                int64_t nTok, float* out) {
  std::vector<float> h(hidden);
  for (int64_t t = 0; t < nTok; t++) {
    const float* xt = x + t * nEmbd;
    float* zt = out + t * nFF;
    poolRun((hidden + 15) / 16, poolGetThreads(), [&](int64_t c) {
      for (int64_t k = c * 16; k < std::min(hidden, (c + 1) * 16); k++) {
        const float* w = fc1 + k * nEmbd;
        float acc = 0.f;
        for (int64_t j = 0; j < nEmbd; j++) acc += xt[j] * w[j];
        h[k] = acc > 0.f ? acc : 0.f;
      }
    });
    poolRun((nFF + 255) / 256, poolGetThreads(), [&](int64_t c) {
      for (int64_t i = c * 256; i < std::min(nFF, (c + 1) * 256); i++) {
        const float* w = fc2 + i * hidden;
        float acc = 0.f;
        for (int64_t k = 0; k < hidden; k++)
          if (h[k] != 0.f) acc += h[k] * w[k];
        zt[i] = acc;
      }
    });
  }
}

void predEval(const float* fc1, const float* fc2, int64_t nEmbd, int64_t hidden, int64_t nFF, const float* x,
              const uint8_t* y, int64_t nTok, float threshold, uint64_t counts[4]) {
  std::vector<float> w1t(nEmbd * hidden), w2t(hidden * nFF), h(hidden), z(nFF);
  transpose(fc1, hidden, nEmbd, w1t.data());
  transpose(fc2, nFF, hidden, w2t.data());
  counts[0] = counts[1] = counts[2] = counts[3] = 0;
  for (int64_t t = 0; t < nTok; t++) {
    hiddenOf(w1t.data(), x + t * nEmbd, nEmbd, hidden, h.data());
    logitsOf(w2t.data(), h.data(), hidden, nFF, z.data());
    const uint8_t* yr = y + t * (nFF / 8);
    for (int64_t i = 0; i < nFF; i++) {
      const bool p = z[i] > threshold, a = bit(yr, i);
      counts[a ? (p ? 0 : 2) : (p ? 1 : 3)]++;
    }
  }
}

}  // namespace np
