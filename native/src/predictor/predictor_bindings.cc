// Argument parsing and bounds checks for the predictor functions (style of addon.cc: TypeError
// for malformed arguments, RangeError for values / buffer ranges; messages start with the
// function name and name the argument).
#include "predictor/predictor_bindings.h"

#include <cmath>
#include <string>
#include <vector>

#include "predictor/predictor.h"
#include "bind_ctx.h"
#include "registry.h"

namespace np {
namespace {

struct PCtx : BindCtx {
  using BindCtx::BindCtx;

  double num(size_t i, const char* name) const {
    if (i >= info.Length() || !info[i].IsNumber()) typeErr(std::string(name) + " must be a number");
    const double v = info[i].As<Napi::Number>().DoubleValue();
    if (!std::isfinite(v)) rangeErr(std::string(name) + " must be finite, got " + fmt(v));
    return v;
  }
  int64_t idx(size_t i, const char* name, double minv = 0, double maxv = 9007199254740991.0) const {
    const double v = num(i, name);
    if (v != std::floor(v)) typeErr(std::string(name) + " must be an integer, got " + fmt(v));
    if (v < minv || v > maxv) rangeErr(std::string(name) + " out of range: " + fmt(v));
    return (int64_t)v;
  }
  uint8_t* span(size_t iId, const char* what, int64_t off, double nbytes, size_t align) {
    return spanOf(idx(iId, (std::string(what) + " buffer id").c_str()), what, off, nbytes, align);
  }
};

constexpr double kMaxDim = 1 << 20;

// trainPredictor(xBuf, xOff, yBuf, yOff, nTok, nEmbd, nFF, hidden, epochs, batch, lr, posWeight,
//                seed, targetRecall, fc1Buf, fc1Off, fc2Buf, fc2Off) -> {loss, threshold, trainRecall, trainActive}
Napi::Value TrainPredictor(const Napi::CallbackInfo& info) {
  PCtx c{info, "trainPredictor", {}};
  c.argc(18);
  const int64_t xOff = c.idx(1, "xOff"), yOff = c.idx(3, "yOff"), nTok = c.idx(4, "nTok", 1),
                nEmbd = c.idx(5, "nEmbd", 1, kMaxDim), nFF = c.idx(6, "nFF", 8, kMaxDim),
                hidden = c.idx(7, "hidden", 1, 65536), epochs = c.idx(8, "epochs", 0, 1e6),
                batch = c.idx(9, "batch", 1, 1e7);
  const double lr = c.num(10, "lr"), pw = c.num(11, "posWeight");
  const int64_t seed = c.idx(12, "seed");
  const double target = c.num(13, "targetRecall");
  const int64_t fc1Off = c.idx(15, "fc1Off"), fc2Off = c.idx(17, "fc2Off");
  if (nFF % 8 != 0) c.rangeErr("nFF " + std::to_string(nFF) + " is not a multiple of 8 (label rows are bytes)");
  if (!(lr > 0)) c.rangeErr("lr must be > 0, got " + PCtx::fmt(lr));
  if (!(pw > 0)) c.rangeErr("posWeight must be > 0, got " + PCtx::fmt(pw));
  if (!(target > 0 && target <= 1)) c.rangeErr("targetRecall must be in (0, 1], got " + PCtx::fmt(target));
  const float* x = (const float*)c.span(0, "x", xOff, (double)nTok * nEmbd * 4, 4);
  const uint8_t* y = c.span(2, "y", yOff, (double)nTok * (nFF / 8), 1);
  float* fc1 = (float*)c.span(14, "fc1", fc1Off, (double)hidden * nEmbd * 4, 4);
  float* fc2 = (float*)c.span(16, "fc2", fc2Off, (double)nFF * hidden * 4, 4);
  PredTrainOpts o{epochs, batch, lr, pw, target, (uint64_t)seed};
  const PredTrainResult r = predTrain(x, y, nTok, nEmbd, nFF, hidden, o, fc1, fc2);
  Napi::Object res = Napi::Object::New(info.Env());
  res.Set("loss", r.loss);
  res.Set("threshold", (double)r.threshold);
  res.Set("trainRecall", r.trainRecall);
  res.Set("trainActive", r.trainActive);
  return res;
}

// predictorScores(fc1Buf, fc1Off, fc2Buf, fc2Off, nEmbd, hidden, nFF, xBuf, xOff, nTok, outBuf, outOff)
Napi::Value PredictorScores(const Napi::CallbackInfo& info) {
  PCtx c{info, "predictorScores", {}};
  c.argc(12);
  const int64_t fc1Off = c.idx(1, "fc1Off"), fc2Off = c.idx(3, "fc2Off"), nEmbd = c.idx(4, "nEmbd", 1, kMaxDim),
                hidden = c.idx(5, "hidden", 1, 65536), nFF = c.idx(6, "nFF", 1, kMaxDim), xOff = c.idx(8, "xOff"),
                nTok = c.idx(9, "nTok"), oOff = c.idx(11, "outOff");
  const float* fc1 = (const float*)c.span(0, "fc1", fc1Off, (double)hidden * nEmbd * 4, 4);
  const float* fc2 = (const float*)c.span(2, "fc2", fc2Off, (double)nFF * hidden * 4, 4);
  const float* x = (const float*)c.span(7, "x", xOff, (double)nTok * nEmbd * 4, 4);
  float* out = (float*)c.span(10, "out", oOff, (double)nTok * nFF * 4, 4);
  predScores(fc1, fc2, nEmbd, hidden, nFF, x, nTok, out);
  return info.Env().Undefined();
}

// predictorEval(fc1Buf, fc1Off, fc2Buf, fc2Off, nEmbd, hidden, nFF, xBuf, xOff, yBuf, yOff, nTok, threshold)
//   -> {tp, fp, fn, tn}
Napi::Value PredictorEval(const Napi::CallbackInfo& info) {
  PCtx c{info, "predictorEval", {}};
  c.argc(13);
  const int64_t fc1Off = c.idx(1, "fc1Off"), fc2Off = c.idx(3, "fc2Off"), nEmbd = c.idx(4, "nEmbd", 1, kMaxDim),
                hidden = c.idx(5, "hidden", 1, 65536), nFF = c.idx(6, "nFF", 8, kMaxDim), xOff = c.idx(8, "xOff"),
                yOff = c.idx(10, "yOff"), nTok = c.idx(11, "nTok");
  const double thr = c.num(12, "threshold");
  if (nFF % 8 != 0) c.rangeErr("nFF " + std::to_string(nFF) + " is not a multiple of 8 (label rows are bytes)");
  const float* fc1 = (const float*)c.span(0, "fc1", fc1Off, (double)hidden * nEmbd * 4, 4);
  const float* fc2 = (const float*)c.span(2, "fc2", fc2Off, (double)nFF * hidden * 4, 4);
  const float* x = (const float*)c.span(7, "x", xOff, (double)nTok * nEmbd * 4, 4);
  const uint8_t* y = c.span(9, "y", yOff, (double)nTok * (nFF / 8), 1);
  uint64_t k[4];
  predEval(fc1, fc2, nEmbd, hidden, nFF, x, y, nTok, (float)thr, k);
  Napi::Object res = Napi::Object::New(info.Env());
  res.Set("tp", (double)k[0]);
  res.Set("fp", (double)k[1]);
  res.Set("fn", (double)k[2]);
  res.Set("tn", (double)k[3]);
  return res;
}

}  // namespace

void RegisterPredictor(Napi::Env env, Napi::Object exports) {
  exports.Set("trainPredictor", Napi::Function::New(env, TrainPredictor, "trainPredictor"));
  exports.Set("predictorScores", Napi::Function::New(env, PredictorScores, "predictorScores"));
  exports.Set("predictorEval", Napi::Function::New(env, PredictorEval, "predictorEval"));
}

}  // namespace np
