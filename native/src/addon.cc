// N-API bindings: argument parsing and bounds checks only. All math lives in kernels/.
// Errors are JS exceptions (TypeError for malformed arguments, RangeError for values or
// buffer ranges that do not fit) whose message starts with the function name and names
// the offending argument.
#include <pthread.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <algorithm>
#include <cerrno>
#include <cstring>
#include <napi.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "io/io_bindings.h"
#include "kernels/dispatch.h"
#include "predictor/predictor_bindings.h"
#include "bind_ctx.h"
#include "registry.h"
#include "threads.h"

namespace {

using np::BufferRef;

struct Ctx : np::BindCtx {
  using BindCtx::BindCtx;

  double num(size_t i, const char* name) const {
    if (i >= info.Length() || !info[i].IsNumber()) typeErr(std::string(name) + " must be a number");
    return info[i].As<Napi::Number>().DoubleValue();
  }

  // Non-negative integer (exactly representable), optionally bounded.
  int64_t idx(size_t i, const char* name, double maxv = 9007199254740991.0) const {
    const double v = num(i, name);
    if (!std::isfinite(v) || v != std::floor(v)) typeErr(std::string(name) + " must be an integer, got " + fmt(v));
    if (v < 0 || v > maxv) rangeErr(std::string(name) + " out of range: " + fmt(v));
    return (int64_t)v;
  }

  bool boolean(size_t i, const char* name) const {
    if (i >= info.Length() || !info[i].IsBoolean()) typeErr(std::string(name) + " must be a boolean");
    return info[i].As<Napi::Boolean>().Value();
  }

  // Weight / activation type id.
  int type(size_t i, const char* name, bool kvOnly = false) const {
    const int64_t t = idx(i, name, 1e9);
    if (kvOnly ? !(t == np::T_F32 || t == np::T_F16) : !np::typeKnown((int)t))
      rangeErr(std::string(name) + " " + std::to_string(t) + " is not a supported type (" +
               (kvOnly ? "F32=0, F16=1" : "F32=0, F16=1, Q4_0=2, Q8_0=8") + ")");
    return (int)t;
  }

  void colsFit(int type, int64_t cols) const {
    if (np::typeQuantized(type) && cols % np::QK != 0)
      rangeErr("cols " + std::to_string(cols) + " is not a multiple of 32 (required by type " + std::to_string(type) +
               ")");
  }

