// Direct-I/O file loader: batches of (fileOffset, length, dst pointer) reads, all in flight up
// to a queue depth, completed synchronously. Two backends: io_uring (liburing, when built with
// NP_HAVE_LIBURING and the kernel allows it) and a fixed pool of pread threads. Both optionally
// use O_DIRECT. Errors are std::runtime_error naming the file and offset.
#pragma once
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "registry.h"

namespace np::io {

enum class Backend { Uring, Pread };

struct ReadReq {
  uint64_t fileOffset;
  uint64_t length;
  uint8_t* dst;
};

struct LoaderOpts {
  std::string backend = "auto";  // "uring" | "pread" | "auto"
  unsigned queueDepth = 8;
  bool directIO = false;
  unsigned threads = 0;  // pread backend pool size; 0 = min(queueDepth, 16)
  // io_uring: a ring one thread uses (the background reads' thread), set up with
  // SINGLE_ISSUER | DEFER_TASKRUN: completions are posted only when that thread waits, which it
  // does once for the whole batch, so the device's completions do not wake it (and preempt
  // compute on a busy core) one by one. The first thread that reads owns the ring; a read from
  // any other thread throws. Kernels before 6.1 refuse the flags: the ring is then a plain one
  // (note() says so).
  bool singleIssuer = false;
};

// The direct-I/O alignment assumed when a smaller one cannot be shown (a page: every Linux
// filesystem that takes O_DIRECT takes page-aligned requests).
constexpr size_t kDirectAlign = 4096;
// The smallest direct-I/O alignment tried (a sector).
constexpr size_t kSectorAlign = 512;

class Loader {
 public:
  // Throws std::runtime_error naming the path on failure.
  Loader(const std::string& path, const LoaderOpts& opts);
  ~Loader();
  Loader(const Loader&) = delete;
  Loader& operator=(const Loader&) = delete;

  // Reads every request completely or throws (first error). Serialised per loader.
  void readBatch(const std::vector<ReadReq>& reqs);

  // io_uring only: submits a batch and returns at once (its number); finishBatch waits for it on
  // the same thread and throws its first error. Several batches may be in flight, finished in any
  // order; the calling thread does all the work (no background thread): on a single-issuer ring
  // the device's completions are posted only when finishBatch enters the kernel. Throws
  // std::logic_error for the pread backend, std::out_of_range for a batch not in flight.
  // With submit false the batch's requests are only queued on the ring: submitQueued (or the
  // next start or finish) hands them to the kernel.
  uint64_t startBatch(std::vector<ReadReq> reqs, bool submit = true);
  void finishBatch(uint64_t batch);
  void submitQueued();
  // An io_uring failure left reads in an unknown state (they may still land): reopen the loader.
  bool ringBroken() const;

  // io_uring: register `buf` with the ring (one buffer per loader, replacing the last); reads
  // landing inside it are then READ_FIXED, which spares the kernel pinning and unpinning the
  // destination's pages on every request (0.1-1.7 us a read here). Returns "" or why it was not
  // done (pread backend, RLIMIT_MEMLOCK, …); reads work the same either way. The loader keeps
  // the buffer alive while registered.
  std::string fixBuffer(BufferRef buf);
  bool hasFixedBuffer() const { return (bool)fixed_; }
  // A single-issuer ring (LoaderOpts::singleIssuer, granted by the kernel).
  bool singleIssuer() const { return singleIssuer_; }

  const std::string& path() const { return path_; }
  Backend backend() const { return backend_; }
  unsigned queueDepth() const { return qd_; }
  bool directIO() const { return direct_; }
  // With direct I/O: what file offsets, lengths and destination addresses must be multiples of.
  // 512 when a 512-aligned read of this file succeeded at open (its device's sector), else 4096;
  // 1 without direct I/O.
  size_t align() const { return direct_ ? align_ : 1; }
  uint64_t fileSize() const { return size_; }
  unsigned threads() const { return nThreads_; }
  const std::string& note() const { return note_; }  // why "auto" fell back, if it did

 private:
  // io_uring: batches in flight on the ring (flights), oldest first; the calls below hold batchMu_
  struct Flight;
  uint64_t uringStart(std::vector<ReadReq> reqs, bool submit);
  void uringFinish(uint64_t batch);
  void uringPump(bool submit = true);  // queue the flights' next requests while the ring has room, submit
  void uringReap(unsigned want);   // wait for `want` completions, then take every one there is
  void uringPrep(Flight& f, size_t i);
  void readPread(const std::vector<ReadReq>& reqs);
  void workerLoop();
  void runPreadJob();
  // Full read of one request with retries of short reads; returns "" or the error message.
  std::string preadOne(const ReadReq& r) const;

  std::string path_;
  int fd_ = -1;
  uint64_t size_ = 0;
  bool direct_ = false;
  size_t align_ = kDirectAlign;
  unsigned qd_ = 1;
  Backend backend_ = Backend::Pread;
  std::string note_;
  std::mutex batchMu_;  // one batch at a time per loader (io_uring: one call at a time)
  std::vector<std::unique_ptr<Flight>> flights_;
  uint64_t flightSeq_ = 0;
  size_t queued_ = 0, submitted_ = 0;  // requests on the ring: queued, not yet submitted; submitted, not completed
  BufferRef fixed_;     // the registered buffer (io_uring), or null
  bool singleIssuer_ = false;  // ring set up SINGLE_ISSUER | DEFER_TASKRUN | R_DISABLED
  bool enabled_ = false;       // … and enabled by its first reader, issuer_
  std::thread::id issuer_;

  // io_uring state (opaque, defined in loader.cc)
  struct Ring;
  std::unique_ptr<Ring> ring_;

  // pread pool
  unsigned nThreads_ = 0;
  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable cv_, doneCv_;
  uint64_t jobSeq_ = 0;
  bool stop_ = false;
  const std::vector<ReadReq>* job_ = nullptr;
  size_t next_ = 0;        // next request index to claim (under mu_)
  unsigned active_ = 0;    // workers inside the current job
  std::string err_;        // first error of the current job
  size_t errIdx_ = SIZE_MAX;
};

// Process-wide table of loaders (shared by worker threads, like the buffer registry).
int64_t loaderOpen(const std::string& path, const LoaderOpts& opts);
std::shared_ptr<Loader> loaderGet(int64_t id);
bool loaderClose(int64_t id);

}  // namespace np::io
