// N-API bindings of the direct-I/O loader (openLoader, loaderInfo, closeLoader, readBatch).
#pragma once
#include <napi.h>

namespace np::io {
void RegisterIo(Napi::Env env, Napi::Object exports);
}
