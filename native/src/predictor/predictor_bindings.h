// N-API bindings of the activation predictor: trainPredictor, predictorScores, predictorEval.
#pragma once
#include <napi.h>

namespace np {
void RegisterPredictor(Napi::Env env, Napi::Object exports);
}
