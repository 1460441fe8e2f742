// N-API bindings of the direct-I/O loader. Argument parsing and checks only (alignment,
// destination bounds); the I/O lives in loader.cc. Error messages start with the function
// name, as in addon.cc.
#include "io/io_bindings.h"

#include <cmath>
#include <string>
#include <unordered_map>
#include <vector>

#include "io/async_reads.h"
#include "bind_ctx.h"
#include "io/loader.h"
#include "registry.h"

namespace np::io {

namespace {

[[noreturn]] void typeErr(Napi::Env env, const char* fn, const std::string& m) {
  throw Napi::TypeError::New(env, std::string(fn) + ": " + m);
}
[[noreturn]] void rangeErr(Napi::Env env, const char* fn, const std::string& m) {
  throw Napi::RangeError::New(env, std::string(fn) + ": " + m);
}

std::string fmt(double v) {
  if (v == std::floor(v) && std::fabs(v) < 1e18) return std::to_string((long long)v);
  return std::to_string(v);
}

int64_t loaderIdArg(const Napi::CallbackInfo& info, const char* fn) {
  if (info.Length() < 1 || !info[0].IsNumber()) typeErr(info.Env(), fn, "id must be a number");
  const double v = info[0].As<Napi::Number>().DoubleValue();
  if (!std::isfinite(v) || v != std::floor(v) || v < 0) rangeErr(info.Env(), fn, "id out of range: " + fmt(v));
  return (int64_t)v;
}

// Argument i, a number already checked, as a live registry buffer ("NAME ID is not a live buffer").
BufferRef liveBufferArg(const Napi::CallbackInfo& info, int i, const char* fn, const char* name) {
  const double v = info[i].As<Napi::Number>().DoubleValue();
  BufferRef b = std::isfinite(v) && v >= 0 && v == std::floor(v) ? np::registryGet((int64_t)v) : nullptr;
  if (!b) rangeErr(info.Env(), fn, std::string(name) + " " + fmt(v) + " is not a live buffer");
  return b;
}

std::shared_ptr<Loader> getLoader(const Napi::CallbackInfo& info, const char* fn) {
  const int64_t id = loaderIdArg(info, fn);
  auto l = loaderGet(id);
  if (!l) rangeErr(info.Env(), fn, "loader " + std::to_string(id) + " is not an open loader");
  return l;
}

Napi::Value OpenLoader(const Napi::CallbackInfo& info) {
  const char* fn = "openLoader";
  Napi::Env env = info.Env();
  if (info.Length() < 1 || !info[0].IsString()) typeErr(env, fn, "path must be a string");
  const std::string path = info[0].As<Napi::String>().Utf8Value();
  LoaderOpts o;
  if (info.Length() >= 2 && !info[1].IsUndefined()) {
    if (!info[1].IsObject()) typeErr(env, fn, "opts must be an object");
    Napi::Object opts = info[1].As<Napi::Object>();
    Napi::Value b = opts.Get("backend");
    if (!b.IsUndefined()) {
      if (!b.IsString()) typeErr(env, fn, "opts.backend must be \"uring\", \"pread\" or \"auto\"");
      o.backend = b.As<Napi::String>().Utf8Value();
      if (o.backend != "uring" && o.backend != "pread" && o.backend != "auto")
        rangeErr(env, fn, "opts.backend must be \"uring\", \"pread\" or \"auto\", got \"" + o.backend + "\"");
    }
    auto intOpt = [&](const char* name, double lo, double hi, unsigned& out) {
      Napi::Value v = opts.Get(name);
      if (v.IsUndefined()) return;
      if (!v.IsNumber()) typeErr(env, fn, std::string("opts.") + name + " must be a number");
      const double d = v.As<Napi::Number>().DoubleValue();
      if (!std::isfinite(d) || d != std::floor(d)) typeErr(env, fn, std::string("opts.") + name + " must be an integer, got " + fmt(d));
      if (d < lo || d > hi)
        rangeErr(env, fn, std::string("opts.") + name + " out of range [" + fmt(lo) + ", " + fmt(hi) + "]: " + fmt(d));
      out = (unsigned)d;
    };
    intOpt("queueDepth", 1, 4096, o.queueDepth);
    intOpt("threads", 1, 64, o.threads);
    Napi::Value d = opts.Get("directIO");
    if (!d.IsUndefined()) {
      if (!d.IsBoolean()) typeErr(env, fn, "opts.directIO must be a boolean");
      o.directIO = d.As<Napi::Boolean>().Value();
    }
    Napi::Value si = opts.Get("singleIssuer");
    if (!si.IsUndefined()) {
      if (!si.IsBoolean()) typeErr(env, fn, "opts.singleIssuer must be a boolean");
      o.singleIssuer = si.As<Napi::Boolean>().Value();
    }
  }
  try {
    return Napi::Number::New(env, (double)loaderOpen(path, o));
  } catch (const std::exception& e) {
    throw Napi::Error::New(env, std::string(fn) + ": " + e.what());
  }
}

Napi::Value LoaderInfo(const Napi::CallbackInfo& info) {
  auto l = getLoader(info, "loaderInfo");
  Napi::Object o = Napi::Object::New(info.Env());
  o.Set("backend", l->backend() == Backend::Uring ? "uring" : "pread");
  o.Set("queueDepth", (double)l->queueDepth());
  o.Set("directIO", l->directIO());
  o.Set("align", (double)l->align());
  o.Set("fileSize", (double)l->fileSize());
  o.Set("threads", (double)l->threads());
  o.Set("fixedBuffer", l->hasFixedBuffer());
  o.Set("singleIssuer", l->singleIssuer());
  o.Set("path", l->path());
  if (!l->note().empty()) o.Set("note", l->note());
  return o;
}

// loaderFixBuffer(loaderId, bufferId) -> "" or why the buffer was not registered (Loader::fixBuffer)
Napi::Value LoaderFixBuffer(const Napi::CallbackInfo& info) {
  const char* fn = "loaderFixBuffer";
  Napi::Env env = info.Env();
  auto l = getLoader(info, fn);
  if (info.Length() < 2 || !info[1].IsNumber()) typeErr(env, fn, "bufferId must be a number");
  BufferRef b = liveBufferArg(info, 1, fn, "buffer");
  if (b->kind == np::BufKind::Mapped) rangeErr(env, fn, "buffer " + fmt(info[1].As<Napi::Number>().DoubleValue()) + " is a read-only file mapping");
  return Napi::String::New(env, l->fixBuffer(std::move(b)));
}

Napi::Value CloseLoader(const Napi::CallbackInfo& info) {
  const int64_t id = loaderIdArg(info, "closeLoader");
  if (!loaderClose(id)) rangeErr(info.Env(), "closeLoader", "loader " + std::to_string(id) + " is not an open loader");
  return info.Env().Undefined();
}

// Requests [fileOffset, length, dstBufferId, dstOffset]… of info[1], checked (bounds, O_DIRECT
// alignment); destinations stay alive through `bufs`. Returns the total bytes.
double parseReads(const Napi::CallbackInfo& info, const char* fn, const Loader& l, std::unordered_map<int64_t, BufferRef>& bufs,
                  std::vector<ReadReq>& reqs) {
  Napi::Env env = info.Env();
  if (info.Length() < 2 || !info[1].IsTypedArray() ||
      info[1].As<Napi::TypedArray>().TypedArrayType() != napi_float64_array)
    typeErr(env, fn, "requests must be a Float64Array of [fileOffset, length, dstBufferId, dstOffset] per request");
  Napi::Float64Array a = info[1].As<Napi::Float64Array>();
  const size_t len = a.ElementLength();
  if (len % 4 != 0) rangeErr(env, fn, "requests length " + std::to_string(len) + " is not a multiple of 4");
  const size_t n = len / 4;
  const double* d = a.Data();
  const bool direct = l.directIO();
  reqs.reserve(n);
  double total = 0;
  const char* names[4] = {"fileOffset", "length", "dstBufferId", "dstOffset"};
  for (size_t i = 0; i < n; i++) {
    int64_t v[4];
    for (int k = 0; k < 4; k++) {
      const double x = d[i * 4 + k];
      if (!std::isfinite(x) || x != std::floor(x) || x < 0 || x > 9007199254740991.0)
        rangeErr(env, fn, "request " + std::to_string(i) + ": " + names[k] + " must be a non-negative integer, got " + fmt(x));
      v[k] = (int64_t)x;
    }
    const int64_t off = v[0], ln = v[1], bid = v[2], doff = v[3];
    // the request named in an error, built only for one (a string per request cost ~0.1 µs,
    // ~1 ms of a half-offloaded 7B token at ~8K requests)
    auto at = [&] {
      return "request " + std::to_string(i) + " (fileOffset " + std::to_string(off) + ", length " + std::to_string(ln) +
             ", buffer " + std::to_string(bid) + " at " + std::to_string(doff) + "): ";
    };
    if (ln > (int64_t)1 << 30) rangeErr(env, fn, at() + "length exceeds 1 GiB per request");
    auto it = bufs.find(bid);
    if (it == bufs.end()) {
      BufferRef b = np::registryGet(bid);
      if (!b) rangeErr(env, fn, at() + "buffer " + std::to_string(bid) + " is not a live buffer");
      if (b->kind == np::BufKind::Mapped)
        rangeErr(env, fn, at() + "buffer " + std::to_string(bid) + " is a read-only file mapping");
      it = bufs.emplace(bid, std::move(b)).first;
    }
    const np::Buffer& b = *it->second;
    if ((uint64_t)doff > b.size || (uint64_t)ln > b.size - (uint64_t)doff)
      rangeErr(env, fn, at() + "destination out of range: need " + std::to_string(ln) + " bytes at offset " +
                            std::to_string(doff) + ", buffer has " + std::to_string(b.size));
    uint8_t* dst = b.ptr + doff;
    if (direct) {
      const int64_t A = (int64_t)l.align();
      const std::string a = std::to_string(A);
      if (off % A) rangeErr(env, fn, at() + "fileOffset " + std::to_string(off) + " is not " + a + "-aligned (O_DIRECT)");
      if (ln % A) rangeErr(env, fn, at() + "length " + std::to_string(ln) + " is not a multiple of " + a + " (O_DIRECT)");
      if ((uintptr_t)dst % (uintptr_t)A)
        rangeErr(env, fn, at() + "destination address (dstOffset " + std::to_string(doff) + ") is not " + a + "-aligned (O_DIRECT)");
    }
    reqs.push_back({(uint64_t)off, (uint64_t)ln, dst});
    total += (double)ln;
  }
  return total;
}

// readBatch(loaderId, requests: Float64Array of 4 numbers per request
//           [fileOffset, length, dstBufferId, dstOffset]) -> total bytes read
Napi::Value ReadBatch(const Napi::CallbackInfo& info) {
  const char* fn = "readBatch";
  auto l = getLoader(info, fn);
  std::unordered_map<int64_t, BufferRef> bufs;  // keeps destinations alive during the reads
  std::vector<ReadReq> reqs;
  const double total = parseReads(info, fn, *l, bufs, reqs);
  try {
    l->readBatch(reqs);
  } catch (const std::exception& e) {
    throw Napi::Error::New(info.Env(), std::string(fn) + ": " + e.what());
  }
  return Napi::Number::New(info.Env(), total);
}

// readBatchStart(loaderId, requests, copyDst, copySrc, copies: Float64Array of
//                [dstOffset, srcOffset, length] per copy[, lane = 0]) -> ticket
// The reads, then the copies (copySrc -> copyDst), run in the background on the lane's thread
// (lanes 0 and 1), or are submitted now and completed by readBatchWait on the calling thread
// (lane 2, io_uring loaders; async_reads.h). A single-issuer loader must always be read on the
// same lane (and lane 2: the same thread).
Napi::Value ReadBatchStart(const Napi::CallbackInfo& info) {
  const char* fn = "readBatchStart";
  Napi::Env env = info.Env();
  auto l = getLoader(info, fn);
  std::unordered_map<int64_t, BufferRef> bufs;
  AsyncJob job;
  job.bytes = (uint64_t)parseReads(info, fn, *l, bufs, job.reqs);
  if (info.Length() < 5 || !info[2].IsNumber() || !info[3].IsNumber() || !info[4].IsTypedArray() ||
      info[4].As<Napi::TypedArray>().TypedArrayType() != napi_float64_array)
    typeErr(env, fn, "expected (loaderId, requests, copyDst, copySrc, copies: Float64Array of [dstOffset, srcOffset, length] per copy)");
  BufferRef dst = liveBufferArg(info, 2, fn, "copyDst"), src = liveBufferArg(info, 3, fn, "copySrc");
  if (dst->kind == np::BufKind::Mapped) rangeErr(env, fn, "copyDst is a read-only file mapping");
  Napi::Float64Array c = info[4].As<Napi::Float64Array>();
  if (c.ElementLength() % 3 != 0) rangeErr(env, fn, "copies length " + std::to_string(c.ElementLength()) + " is not a multiple of 3");
  const double* r = c.Data();
  const size_t nCopies = c.ElementLength() / 3;
  const std::string bad = copiesError(r, nCopies, dst->size, src->size, "copy");
  if (!bad.empty()) rangeErr(env, fn, bad);
  for (size_t i = 0; i < nCopies; i++) job.copies.push_back({dst->ptr + (size_t)r[3 * i], src->ptr + (size_t)r[3 * i + 1], (size_t)r[3 * i + 2]});
  int lane = 0;
  if (info.Length() > 5 && !info[5].IsUndefined()) {
    if (!info[5].IsNumber()) typeErr(env, fn, "lane must be a number");
    const double v = info[5].As<Napi::Number>().DoubleValue();
    if (!(v >= 0 && v <= kCallerLane && v == std::floor(v))) rangeErr(env, fn, "lane " + fmt(v) + " is not 0.." + std::to_string(kCallerLane));
    lane = (int)v;
  }
  job.loader = l;
  for (auto& [id, b] : bufs) job.keep.push_back(b);
  job.keep.push_back(dst);
  job.keep.push_back(src);
  try {
    return Napi::Number::New(env, (double)asyncSubmit(std::move(job), lane));
  } catch (const std::exception& e) {
    throw Napi::Error::New(env, std::string(fn) + ": " + e.what());
  }
}

// readBatchWait(ticket) -> { bytes, t0, t1 } (t0/t1: when the background thread ran the batch,
// µs of the clock of process.hrtime); throws the batch's error.
Napi::Value ReadBatchWait(const Napi::CallbackInfo& info) {
  const char* fn = "readBatchWait";
  Napi::Env env = info.Env();
  if (info.Length() < 1 || !info[0].IsNumber()) typeErr(env, fn, "ticket must be a number");
  const double v = info[0].As<Napi::Number>().DoubleValue();
  if (!std::isfinite(v) || v != std::floor(v) || v < 1) rangeErr(env, fn, "ticket out of range: " + fmt(v));
  try {
    const AsyncDone d = asyncWait((uint64_t)v);
    Napi::Object o = Napi::Object::New(env);
    o.Set("bytes", (double)d.bytes);
    o.Set("t0", d.t0Us);
    o.Set("t1", d.t1Us);
    return o;
  } catch (const std::out_of_range& e) {
    rangeErr(env, fn, e.what());
  } catch (const std::exception& e) {
    throw Napi::Error::New(env, std::string(fn) + ": " + e.what());
  }
}

}  // namespace

void RegisterIo(Napi::Env env, Napi::Object exports) {
  auto def = [&](const char* name, Napi::Value (*f)(const Napi::CallbackInfo&)) {
    exports.Set(name, Napi::Function::New(env, f, name));
  };
  def("openLoader", OpenLoader);
  def("loaderInfo", LoaderInfo);
  def("closeLoader", CloseLoader);
  def("loaderFixBuffer", LoaderFixBuffer);
  def("readBatch", ReadBatch);
  def("readBatchStart", ReadBatchStart);
  def("readBatchWait", ReadBatchWait);
}

}  // namespace np::io