  // Bounds-checked pointer into buffer `id` (argument i), `nbytes` at byte offset `off`.
  uint8_t* span(size_t iId, const char* what, int64_t off, double nbytes, size_t align = 1) {
    return spanOf(idx(iId, (std::string(what) + " buffer id").c_str()), what, off, nbytes, align);
  }
};

Napi::Value Undef(const Napi::CallbackInfo& info) { return info.Env().Undefined(); }

// ---- runtime ---------------------------------------------------------------------------

Napi::Value CpuFeatures(const Napi::CallbackInfo& info) {
  const np::CpuFeat f = np::cpuFeatures();
  Napi::Object o = Napi::Object::New(info.Env());
  o.Set("avx2", f.avx2);
  o.Set("fma", f.fma);
  o.Set("f16c", f.f16c);
  o.Set("avx512f", f.avx512f);
  o.Set("avx512bw", f.avx512bw);
  o.Set("avx512vl", f.avx512vl);
  o.Set("avx512vnni", f.avx512vnni);
  return o;
}

Napi::Value BestSimd(const Napi::CallbackInfo& info) {
  return Napi::String::New(info.Env(), np::simdName(np::bestSimd()));
}

Napi::Value SetSimd(const Napi::CallbackInfo& info) {
  Ctx c{info, "setSimd", {}};
  if (info.Length() < 1 || !info[0].IsString()) c.typeErr("level must be \"scalar\", \"avx2\" or \"avx512\"");
  const std::string s = info[0].As<Napi::String>().Utf8Value();
  np::SimdLevel l;
  if (s == "scalar") l = np::SIMD_SCALAR;
  else if (s == "avx2") l = np::SIMD_AVX2;
  else if (s == "avx512") l = np::SIMD_AVX512;
  else c.typeErr("level must be \"scalar\", \"avx2\" or \"avx512\", got \"" + s + "\"");
  if (!np::simdSupported(l)) throw Napi::Error::New(info.Env(), "setSimd: this CPU does not support " + s);
  np::setSimd(l);
  return Undef(info);
}

Napi::Value GetSimd(const Napi::CallbackInfo& info) {
  return Napi::String::New(info.Env(), np::simdName(np::getSimd()));
}

Napi::Value SetThreads(const Napi::CallbackInfo& info) {
  Ctx c{info, "setThreads", {}};
  const int64_t n = c.idx(0, "n", np::kMaxThreads);
  if (n < 1) c.rangeErr("n must be between 1 and " + std::to_string(np::kMaxThreads) + ", got 0");
  np::poolSetThreads((int)n);
  return Undef(info);
}

Napi::Value GetThreads(const Napi::CallbackInfo& info) { return Napi::Number::New(info.Env(), np::poolGetThreads()); }

Napi::Value SetCallerThreads(const Napi::CallbackInfo& info) {
  Ctx c{info, "setCallerThreads", {}};
  np::poolSetCallerCap((int)c.idx(0, "n", np::kMaxThreads));
  return Undef(info);
}

Napi::Value PoolStats(const Napi::CallbackInfo& info) {
  uint64_t jobs, wc, cc;
  np::poolStats(&jobs, &wc, &cc);
  Napi::Object o = Napi::Object::New(info.Env());
  o.Set("jobs", (double)jobs);
  o.Set("workerChunks", (double)wc);
  o.Set("callerChunks", (double)cc);
  return o;
}

// Pin the calling thread (a worker thread's JS thread, say) to the given cores: the pipeline's
// big/little roles. Cores must exist; the kernel error is reported as is.
Napi::Value SetAffinity(const Napi::CallbackInfo& info) {
  Ctx c{info, "setAffinity", {}};
  if (info.Length() < 1 || !info[0].IsArray()) c.typeErr("cores must be an array of core indices");
  Napi::Array a = info[0].As<Napi::Array>();
  const long nCpu = sysconf(_SC_NPROCESSORS_CONF);
  if (a.Length() == 0) c.rangeErr("cores is empty");
  cpu_set_t set;
  CPU_ZERO(&set);
  for (uint32_t i = 0; i < a.Length(); i++) {
    Napi::Value v = a.Get(i);
    const double d = v.IsNumber() ? v.As<Napi::Number>().DoubleValue() : -1;
    if (!(d >= 0 && d < (double)nCpu && d < CPU_SETSIZE && d == (double)(int64_t)d)) {
      c.rangeErr("cores[" + std::to_string(i) + "] must be a core index 0.." + std::to_string(nCpu - 1));
    }
    CPU_SET((int)d, &set);
  }
  const int rc = pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
  if (rc != 0) {
    Napi::Error::New(info.Env(), std::string("setAffinity: ") + strerror(rc)).ThrowAsJavaScriptException();
  }
  return Undef(info);
}

// The calling thread's OS id, the core it runs on now, and the cores it may run on.
Napi::Value ThreadInfo(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Napi::Object o = Napi::Object::New(env);
  o.Set("tid", (double)syscall(SYS_gettid));
  o.Set("cpu", (double)sched_getcpu());
  cpu_set_t set;
  CPU_ZERO(&set);
  Napi::Array cores = Napi::Array::New(env);
  if (pthread_getaffinity_np(pthread_self(), sizeof(set), &set) == 0) {
    uint32_t k = 0;
    for (int i = 0; i < CPU_SETSIZE; i++)
      if (CPU_ISSET(i, &set)) cores.Set(k++, (double)i);
  }
  o.Set("affinity", cores);
  return o;
}

Napi::Value BuildInfo(const Napi::CallbackInfo& info) {
  Napi::Object o = Napi::Object::New(info.Env());
#ifdef NP_HAVE_LIBURING
  o.Set("liburing", true);
#else
  o.Set("liburing", false);
#endif
#ifdef NP_HAVE_OPENBLAS
  o.Set("openblas", true);
#else
  o.Set("openblas", false);
#endif
#if defined(__clang__)
  o.Set("compiler", std::string("clang ") + __clang_version__);
#elif defined(__GNUC__)
  o.Set("compiler", std::string("gcc ") + __VERSION__);
#else
  o.Set("compiler", "unknown");
#endif
  return o;
}

// ---- memory ----------------------------------------------------------------------------

Napi::Value Alloc(const Napi::CallbackInfo& info) {
  Ctx c{info, "alloc", {}};
  const int64_t n = c.idx(0, "nbytes", 1ull << 46);
  try {
    return Napi::Number::New(info.Env(), (double)np::registryAlloc((size_t)n));
  } catch (const std::bad_alloc&) {
    c.rangeErr("cannot allocate " + std::to_string(n) + " bytes");
  }
}

Napi::Value MapFile(const Napi::CallbackInfo& info) {
  Ctx c{info, "mapFile", {}};
  if (info.Length() < 1 || !info[0].IsString()) c.typeErr("path must be a string");
  const std::string path = info[0].As<Napi::String>().Utf8Value();
  size_t size = 0;
  int64_t id;
  try {
    id = np::registryMapFile(path, &size);
  } catch (const std::exception& e) {
    throw Napi::Error::New(info.Env(), e.what());
  }
  Napi::Object o = Napi::Object::New(info.Env());
  o.Set("id", (double)id);
  o.Set("size", (double)size);
  return o;
}

Napi::Value Free(const Napi::CallbackInfo& info) {
  Ctx c{info, "free", {}};
  const int64_t id = c.idx(0, "id");
  if (!np::registryFree(id)) c.rangeErr("buffer " + std::to_string(id) + " is not a live buffer");
  return Undef(info);
}

// free, and give a large buffer's pages back at once even while views hold it (they read zeros
// from then on): for temporaries of synchronous loops, whose views the collector cannot
// finalise until the loop returns to the event loop
Napi::Value Discard(const Napi::CallbackInfo& info) {
  Ctx c{info, "discard", {}};
  const int64_t id = c.idx(0, "id");
  if (!np::registryFree(id, true)) c.rangeErr("buffer " + std::to_string(id) + " is not a live buffer");
  return Undef(info);
}

Napi::Value BufferSize(const Napi::CallbackInfo& info) {
  Ctx c{info, "bufferSize", {}};
  const int64_t id = c.idx(0, "id");
  BufferRef b = np::registryGet(id);
  if (!b) c.rangeErr("buffer " + std::to_string(id) + " is not a live buffer");
  return Napi::Number::New(info.Env(), (double)b->size);
}

struct ViewHold {
  BufferRef buffer;
  int64_t reported;  // bytes reported to V8 as external memory
};

template <class T>
Napi::Value View(const Napi::CallbackInfo& info, const char* fn, napi_typedarray_type tat) {
  Ctx c{info, fn, {}};
  c.argc(3);
  const int64_t off = c.idx(1, "byteOffset");
  const int64_t count = c.idx(2, "count");
  uint8_t* p = c.span(0, "view", off, (double)count * sizeof(T), sizeof(T));
  Napi::Env env = info.Env();
  Napi::ArrayBuffer ab;
  if (count == 0) {
    ab = Napi::ArrayBuffer::New(env, 0);
  } else {
    // A view keeps its buffer alive until the garbage collector drops the view. V8 cannot see
    // native memory, so a large view of allocated memory is reported to it for as long as the
    // view lives: otherwise freed matrices (predictor fit) stay resident until a GC that the JS
    // heap alone never triggers.
    const size_t bytes = (size_t)count * sizeof(T);
    const bool report = bytes >= (size_t(1) << 20) && c.keep.back()->kind != np::BufKind::Mapped;
    auto* hold = new ViewHold{c.keep.back(), report ? (int64_t)bytes : 0};
    hold->buffer->views++;
    if (report) Napi::MemoryManagement::AdjustExternalMemory(env, (int64_t)bytes);
    ab = Napi::ArrayBuffer::New(
        env, p, bytes,
        [](Napi::Env e, void*, ViewHold* h) {
          if (h->reported) Napi::MemoryManagement::AdjustExternalMemory(e, -h->reported);
          h->buffer->views--;
          delete h;
        },
        hold);
  }
  return Napi::TypedArray(env, Napi::TypedArrayOf<T>::New(env, (size_t)count, ab, 0, tat));
}

Napi::Value ViewF32(const Napi::CallbackInfo& info) { return View<float>(info, "viewF32", napi_float32_array); }
Napi::Value ViewI32(const Napi::CallbackInfo& info) { return View<int32_t>(info, "viewI32", napi_int32_array); }
Napi::Value ViewU8(const Napi::CallbackInfo& info) { return View<uint8_t>(info, "viewU8", napi_uint8_array); }

Napi::Value Copy(const Napi::CallbackInfo& info) {
  Ctx c{info, "copy", {}};
  c.argc(5);
  const int64_t dOff = c.idx(1, "dstOff"), sOff = c.idx(3, "srcOff"), n = c.idx(4, "nbytes");
  uint8_t* d = c.span(0, "dst", dOff, (double)n);
  const uint8_t* s = c.span(2, "src", sOff, (double)n);
  if (n) std::memmove(d, s, (size_t)n);
  return Undef(info);
}

// copyBatch(dst, src, requests: Float64Array of [dstOff, srcOff, nbytes] per copy): many small
// copies in one call (neuron rows from an I/O staging buffer into cache slots). Every request
// is bounds-checked before any byte moves.
Napi::Value CopyBatch(const Napi::CallbackInfo& info) {
  Ctx c{info, "copyBatch", {}};
  c.argc(3);
  if (!info[2].IsTypedArray() || info[2].As<Napi::TypedArray>().TypedArrayType() != napi_float64_array)
    c.typeErr("requests must be a Float64Array of [dstOff, srcOff, nbytes] per copy");
  Napi::Float64Array a = info[2].As<Napi::Float64Array>();
  if (a.ElementLength() % 3 != 0) c.rangeErr("requests length " + std::to_string(a.ElementLength()) + " is not a multiple of 3");
  const size_t n = a.ElementLength() / 3;
  const int64_t dId = c.idx(0, "dst buffer id"), sId = c.idx(1, "src buffer id");
  BufferRef d = np::registryGet(dId), s = np::registryGet(sId);
  if (!d) c.rangeErr("dst buffer " + std::to_string(dId) + " is not a live buffer");
  if (!s) c.rangeErr("src buffer " + std::to_string(sId) + " is not a live buffer");
  if (d->kind == np::BufKind::Mapped) c.rangeErr("dst buffer " + std::to_string(dId) + " is a read-only file mapping");
  const double* r = a.Data();
  const std::string bad = np::copiesError(r, n, d->size, s->size, "request");
  if (!bad.empty()) c.rangeErr(bad);
  for (size_t i = 0; i < n; i++)
    if (r[3 * i + 2] > 0) std::memmove(d->ptr + (size_t)r[3 * i], s->ptr + (size_t)r[3 * i + 1], (size_t)r[3 * i + 2]);
  return Undef(info);
}

// residentBytes(id): bytes of the buffer's pages resident in RAM, measured by the kernel
// (mincore). For an anonymous allocation that is what this process holds; for a file
// mapping it is the page-cache residency of the mapped range.
Napi::Value ResidentBytes(const Napi::CallbackInfo& info) {
  Ctx c{info, "residentBytes", {}};
  c.argc(1);
  const int64_t id = c.idx(0, "id");
  BufferRef b = np::registryGet(id);
  if (!b) c.rangeErr("buffer " + std::to_string(id) + " is not a live buffer");
  const size_t page = (size_t)sysconf(_SC_PAGESIZE);
  const uintptr_t start = (uintptr_t)b->ptr & ~(uintptr_t)(page - 1);
  const size_t len = ((uintptr_t)b->ptr + b->mapLen) - start;
  if (b->mapLen == 0) return Napi::Number::New(info.Env(), 0);
  const size_t pages = (len + page - 1) / page;
  std::vector<unsigned char> vec(pages);
  if (mincore((void*)start, len, vec.data()) != 0) {
    const int e = errno;
    c.rangeErr(std::string("mincore failed: ") + std::strerror(e));
  }
  size_t resident = 0;
  for (unsigned char v : vec) resident += (v & 1);
  return Napi::Number::New(info.Env(), (double)(resident * page));
}

Napi::Value RowBytes(const Napi::CallbackInfo& info) {
  Ctx c{info, "rowBytes", {}};
  const int t = c.type(0, "type");
  const int64_t cols = c.idx(1, "cols");
  c.colsFit(t, cols);
  return Napi::Number::New(info.Env(), (double)np::rowBytesOf(t, cols));
}

// ---- conversion --------------------------------------------------------------------------

size_t elemAlign(int t) { return t == np::T_F32 ? 4 : t == np::T_F16 ? 2 : 1; }

Napi::Value Quantize(const Napi::CallbackInfo& info) {
  Ctx c{info, "quantize", {}};
  c.argc(7);
  const int t = c.type(0, "type");
  const int64_t sOff = c.idx(2, "srcOff"), dOff = c.idx(4, "dstOff"), rows = c.idx(5, "rows"), cols = c.idx(6, "cols");
  c.colsFit(t, cols);
  const float* src = (const float*)c.span(1, "src", sOff, (double)rows * cols * 4, 4);
  uint8_t* dst = c.span(3, "dst", dOff, (double)rows * np::rowBytesOf(t, cols), elemAlign(t));
  np::opQuantize(t, src, dst, rows, cols);
  return Undef(info);
}

Napi::Value DequantizeRow(const Napi::CallbackInfo& info) {
  Ctx c{info, "dequantizeRow", {}};
  c.argc(7);
  const int t = c.type(0, "type");
  const int64_t wOff = c.idx(2, "wOff"), cols = c.idx(3, "cols"), row = c.idx(4, "row"), dOff = c.idx(6, "dstOff");
  c.colsFit(t, cols);
  const size_t rb = np::rowBytesOf(t, cols);
  const uint8_t* w = c.span(1, "weight", wOff, (double)(row + 1) * rb, elemAlign(t));
  float* dst = (float*)c.span(5, "dst", dOff, (double)cols * 4, 4);
  np::opDequantRow(t, w + (size_t)row * rb, cols, dst);
  return Undef(info);
}

Napi::Value FillUniform(const Napi::CallbackInfo& info) {
  Ctx c{info, "fillUniform", {}};
  c.argc(5);
  const int64_t off = c.idx(1, "dstOff"), n = c.idx(2, "n");
  uint64_t seed;
  if (info[3].IsBigInt()) {
    bool lossless = true;
    seed = info[3].As<Napi::BigInt>().Uint64Value(&lossless);
  } else if (info[3].IsNumber()) {
    seed = (uint64_t)c.idx(3, "seed");
  } else {
    c.typeErr("seed must be a bigint");
  }
  const double scale = c.num(4, "scale");
  float* dst = (float*)c.span(0, "dst", off, (double)n * 4, 4);
  np::opFillUniform(dst, n, seed, (float)scale);
  return Undef(info);
}

// ---- kernels -----------------------------------------------------------------------------

Napi::Value Matvec(const Napi::CallbackInfo& info) {
  Ctx c{info, "matvec", {}};
  c.argc(9);
  const int t = c.type(0, "type");
  const int64_t wOff = c.idx(2, "wOff"), rows = c.idx(3, "rows"), cols = c.idx(4, "cols");
  const int64_t xOff = c.idx(6, "xOff"), yOff = c.idx(8, "yOff");
  c.colsFit(t, cols);
  const uint8_t* w = c.span(1, "weight", wOff, (double)rows * np::rowBytesOf(t, cols), elemAlign(t));
  const float* x = (const float*)c.span(5, "x", xOff, (double)cols * 4, 4);
  float* y = (float*)c.span(7, "y", yOff, (double)rows * 4, 4);
  np::opMatvec(t, w, rows, cols, x, y);
  return Undef(info);
}

// The memory read bandwidth probe (`neuronpipe machine`): sums `bytes` of a buffer as 64-bit
// words on up to `threads` pool threads in 1 MiB chunks. Returns the sum's low 48 bits, so the
// loads cannot be optimised away; chunk sums are added in chunk order.
Napi::Value ReadBandwidth(const Napi::CallbackInfo& info) {
  Ctx c{info, "readBandwidth", {}};
  c.argc(3);
  const int64_t bytes = c.idx(1, "bytes"), threads = c.idx(2, "threads");
  if (bytes % 64 != 0) c.rangeErr("bytes " + std::to_string(bytes) + " is not a multiple of 64");
  if (threads < 1 || threads > np::kMaxThreads) c.rangeErr("threads " + std::to_string(threads) + " out of range 1.." + std::to_string(np::kMaxThreads));
  const uint8_t* p = c.span(0, "buffer", 0, (double)bytes, 64);
  constexpr int64_t kChunk = 1 << 20;
  const int64_t n = (bytes + kChunk - 1) / kChunk;
  std::vector<uint64_t> sums((size_t)n, 0);
  np::poolRun(n, (int)threads, [&](int64_t k) {
    const uint64_t* w = (const uint64_t*)(p + k * kChunk);
    const int64_t m = std::min(kChunk, bytes - k * kChunk) / 8;
    uint64_t a[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (int64_t i = 0; i < m; i += 8)
      for (int j = 0; j < 8; j++) a[j] += w[i + j];
    sums[(size_t)k] = a[0] + a[1] + a[2] + a[3] + a[4] + a[5] + a[6] + a[7];
  });
  uint64_t s = 0;
  for (uint64_t v : sums) s += v;
  return Napi::Number::New(info.Env(), (double)(s & ((1ull << 48) - 1)));
}

const int32_t* checkedIdx(Ctx& c, size_t iId, int64_t off, int64_t nIdx, int64_t rows) {
  const int32_t* idx = (const int32_t*)c.span(iId, "idx", off, (double)nIdx * 4, 4);
  for (int64_t k = 0; k < nIdx; k++)
    if (idx[k] < 0 || idx[k] >= rows)
      c.rangeErr("idx[" + std::to_string(k) + "] = " + std::to_string(idx[k]) + " out of range (rows " +
                 std::to_string(rows) + ")");
  return idx;
}

// Optional row stride (argument i): bytes from one row to the next, at least the packed row size
// and a multiple of the type's element alignment. Rows of a neuron cache slot are strided.
size_t rowStrideArg(Ctx& c, size_t i, int t, int64_t cols) {
  const size_t rb = np::rowBytesOf(t, cols);
  if (i >= c.info.Length() || c.info[i].IsUndefined()) return rb;
  const int64_t s = c.idx(i, "rowStride");
  if ((size_t)s < rb) c.rangeErr("rowStride " + std::to_string(s) + " is less than a row (" + std::to_string(rb) + " bytes)");
  if (s % (int64_t)elemAlign(t) != 0) c.rangeErr("rowStride " + std::to_string(s) + " is not a multiple of the element size");
  return (size_t)s;
}

// Bytes spanned by `rows` strided rows (the last row only needs its own bytes).
double stridedBytes(int64_t rows, size_t stride, int t, int64_t cols) {
  return rows == 0 ? 0.0 : (double)(rows - 1) * (double)stride + (double)np::rowBytesOf(t, cols);
}

Napi::Value MatvecRows(const Napi::CallbackInfo& info) {
  Ctx c{info, "matvecRows", {}};
  c.argc(12);
  const int t = c.type(0, "type");
  const int64_t wOff = c.idx(2, "wOff"), rows = c.idx(3, "rows"), cols = c.idx(4, "cols");
  const int64_t idxOff = c.idx(6, "idxOff"), nIdx = c.idx(7, "nIdx"), xOff = c.idx(9, "xOff"), yOff = c.idx(11, "yOff");
  c.colsFit(t, cols);
  const size_t stride = rowStrideArg(c, 12, t, cols);
  const uint8_t* w = c.span(1, "weight", wOff, stridedBytes(rows, stride, t, cols), elemAlign(t));
  const int32_t* idx = checkedIdx(c, 5, idxOff, nIdx, rows);
  const float* x = (const float*)c.span(8, "x", xOff, (double)cols * 4, 4);
  float* y = (float*)c.span(10, "y", yOff, (double)nIdx * 4, 4);
  np::opMatvecRows(t, w, cols, idx, nIdx, x, y, stride);
  return Undef(info);
}

Napi::Value AxpyRows(const Napi::CallbackInfo& info) {
  Ctx c{info, "axpyRows", {}};
  c.argc(12);
  const int t = c.type(0, "type");
  const int64_t wOff = c.idx(2, "wOff"), rows = c.idx(3, "rows"), cols = c.idx(4, "cols");
  const int64_t idxOff = c.idx(6, "idxOff"), nIdx = c.idx(7, "nIdx"), cOff = c.idx(9, "coefOff"),
                oOff = c.idx(11, "outOff");
  c.colsFit(t, cols);
  const size_t stride = rowStrideArg(c, 12, t, cols);
  const uint8_t* w = c.span(1, "weight", wOff, stridedBytes(rows, stride, t, cols), elemAlign(t));
  const int32_t* idx = checkedIdx(c, 5, idxOff, nIdx, rows);
  const float* coef = (const float*)c.span(8, "coef", cOff, (double)nIdx * 4, 4);
  float* out = (float*)c.span(10, "out", oOff, (double)cols * 4, 4);
  np::opAxpyRows(t, w, cols, idx, nIdx, coef, out, stride);
  return Undef(info);
}

Napi::Value Matmul(const Napi::CallbackInfo& info) {
  Ctx c{info, "matmul", {}};
  c.argc(10);
  const int t = c.type(0, "type");
  const int64_t wOff = c.idx(2, "wOff"), rows = c.idx(3, "rows"), cols = c.idx(4, "cols");
  const int64_t xOff = c.idx(6, "xOff"), nTok = c.idx(7, "nTok"), yOff = c.idx(9, "yOff");
  c.colsFit(t, cols);
  const size_t stride = rowStrideArg(c, 10, t, cols);
  if (t == 0 && stride % 4 != 0) c.rangeErr("rowStride " + std::to_string(stride) + " of F32 rows must be a multiple of 4");
  const uint8_t* w = c.span(1, "weight", wOff, stridedBytes(rows, stride, t, cols), elemAlign(t));
  const float* x = (const float*)c.span(5, "x", xOff, (double)nTok * cols * 4, 4);
  float* y = (float*)c.span(8, "y", yOff, (double)nTok * rows * 4, 4);
  np::opMatmul(t, w, rows, cols, x, nTok, y, stride);
  return Undef(info);
}

// Rows picked from two strided sources (a pack's resident neurons in the cache, the others in
// staging). Arguments from index i: a, aOff, aStride, aRows, b, bOff, bStride, bRows, sel,
// selOff, n: row k = sel[k] >= 0 ? row sel[k] of a : row -1-sel[k] of b.
std::vector<const uint8_t*> selectedRows(Ctx& c, size_t i, int t, int64_t cols) {
  const size_t rb = np::rowBytesOf(t, cols);
  const uint8_t* base[2];
  int64_t rows[2];
  size_t stride[2];
  for (int s = 0; s < 2; s++) {
    const std::string w = s ? "b" : "a";
    const int64_t off = c.idx(i + 4 * s + 1, (w + "Off").c_str()), st = c.idx(i + 4 * s + 2, (w + "Stride").c_str());
    rows[s] = c.idx(i + 4 * s + 3, (w + "Rows").c_str());
    if ((size_t)st < rb) c.rangeErr(w + "Stride " + std::to_string(st) + " is less than a row (" + std::to_string(rb) + " bytes)");
    if (st % (int64_t)elemAlign(t) != 0) c.rangeErr(w + "Stride " + std::to_string(st) + " is not a multiple of the element size");
    stride[s] = (size_t)st;
    base[s] = c.span(i + 4 * s, s ? "b" : "a", off, stridedBytes(rows[s], stride[s], t, cols), elemAlign(t));
  }
  const int64_t selOff = c.idx(i + 9, "selOff"), n = c.idx(i + 10, "n");
  const int32_t* sel = (const int32_t*)c.span(i + 8, "sel", selOff, (double)n * 4, 4);
  std::vector<const uint8_t*> out((size_t)n);
  for (int64_t k = 0; k < n; k++) {
    const int s = sel[k] >= 0 ? 0 : 1;
    const int64_t r = s ? -1 - (int64_t)sel[k] : sel[k];
    if (r >= rows[s])
      c.rangeErr("sel[" + std::to_string(k) + "] = " + std::to_string(sel[k]) + ": row " + std::to_string(r) + " of " + (s ? "b" : "a") +
                 " out of range (rows " + std::to_string(rows[s]) + ")");
    out[(size_t)k] = base[s] + (size_t)r * stride[s];
  }
  return out;
}

// (type, <selectedRows: 11>, cols, x, xOff, nTok, y, yOff): y (nTok, n) = x (nTok, cols) · rows^T
Napi::Value MatmulSel(const Napi::CallbackInfo& info) {
  Ctx c{info, "matmulSel", {}};
  c.argc(18);
  const int t = c.type(0, "type");
  const int64_t cols = c.idx(12, "cols"), xOff = c.idx(14, "xOff"), nTok = c.idx(15, "nTok"), yOff = c.idx(17, "yOff");
  c.colsFit(t, cols);
  const std::vector<const uint8_t*> rows = selectedRows(c, 1, t, cols);
  const int64_t n = (int64_t)rows.size();
  const float* x = (const float*)c.span(13, "x", xOff, (double)nTok * cols * 4, 4);
  float* y = (float*)c.span(16, "y", yOff, (double)nTok * n * 4, 4);
  np::opMatmulRows(t, rows.data(), n, cols, x, nTok, y);
  return Undef(info);
}

// (type, <selectedRows: 11>, cols, h, hOff, ldh, nTok, out, outOff): out (nTok, cols) += h (nTok, ldh)[:, :n] · rows
Napi::Value MatmulTAccSel(const Napi::CallbackInfo& info) {
  Ctx c{info, "matmulTAccSel", {}};
  c.argc(19);
  const int t = c.type(0, "type");
  const int64_t cols = c.idx(12, "cols"), hOff = c.idx(14, "hOff"), ldh = c.idx(15, "ldh"), nTok = c.idx(16, "nTok"),
                oOff = c.idx(18, "outOff");
  c.colsFit(t, cols);
  const std::vector<const uint8_t*> rows = selectedRows(c, 1, t, cols);
  const int64_t n = (int64_t)rows.size();
  if (ldh < n) c.rangeErr("ldh " + std::to_string(ldh) + " is less than n " + std::to_string(n));
  const float* h = (const float*)c.span(13, "h", hOff, nTok == 0 ? 0.0 : ((double)(nTok - 1) * ldh + n) * 4, 4);
  float* out = (float*)c.span(17, "out", oOff, (double)nTok * cols * 4, 4);
  np::opMatmulTAccRows(t, rows.data(), n, cols, h, ldh, nTok, out);
  return Undef(info);
}

// (type, w, wOff, rows, cols, h, hOff, ldh, nTok, out, outOff, rowStride?):
// out (nTok, cols) += h (nTok, ldh)[:, :rows] · W (rows, cols)
Napi::Value MatmulTAcc(const Napi::CallbackInfo& info) {
  Ctx c{info, "matmulTAcc", {}};
  c.argc(11);
  const int t = c.type(0, "type");
  const int64_t wOff = c.idx(2, "wOff"), rows = c.idx(3, "rows"), cols = c.idx(4, "cols");
  const int64_t hOff = c.idx(6, "hOff"), ldh = c.idx(7, "ldh"), nTok = c.idx(8, "nTok"), oOff = c.idx(10, "outOff");
  c.colsFit(t, cols);
  if (ldh < rows) c.rangeErr("ldh " + std::to_string(ldh) + " is less than rows " + std::to_string(rows));
  const size_t stride = rowStrideArg(c, 11, t, cols);
  const uint8_t* w = c.span(1, "weight", wOff, stridedBytes(rows, stride, t, cols), elemAlign(t));
  const float* h = (const float*)c.span(5, "h", hOff, nTok == 0 ? 0.0 : ((double)(nTok - 1) * ldh + rows) * 4, 4);
  float* out = (float*)c.span(9, "out", oOff, (double)nTok * cols * 4, 4);
  np::opMatmulTAcc(t, w, rows, cols, h, ldh, nTok, out, stride);
  return Undef(info);
}

Napi::Value Rmsnorm(const Napi::CallbackInfo& info) {
  Ctx c{info, "rmsnorm", {}};
  c.argc(9);
  const int64_t xOff = c.idx(1, "xOff"), wOff = c.idx(3, "weightOff"), n = c.idx(4, "n"), nTok = c.idx(5, "nTok");
  const double eps = c.num(6, "eps");
  const int64_t oOff = c.idx(8, "outOff");
  if (n < 1) c.rangeErr("n must be >= 1");
  const float* x = (const float*)c.span(0, "x", xOff, (double)n * nTok * 4, 4);
  const float* w = (const float*)c.span(2, "weight", wOff, (double)n * 4, 4);
  float* out = (float*)c.span(7, "out", oOff, (double)n * nTok * 4, 4);
  np::opRmsnorm(x, w, n, nTok, (float)eps, out);
  return Undef(info);
}

Napi::Value Rope(const Napi::CallbackInfo& info) {
  Ctx c{info, "rope", {}};
  c.argc(9);
  const int64_t xOff = c.idx(1, "xOff"), nTok = c.idx(2, "nTok"), nHeads = c.idx(3, "nHeads"),
                headDim = c.idx(4, "headDim"), ropeDim = c.idx(5, "ropeDim"), pos0 = c.idx(6, "pos0");
  const double base = c.num(7, "freqBase");
  const bool neox = c.boolean(8, "neox");
  if (ropeDim % 2 != 0) c.rangeErr("ropeDim " + std::to_string(ropeDim) + " must be even");
  if (ropeDim > headDim) c.rangeErr("ropeDim " + std::to_string(ropeDim) + " exceeds headDim " + std::to_string(headDim));
  if (ropeDim > 1024) c.rangeErr("ropeDim " + std::to_string(ropeDim) + " exceeds 1024");
  if (!(base > 0)) c.rangeErr("freqBase must be > 0");
  float* x = (float*)c.span(0, "x", xOff, (double)nTok * nHeads * headDim * 4, 4);
  if (ropeDim > 0) np::opRope(x, nTok, nHeads, headDim, ropeDim, pos0, (float)base, neox);
  return Undef(info);
}

Napi::Value Softmax(const Napi::CallbackInfo& info) {
  Ctx c{info, "softmax", {}};
  c.argc(4);
  const int64_t off = c.idx(1, "xOff"), n = c.idx(2, "n"), nRows = c.idx(3, "nRows");
  float* x = (float*)c.span(0, "x", off, (double)n * nRows * 4, 4);
  np::opSoftmax(x, n, nRows);
  return Undef(info);
}

Napi::Value GatedAct(const Napi::CallbackInfo& info) {
  Ctx c{info, "gatedAct", {}};
  c.argc(8);
  const int64_t kind = c.idx(0, "kind", 1e9);
  if (kind > 2) c.rangeErr("kind " + std::to_string(kind) + " is not a gate kind (SwiGLU=0, ReGLU=1, dReLU=2)");
  const int64_t gOff = c.idx(2, "gateOff"), uOff = c.idx(4, "upOff"), oOff = c.idx(6, "outOff"), n = c.idx(7, "n");
  const float* g = (const float*)c.span(1, "gate", gOff, (double)n * 4, 4);
  const float* u = (const float*)c.span(3, "up", uOff, (double)n * 4, 4);
  float* o = (float*)c.span(5, "out", oOff, (double)n * 4, 4);
  np::opGated((int)kind, g, u, o, n);
  return Undef(info);
}

Napi::Value Add(const Napi::CallbackInfo& info) {
  Ctx c{info, "add", {}};
  c.argc(7);
  const int64_t aOff = c.idx(1, "aOff"), bOff = c.idx(3, "bOff"), oOff = c.idx(5, "outOff"), n = c.idx(6, "n");
  const float* a = (const float*)c.span(0, "a", aOff, (double)n * 4, 4);
  const float* b = (const float*)c.span(2, "b", bOff, (double)n * 4, 4);
  float* o = (float*)c.span(4, "out", oOff, (double)n * 4, 4);
  np::opAdd(a, b, o, n);
  return Undef(info);
}

// flagAbove(scores, sOff, thresholds, tOff, n, out, outOff) -> count: the positions p with
// scores[p] > thresholds[p], ascending, into out (int32). A linear predictor's decision: one call
// where a JS loop over n_ff cost more than the predictor's two matvecs.
Napi::Value FlagAbove(const Napi::CallbackInfo& info) {
  Ctx c{info, "flagAbove", {}};
  c.argc(7);
  const int64_t sOff = c.idx(1, "scoresOff"), tOff = c.idx(3, "thresholdsOff"), n = c.idx(4, "n"), oOff = c.idx(6, "outOff");
  const float* s = (const float*)c.span(0, "scores", sOff, (double)n * 4, 4);
  const float* t = (const float*)c.span(2, "thresholds", tOff, (double)n * 4, 4);
  int32_t* out = (int32_t*)c.span(5, "out", oOff, (double)n * 4, 4);
  return Napi::Number::New(info.Env(), (double)np::opFlagAbove(s, t, n, out));
}

Napi::Value KvStore(const Napi::CallbackInfo& info) {
  Ctx c{info, "kvStore", {}};
  c.argc(9);
  const int t = c.type(0, "kvType", true);
  const int64_t cOff = c.idx(2, "cacheOff"), ctx = c.idx(3, "ctx"), rowLen = c.idx(4, "rowLen"), pos0 = c.idx(5, "pos0"),
                nTok = c.idx(6, "nTok"), sOff = c.idx(8, "srcOff");
  if (pos0 + nTok > ctx)
    c.rangeErr("positions " + std::to_string(pos0) + ".." + std::to_string(pos0 + nTok - 1) + " exceed ctx " +
               std::to_string(ctx));
  const size_t es = t == np::T_F32 ? 4 : 2;
  uint8_t* cache = c.span(1, "cache", cOff, (double)ctx * rowLen * es, es);
  const float* src = (const float*)c.span(7, "src", sOff, (double)nTok * rowLen * 4, 4);
  np::opKvStore(t, cache, rowLen, pos0, nTok, src);
  return Undef(info);
}

Napi::Value Attention(const Napi::CallbackInfo& info) {
  Ctx c{info, "attention", {}};
  c.argc(15);
  const int t = c.type(0, "kvType", true);
  const int64_t qOff = c.idx(2, "qOff"), kOff = c.idx(4, "kOff"), vOff = c.idx(6, "vOff"), ctx = c.idx(7, "ctx"),
                nHead = c.idx(8, "nHead"), nHeadKv = c.idx(9, "nHeadKv"), headDim = c.idx(10, "headDim"),
                pos0 = c.idx(11, "pos0"), nTok = c.idx(12, "nTok"), oOff = c.idx(14, "outOff");
  if (nHeadKv < 1 || nHead % nHeadKv != 0)
    c.rangeErr("nHead " + std::to_string(nHead) + " is not a multiple of nHeadKv " + std::to_string(nHeadKv));
  if (pos0 + nTok > ctx)
    c.rangeErr("positions " + std::to_string(pos0) + ".." + std::to_string(pos0 + nTok - 1) + " exceed ctx " +
               std::to_string(ctx));
  const size_t es = t == np::T_F32 ? 4 : 2;
  const double qBytes = (double)nTok * nHead * headDim * 4;
  const float* q = (const float*)c.span(1, "q", qOff, qBytes, 4);
  const uint8_t* kc = c.span(3, "kCache", kOff, (double)ctx * nHeadKv * headDim * es, es);
  const uint8_t* vc = c.span(5, "vCache", vOff, (double)ctx * nHeadKv * headDim * es, es);
  float* out = (float*)c.span(13, "out", oOff, qBytes, 4);
  np::opAttention(t, q, kc, vc, nHead, nHeadKv, headDim, pos0, nTok, out);
  return Undef(info);
}

Napi::Object Init(Napi::Env env, Napi::Object exports) {
  auto def = [&](const char* name, Napi::Value (*f)(const Napi::CallbackInfo&)) {
    exports.Set(name, Napi::Function::New(env, f, name));
  };
  def("cpuFeatures", CpuFeatures);
  def("bestSimd", BestSimd);
  def("setSimd", SetSimd);
  def("getSimd", GetSimd);
  def("setThreads", SetThreads);
  def("getThreads", GetThreads);
  def("setCallerThreads", SetCallerThreads);
  def("buildInfo", BuildInfo);
  def("poolStats", PoolStats);
  def("setAffinity", SetAffinity);
  def("threadInfo", ThreadInfo);
  def("alloc", Alloc);
  def("mapFile", MapFile);
  def("free", Free);
  def("bufferSize", BufferSize);
  def("viewF32", ViewF32);
  def("viewI32", ViewI32);
  def("viewU8", ViewU8);
  def("copy", Copy);
  def("copyBatch", CopyBatch);
  def("residentBytes", ResidentBytes);
  def("rowBytes", RowBytes);
  def("quantize", Quantize);
  def("dequantizeRow", DequantizeRow);
  def("fillUniform", FillUniform);
  def("matvec", Matvec);
  def("readBandwidth", ReadBandwidth);
  def("discard", Discard);
  def("matvecRows", MatvecRows);
  def("axpyRows", AxpyRows);
  def("matmul", Matmul);
  def("matmulTAcc", MatmulTAcc);
  def("matmulSel", MatmulSel);
  def("matmulTAccSel", MatmulTAccSel);
  def("rmsnorm", Rmsnorm);
  def("rope", Rope);
  def("softmax", Softmax);
  def("gatedAct", GatedAct);
  def("add", Add);
  def("flagAbove", FlagAbove);
  def("kvStore", KvStore);
  def("attention", Attention);
  np::io::RegisterIo(env, exports);  // openLoader, loaderInfo, closeLoader, readBatch
  np::RegisterPredictor(env, exports);  // trainPredictor, predictorScores, predictorEval
  return exports;
}

}  // namespace

NODE_API_MODULE(neuronpipe, Init)
