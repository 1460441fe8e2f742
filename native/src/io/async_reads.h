// Reads that complete in the background while the caller computes: a batch of loader reads
// into staging, then copies from staging into their destinations, run FIFO on a lane: one
// background thread per lane and process (the inline decoder's reads ahead on lane 0, a layer's
// own misses on lane 1, so they do not queue behind a batch for a later layer). A thread mostly
// sleeps in the kernel (io_uring or the pread pool does the I/O), so it does not take a core
// from compute. The caller waits for a ticket before it touches the destinations; the job holds
// references to its buffers, so freeing one while a job is in flight is safe.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "io/loader.h"
#include "registry.h"

namespace np::io {

struct AsyncCopy {
  uint8_t* dst;
  const uint8_t* src;
  size_t n;
};

struct AsyncJob {
  std::shared_ptr<Loader> loader;
  std::vector<ReadReq> reqs;
  std::vector<AsyncCopy> copies;  // after every read of the batch is complete
  std::vector<BufferRef> keep;    // buffers the reads and copies touch
  uint64_t bytes = 0;
};

struct AsyncDone {
  uint64_t bytes;
  // when the background thread started and finished the job: CLOCK_MONOTONIC µs, the clock of
  // Node's process.hrtime (traces place the reads on the timeline with them)
  double t0Us, t1Us;
};

constexpr int kAsyncLanes = 2;
// A lane without a thread: asyncSubmit submits the reads from the calling thread and returns
// (an io_uring loader, Loader::startBatch); asyncWait, on that thread, reaps them and copies on
// the compute pool. No thread wakes another (the background lanes cost a few context switches
// and futex calls a batch). The job's times are its submission and when its reads were reaped.
constexpr int kCallerLane = kAsyncLanes;

// Queues the job on lane 0..kCallerLane (std::out_of_range otherwise; std::logic_error for the
// caller lane and a loader without io_uring); returns its ticket (> 0).
uint64_t asyncSubmit(AsyncJob&& job, int lane = 0);
// Blocks until the ticket's job is done and forgets it; returns what it did or throws the
// job's error (std::runtime_error). Unknown tickets (never issued, or already waited for) throw
// std::out_of_range.
AsyncDone asyncWait(uint64_t ticket);

}  // namespace np::io
