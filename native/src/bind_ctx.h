// What every N-API binding file needs to check its arguments: errors that start with the
// function name (TypeError for malformed arguments, RangeError for values or buffer ranges),
// an argument count check, number formatting, and bounds-checked pointers into registry
// buffers that stay alive for the duration of the call. Argument parsers (num, idx, …) differ
// per file and live in the derived contexts.
#pragma once
#include <napi.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "registry.h"

namespace np {

struct BindCtx {
  const Napi::CallbackInfo& info;
  const char* fn;
  std::vector<BufferRef> keep;  // keeps buffers alive for the duration of the call

  BindCtx(const Napi::CallbackInfo& i, const char* f, std::vector<BufferRef> k = {}) : info(i), fn(f), keep(std::move(k)) {}

  [[noreturn]] void typeErr(const std::string& m) const { throw Napi::TypeError::New(info.Env(), std::string(fn) + ": " + m); }
  [[noreturn]] void rangeErr(const std::string& m) const { throw Napi::RangeError::New(info.Env(), std::string(fn) + ": " + m); }

  void argc(size_t n) const {
    if (info.Length() < n) typeErr("expected " + std::to_string(n) + " arguments, got " + std::to_string(info.Length()));
  }

  static std::string fmt(double v) {
    if (v == std::floor(v) && std::fabs(v) < 1e18) return std::to_string((long long)v);
    return std::to_string(v);
  }

  // Bounds-checked pointer to `nbytes` at byte offset `off` of buffer `id` (already parsed; `what` names it).
  uint8_t* spanOf(int64_t id, const char* what, int64_t off, double nbytes, size_t align) {
    BufferRef b = registryGet(id);
    if (!b) rangeErr(std::string(what) + " buffer " + std::to_string(id) + " is not a live buffer");
    if (align > 1 && off % (int64_t)align != 0)
      rangeErr(std::string(what) + " offset " + std::to_string(off) + " is not " + std::to_string(align) + "-byte aligned");
    if ((double)off + nbytes > (double)b->size)
      rangeErr(std::string(what) + " buffer " + std::to_string(id) + " too small: need " + fmt(nbytes) + " bytes at offset " +
               std::to_string(off) + ", have " + std::to_string(b->size));
    uint8_t* p = b->ptr + off;
    keep.push_back(std::move(b));
    return p;
  }
};

/**
 * Copies [dstOffset, srcOffset, length]… (n of them) checked against a destination and a source
 * buffer of the given sizes: "" when all are whole, non-negative and in bounds, else the first
 * problem, as "<item> i: …" (copyBatch names them requests, readBatchStart copies).
 */
inline std::string copiesError(const double* r, size_t n, size_t dstSize, size_t srcSize, const char* item) {
  auto whole = [](double v) { return std::isfinite(v) && v >= 0 && v == std::floor(v) && v <= 9007199254740991.0; };
  for (size_t i = 0; i < n; i++) {
    const double dOff = r[3 * i], sOff = r[3 * i + 1], len = r[3 * i + 2];
    auto at = [&] { return std::string(item) + " " + std::to_string(i) + ": "; };  // built only for an error
    if (!whole(dOff) || !whole(sOff) || !whole(len)) return at() + "offsets and length must be whole numbers >= 0";
    if (dOff + len > (double)dstSize)
      return at() + "dst range [" + BindCtx::fmt(dOff) + ", " + BindCtx::fmt(dOff + len) + ") outside buffer of " + std::to_string(dstSize) + " bytes";
    if (sOff + len > (double)srcSize)
      return at() + "src range [" + BindCtx::fmt(sOff) + ", " + BindCtx::fmt(sOff + len) + ") outside buffer of " + std::to_string(srcSize) + " bytes";
  }
  return "";
}

}  // namespace np
