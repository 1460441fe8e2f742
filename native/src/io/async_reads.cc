#include "io/async_reads.h"

#include <condition_variable>
#include <cstring>
#include <ctime>
#include <deque>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <unordered_map>

namespace np::io {

namespace {

struct Result {
  bool done = false;
  std::string error;
  AsyncDone what{0, 0, 0};
};

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
        for (const AsyncCopy& c : job.copies)
          if (c.n) std::memmove(c.dst, c.src, c.n);
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

}  // namespace

// A ticket is the lane's own sequence number times kAsyncLanes, plus the lane.
uint64_t asyncSubmit(AsyncJob&& job, int laneIndex) {
  if (laneIndex < 0 || laneIndex >= kAsyncLanes) throw std::out_of_range("lane " + std::to_string(laneIndex) + " is not 0.." + std::to_string(kAsyncLanes - 1));
  return lane(laneIndex).submit(std::move(job)) * kAsyncLanes + (uint64_t)laneIndex;
}
AsyncDone asyncWait(uint64_t ticket) {
  try {
    return lane((int)(ticket % kAsyncLanes)).wait(ticket / kAsyncLanes);
  } catch (const std::out_of_range&) {
    throw std::out_of_range("ticket " + std::to_string(ticket) + " is not a batch in flight");
  }
}

}  // namespace np::io
