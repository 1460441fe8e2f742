// Persistent process-wide thread pool. The calling thread participates; workers spin
// briefly after a job and then sleep on a condition variable.
//
// Determinism contract: the pool only decides WHICH thread runs a chunk, never how a
// chunk is computed. Kernels partition work so every output element is produced by
// exactly one chunk in a fixed order, hence results do not depend on the thread count.
#pragma once
#include <cstdint>
#include <functional>

namespace np {

constexpr int kMaxThreads = 64;

void poolSetThreads(int n);  // 1..kMaxThreads
int poolGetThreads();
int poolDefaultThreads();

// A cap on the threads kernels called from the current thread use (0: none, the pool's size).
// A worker sets 1 around work that should leave the other cores to the threads it overlaps
// (the pipeline's scheduler and I/O while a layer's resident neurons are computed).
void poolSetCallerCap(int n);
int poolCallerCap();

// Runs fn(chunk) for chunk in [0, nChunks) using up to `maxThreads` threads (<= pool
// size); chunks are handed out dynamically. If another JS thread is already using the
// pool, runs everything inline on the caller. Exceptions must not escape fn.
void poolRun(int64_t nChunks, int maxThreads, const std::function<void(int64_t)>& fn);

// Index of the current thread inside a poolRun (0 = caller), for per-thread scratch.
int poolThreadIndex();

// Work the calling thread defers to its next parallel job (a batch of reads to hand to the
// kernel): run there by the caller while the workers start on the job's chunks, so it takes no
// core from compute. Without workers, with the caller capped to one thread, or after waiting
// 50 µs through jobs run inline, it runs at the start of the next poolRun. fn must not throw.
void poolDefer(std::function<void()> fn);

// Diagnostics: jobs run on the pool (not inline) and chunks done by workers / by callers.
void poolStats(uint64_t* jobs, uint64_t* workerChunks, uint64_t* callerChunks);

}  // namespace np
