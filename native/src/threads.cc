#include "threads.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define NP_PAUSE() _mm_pause()
#else
#define NP_PAUSE() ((void)0)
#endif

namespace np {
namespace {

thread_local int t_index = 0;
thread_local int t_callerCap = 0;
thread_local std::vector<std::function<void()>> t_deferred;  // poolDefer's work, oldest first
thread_local std::chrono::steady_clock::time_point t_deferredSince;

// How long deferred work may wait for a parallel job while the caller runs small ones inline (a
// residual add, a norm: between a layer's reads ahead and its next matvec there are a few).
constexpr auto kDeferredWait = std::chrono::microseconds(50);

void runDeferred() {
  if (t_deferred.empty()) return;
  std::vector<std::function<void()>> work;
  work.swap(t_deferred);
  for (auto& f : work) f();
}

// Job protocol (no waiting for workers that never showed up): the caller publishes a job
// (fn, nChunks, next = 0) and opens it (closed = false), bumps `generation` to wake the
// workers, drains chunks itself, then closes the job and waits only for workers that are
// registered in `inFlight`. A worker registers (inFlight++) BEFORE it checks `closed`; with
// seq_cst on both sides, a worker that sees the job open is always seen by the caller's
// final inFlight check, so fn is never called after the caller returned. A late worker
// finds the job closed (or, harmlessly, joins a newer job it is then registered for).
struct Pool {
  std::mutex runMu;  // held by the thread that currently drives a job
  std::mutex mu;     // protects sleeping on cv
  std::condition_variable cv;
  std::vector<std::thread> workers;
  int nThreads = 1;

  std::atomic<uint64_t> generation{0};
  const std::function<void(int64_t)>* fn = nullptr;
  int64_t nChunks = 0;
  std::atomic<int> jobThreads{1};  // threads allowed on this job (including the caller)
  std::atomic<int64_t> next{0};
  std::atomic<bool> closed{true};
  std::atomic<int> inFlight{0};
  std::atomic<bool> stop{false};

  void shutdown() {
    {
      std::lock_guard<std::mutex> lk(mu);
      stop.store(true);
      generation.fetch_add(1);
    }
    cv.notify_all();
    for (auto& t : workers) t.join();
    workers.clear();
    stop.store(false);
  }

  std::atomic<uint64_t> statJobs{0}, statWorkerChunks{0}, statCallerChunks{0};

  void drain() {
    const auto& f = *fn;
    const int64_t n = nChunks;
    uint64_t done = 0;
    for (;;) {
      int64_t c = next.fetch_add(1, std::memory_order_relaxed);
      if (c >= n) break;
      f(c);
      done++;
    }
    (t_index == 0 ? statCallerChunks : statWorkerChunks).fetch_add(done, std::memory_order_relaxed);
  }

  void workerLoop(int idx, uint64_t seen) {
    t_index = idx;
    for (;;) {
      // Spin ~30 µs, then sleep.
      auto t0 = std::chrono::steady_clock::now();
      uint64_t g;
      int spins = 0;
      while ((g = generation.load(std::memory_order_acquire)) == seen) {
        NP_PAUSE();
        if (++spins >= 256) {
          spins = 0;
          if (std::chrono::steady_clock::now() - t0 > std::chrono::microseconds(30)) break;
        }
      }
      if (g == seen) {
        std::unique_lock<std::mutex> lk(mu);
        cv.wait(lk, [&] { return generation.load() != seen; });
        g = generation.load();
      }
      seen = g;
      if (stop.load()) return;
      if (idx >= jobThreads.load(std::memory_order_relaxed)) continue;
      inFlight.fetch_add(1, std::memory_order_seq_cst);
      if (!closed.load(std::memory_order_seq_cst)) drain();
      inFlight.fetch_sub(1, std::memory_order_release);
    }
  }

  void setThreads(int n) {
    std::lock_guard<std::mutex> run(runMu);
    if (n == nThreads && (int)workers.size() == n - 1) return;
    shutdown();
    nThreads = n;
    const uint64_t g = generation.load();  // passed in: a late-starting thread must not miss a job
    for (int i = 1; i < n; i++) workers.emplace_back([this, i, g] { workerLoop(i, g); });
  }

  void run(int64_t n, int maxT, const std::function<void(int64_t)>& f) {
    if (n <= 0) return;
    std::unique_lock<std::mutex> run(runMu, std::try_to_lock);
    int T = std::min<int>(maxT, nThreads);
    if (!run.owns_lock() || T <= 1 || n == 1 || workers.empty()) {
      // deferred work waits for a parallel job, unless none can come from this caller (no
      // workers, or capped to one thread) or it has waited long enough
      if (!t_deferred.empty() && (workers.empty() || t_callerCap == 1 || std::chrono::steady_clock::now() - t_deferredSince > kDeferredWait))
        runDeferred();
      for (int64_t c = 0; c < n; c++) f(c);
      return;
    }
    statJobs.fetch_add(1, std::memory_order_relaxed);
    fn = &f;
    nChunks = n;
    jobThreads.store(T, std::memory_order_relaxed);
    next.store(0, std::memory_order_relaxed);
    closed.store(false, std::memory_order_seq_cst);  // publishes fn/nChunks/next
    {
      std::lock_guard<std::mutex> lk(mu);
      generation.fetch_add(1, std::memory_order_release);
    }
    cv.notify_all();
    runDeferred();  // while the workers start on the chunks
    int saved = t_index;
    t_index = 0;
    drain();
    t_index = saved;
    closed.store(true, std::memory_order_seq_cst);
    // Wait only for workers that joined (they are running: spin, then yield).
    int spins = 0;
    while (inFlight.load(std::memory_order_seq_cst) != 0) {
      if (++spins < 4096) NP_PAUSE();
      else std::this_thread::yield();
    }
    std::atomic_thread_fence(std::memory_order_acquire);
    fn = nullptr;
  }
};

int defaultThreads() {
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  if (n < 1) n = 1;
  if (n > kMaxThreads) n = kMaxThreads;
  return (int)n;
}

Pool& pool() {
  static Pool* p = [] {
    auto* q = new Pool();  // intentionally leaked: no thread joins at process exit
    q->setThreads(defaultThreads());
    return q;
  }();
  return *p;
}

}  // namespace

void poolSetThreads(int n) {
  if (n < 1) n = 1;
  if (n > kMaxThreads) n = kMaxThreads;
  pool().setThreads(n);
}
int poolGetThreads() { return pool().nThreads; }

void poolSetCallerCap(int n) { t_callerCap = n < 0 ? 0 : n; }
int poolCallerCap() { return t_callerCap; }
int poolDefaultThreads() { return defaultThreads(); }
void poolRun(int64_t n, int maxT, const std::function<void(int64_t)>& fn) { pool().run(n, maxT, fn); }
int poolThreadIndex() { return t_index; }
void poolDefer(std::function<void()> fn) {
  if (t_deferred.empty()) t_deferredSince = std::chrono::steady_clock::now();
  t_deferred.push_back(std::move(fn));
}
void poolStats(uint64_t* jobs, uint64_t* workerChunks, uint64_t* callerChunks) {
  Pool& p = pool();
  *jobs = p.statJobs.load();
  *workerChunks = p.statWorkerChunks.load();
  *callerChunks = p.statCallerChunks.load();
}

}  // namespace np
