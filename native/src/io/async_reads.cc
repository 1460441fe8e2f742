#include "io/async_reads.h"

#include <algorithm>

#include <condition_variable>
#include <cstring>
#include <ctime>
#include <deque>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <unordered_map>

#include "threads.h"

namespace np::io {

namespace {

struct Result {
  bool done = false;
  std::string error;
  AsyncDone what{0, 0, 0};
};

// A batch's copies from staging into their slots, once its reads are all back: on the calling
// thread, or (a few KiB each) in chunks of 16 on the compute pool.
void runCopies(const std::vector<AsyncCopy>& c, bool onPool) {
  const auto range = [&](size_t from, size_t to) {
    for (size_t i = from; i < to; i++)
      if (c[i].n) std::memmove(c[i].dst, c[i].src, c[i].n);
  };
  if (!onPool) return range(0, c.size());
  const int64_t perChunk = 16;
  poolRun(((int64_t)c.size() + perChunk - 1) / perChunk, poolGetThreads(), [&](int64_t k) {
    range((size_t)(k * perChunk), std::min(c.size(), (size_t)((k + 1) * perChunk)));
  });
}

double monotonicUs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e6 + (double)(ts.tv_nsec / 1000);
}

class AsyncReads {
 public:
  ~AsyncReads() {
    {
      std::lock_guard<std::mutex> g(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    if (worker_.joinable()) worker_.join();
  }

  uint64_t submit(AsyncJob&& job) {
    std::lock_guard<std::mutex> g(mu_);
    if (!worker_.joinable()) worker_ = std::thread([this] { loop(); });
    const uint64_t t = ++seq_;
    results_.emplace(t, Result{});
    queue_.emplace_back(t, std::move(job));
    cv_.notify_all();
    return t;
  }

  AsyncDone wait(uint64_t ticket) {
    std::unique_lock<std::mutex> g(mu_);
    auto it = results_.find(ticket);
    if (it == results_.end()) throw std::out_of_range("ticket " + std::to_string(ticket) + " is not a batch in flight");
    doneCv_.wait(g, [&] { return it->second.done; });
    Result r = std::move(it->second);
    results_.erase(it);
    if (!r.error.empty()) throw std::runtime_error(r.error);
    return r.what;
  }

 private:
  void loop() {
    std::unique_lock<std::mutex> g(mu_);
    for (;;) {
      cv_.wait(g, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, nothing left
      auto [ticket, job] = std::move(queue_.front());
      queue_.pop_front();
      g.unlock();
      std::string err;
      const uint64_t bytes = job.bytes;
      const double t0 = monotonicUs();
      try {
        job.loader->readBatch(job.reqs);
        runCopies(job.copies, false);  // this lane's thread is not one of the pool's
      } catch (const std::exception& e) {
        err = e.what();
      }
      job = AsyncJob{};  // drop buffer references before reporting done
      const double t1 = monotonicUs();
      g.lock();
      Result& r = results_[ticket];
      r.done = true;
      r.error = std::move(err);
      r.what = AsyncDone{bytes, t0, t1};
      doneCv_.notify_all();
    }
  }

  std::mutex mu_;
  std::condition_variable cv_, doneCv_;
  std::deque<std::pair<uint64_t, AsyncJob>> queue_;
  std::unordered_map<uint64_t, Result> results_;
  uint64_t seq_ = 0;
  bool stop_ = false;
  std::thread worker_;
};

AsyncReads& lane(int i) {
  static AsyncReads lanes[kAsyncLanes];
  return lanes[i];
}

// The caller lane's batches in flight: what each waits to copy, and the buffers it holds.
class CallerReads {
 public:
  uint64_t submit(AsyncJob&& job) {
    const double t0 = monotonicUs();
    // queued now, handed to the kernel by this thread during its next parallel job (threads.h)
    // the loader keeps the requests for the flight; the job keeps its copies and buffers
    const uint64_t batch = job.loader->startBatch(std::move(job.reqs), false);  // throws before anything is kept
    poolDefer([l = job.loader] {
      try {
        l->submitQueued();
      } catch (...) {
        // the ring is marked failed: the batch's wait reports it
      }
    });
    std::lock_guard<std::mutex> g(mu_);
    const uint64_t t = ++seq_;
    jobs_.emplace(t, Pending{std::move(job), batch, t0});
    return t;
  }

  AsyncDone wait(uint64_t ticket) {
    Pending p;
    {
      std::lock_guard<std::mutex> g(mu_);
      auto it = jobs_.find(ticket);
      if (it == jobs_.end()) throw std::out_of_range("ticket " + std::to_string(ticket) + " is not a batch in flight");
      p = std::move(it->second);
      jobs_.erase(it);
    }
    try {
      p.job.loader->finishBatch(p.batch);  // throws the batch's error, its reads all back …
    } catch (...) {
      // … unless the ring failed: reads may still land in the batch's buffers, kept for good
      if (p.job.loader->ringBroken()) {
        std::lock_guard<std::mutex> g(mu_);
        held_.push_back(std::move(p.job.keep));
      }
      throw;
    }
    runCopies(p.job.copies, true);
    return AsyncDone{p.job.bytes, p.t0, monotonicUs()};
  }

 private:
  struct Pending {
    AsyncJob job;
    uint64_t batch = 0;
    double t0 = 0;
  };
  std::mutex mu_;
  std::unordered_map<uint64_t, Pending> jobs_;
  std::vector<std::vector<BufferRef>> held_;
  uint64_t seq_ = 0;
};

CallerReads& callerLane() {
  static CallerReads c;
  return c;
}

constexpr int kTicketLanes = kCallerLane + 1;

}  // namespace

// A ticket is the lane's own sequence number times kTicketLanes, plus the lane.
uint64_t asyncSubmit(AsyncJob&& job, int laneIndex) {
  if (laneIndex < 0 || laneIndex > kCallerLane) throw std::out_of_range("lane " + std::to_string(laneIndex) + " is not 0.." + std::to_string(kCallerLane));
  const uint64_t seq = laneIndex == kCallerLane ? callerLane().submit(std::move(job)) : lane(laneIndex).submit(std::move(job));
  return seq * kTicketLanes + (uint64_t)laneIndex;
}
AsyncDone asyncWait(uint64_t ticket) {
  const int laneIndex = (int)(ticket % kTicketLanes);
  try {
    return laneIndex == kCallerLane ? callerLane().wait(ticket / kTicketLanes) : lane(laneIndex).wait(ticket / kTicketLanes);
  } catch (const std::out_of_range&) {
    throw std::out_of_range("ticket " + std::to_string(ticket) + " is not a batch in flight");
  }
}

}  // namespace np::io
