// Activation predictor (PowerInfer-style fc2·relu(fc1·x), no biases): training and scoring.
// Single-threaded and deterministic: every reduction runs in a fixed order fixed by the data.
#pragma once
#include <cstddef>
#include <cstdint>

namespace np {

struct PredTrainOpts {
  int64_t epochs, batch;
  double lr, posWeight, targetRecall;
  uint64_t seed;
};

struct PredTrainResult {
  double loss;          // mean weighted BCE (per token and neuron) over the last epoch
  float threshold;      // largest logit threshold with training recall >= targetRecall
  double trainRecall;   // at that threshold
  double trainActive;   // predicted-active fraction at that threshold
};

// x: (nTok, nEmbd) f32; y: (nTok, nFF/8) label bits, LSB first (bit i of row t = neuron i active).
// Outputs fc1: (hidden, nEmbd) row-major, fc2: (nFF, hidden) row-major.
PredTrainResult predTrain(const float* x, const uint8_t* y, int64_t nTok, int64_t nEmbd, int64_t nFF, int64_t hidden,
                          const PredTrainOpts& o, float* fc1, float* fc2);

// scores (nTok, nFF) = fc2 · relu(fc1 · x_t).
void predScores(const float* fc1, const float* fc2, int64_t nEmbd, int64_t hidden, int64_t nFF, const float* x,
                int64_t nTok, float* out);

// Confusion counts of (score > threshold) against the label bits.
void predEval(const float* fc1, const float* fc2, int64_t nEmbd, int64_t hidden, int64_t nFF, const float* x,
              const uint8_t* y, int64_t nTok, float threshold, uint64_t counts[4] /* tp fp fn tn */);

}  // namespace np
