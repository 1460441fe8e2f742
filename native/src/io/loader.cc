// Direct-I/O loader: io_uring (liburing) and pread thread-pool backends. See loader.h.
#include "io/loader.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <climits>
#include <cstring>
#include <stdexcept>
#include <unordered_map>

#ifdef NP_HAVE_LIBURING
#include <liburing.h>
#endif

namespace np::io {

namespace {

std::string errText(int e) { return std::string(strerror(e)); }

std::string shortReadMsg(const std::string& path, const ReadReq& r, uint64_t got) {
  return path + ": short read at offset " + std::to_string(r.fileOffset) + ": got " + std::to_string(got) +
         " of " + std::to_string(r.length) + " bytes";
}

std::string failMsg(const std::string& path, uint64_t off, uint64_t len, int e) {
  return path + ": read failed at offset " + std::to_string(off) + " (length " + std::to_string(len) +
         "): " + errText(e);
}

}  // namespace

#ifdef NP_HAVE_LIBURING
struct Loader::Ring {
  io_uring ring;
  bool broken = false;  // a ring-level failure left requests in an unknown state
};
#else
struct Loader::Ring {};
#endif

// A request's user_data: its flight's number (high bits) and its index in the flight (low 24).
constexpr int kIndexBits = 24;

struct Loader::Flight {
  uint64_t seq = 0;
  std::vector<ReadReq> reqs;
  std::vector<uint64_t> done;      // bytes of each request read so far
  std::vector<size_t> resubmit;    // requests to (re)submit before new ones (EAGAIN, short reads)
  size_t next = 0;                 // the first request never queued
  size_t onRing = 0;               // queued or submitted, not completed
  size_t errIdx = SIZE_MAX;
  std::string err;                 // the error of the lowest request that failed
  void setErr(size_t i, std::string m) {
    if (i < errIdx) {
      errIdx = i;
      err = std::move(m);
    }
  }
  // requests still to queue (none after an error: the batch fails once those on the ring are back)
  bool toQueue() const { return err.empty() && (next < reqs.size() || !resubmit.empty()); }
  bool finished() const { return onRing == 0 && !toQueue(); }
};

// The direct-I/O alignment of an O_DIRECT descriptor: one read of kSectorAlign bytes at offset
// kSectorAlign into an address that is kSectorAlign- but not page-aligned. The kernel refuses
// (EINVAL) a request below the file's alignment before it reads anything, so success shows that
// sector-aligned offsets, lengths and addresses work; anything else keeps the page.
static size_t probeAlign(int fd) {
  void* mem = std::aligned_alloc(kDirectAlign, 2 * kDirectAlign);
  if (!mem) return kDirectAlign;
  const ssize_t n = pread(fd, (uint8_t*)mem + kSectorAlign, kSectorAlign, (off_t)kSectorAlign);
  std::free(mem);
  return n >= 0 ? kSectorAlign : kDirectAlign;
}

Loader::Loader(const std::string& path, const LoaderOpts& opts) : path_(path), direct_(opts.directIO) {
  qd_ = std::max(1u, opts.queueDepth);
  int flags = O_RDONLY | O_CLOEXEC;
  if (direct_) flags |= O_DIRECT;
  fd_ = ::open(path.c_str(), flags);
  if (fd_ < 0) {
    const int e = errno;
    if (direct_ && e == EINVAL)
      throw std::runtime_error(path + ": cannot open with O_DIRECT (the filesystem refuses direct I/O): " +
                               errText(e));
    throw std::runtime_error(path + ": cannot open: " + errText(e));
  }
  struct stat st;
  if (fstat(fd_, &st) != 0) {
    const int e = errno;
    ::close(fd_);
    throw std::runtime_error(path + ": cannot stat: " + errText(e));
  }
  if (S_ISDIR(st.st_mode)) {
    ::close(fd_);
    throw std::runtime_error(path + ": is a directory");
  }
  const off_t end = lseek(fd_, 0, SEEK_END);
  size_ = end > 0 ? (uint64_t)end : (uint64_t)st.st_size;
  if (direct_) align_ = probeAlign(fd_);

  bool wantUring = opts.backend == "uring" || opts.backend == "auto";
  if (wantUring) {
#ifdef NP_HAVE_LIBURING
    auto r = std::make_unique<Ring>();
    int ret = -EINVAL;
    if (opts.singleIssuer) {
      // disabled until its first reader enables it (and becomes the one issuer); buffers can be
      // registered from the opening thread meanwhile
      io_uring_params p{};
      p.flags = IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN | IORING_SETUP_R_DISABLED;
      ret = io_uring_queue_init_params(qd_, &r->ring, &p);
      if (ret == 0)
        singleIssuer_ = true;
      else
        note_ = "single-issuer ring refused: " + errText(-ret);
    }
    if (!singleIssuer_) ret = io_uring_queue_init(qd_, &r->ring, 0);
    if (ret == 0) {
      ring_ = std::move(r);
      backend_ = Backend::Uring;
    } else if (opts.backend == "uring") {
      ::close(fd_);
      throw std::runtime_error(path + ": io_uring setup failed (queue depth " + std::to_string(qd_) +
                               "): " + errText(-ret));
    } else {
      note_ = "io_uring setup failed: " + errText(-ret);
    }
#else
    if (opts.backend == "uring") {
      ::close(fd_);
      throw std::runtime_error(path + ": io_uring backend unavailable (built without liburing)");
    }
    note_ = "built without liburing";
#endif
  }
  if (backend_ == Backend::Pread) {
    nThreads_ = opts.threads ? opts.threads : std::min(qd_, 16u);
    nThreads_ = std::max(1u, std::min(nThreads_, qd_));  // never more reads in flight than the depth
    // The calling thread takes part in every batch, so the pool has nThreads_-1 workers.
    for (unsigned i = 1; i < nThreads_; i++) workers_.emplace_back([this] { workerLoop(); });
  }
}

Loader::~Loader() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  for (auto& t : workers_) t.join();
#ifdef NP_HAVE_LIBURING
  if (ring_) io_uring_queue_exit(&ring_->ring);
#endif
  if (fd_ >= 0) ::close(fd_);
}

void Loader::readBatch(const std::vector<ReadReq>& reqs) {
  if (reqs.empty()) return;
  std::lock_guard<std::mutex> lk(batchMu_);
  if (backend_ == Backend::Uring)
    uringFinish(uringStart(reqs, true));
  else
    readPread(reqs);
}

bool Loader::ringBroken() const {
#ifdef NP_HAVE_LIBURING
  return ring_ && ring_->broken;
#else
  return false;
#endif
}

uint64_t Loader::startBatch(std::vector<ReadReq> reqs, bool submit) {
  if (backend_ != Backend::Uring) throw std::logic_error(path_ + ": batches finished later need the io_uring backend");
  std::lock_guard<std::mutex> lk(batchMu_);
  return uringStart(std::move(reqs), submit);
}

void Loader::submitQueued() {
  if (backend_ != Backend::Uring) return;
  std::lock_guard<std::mutex> lk(batchMu_);
  if (ringBroken()) return;
  uringPump(true);
}

void Loader::finishBatch(uint64_t batch) {
  if (backend_ != Backend::Uring) throw std::logic_error(path_ + ": batches finished later need the io_uring backend");
  std::lock_guard<std::mutex> lk(batchMu_);
  uringFinish(batch);
}

// ---- pread backend -----------------------------------------------------------------------

std::string Loader::preadOne(const ReadReq& r) const {
  uint64_t done = 0;
  int zeroRetries = 0;
  while (done < r.length) {
    const uint64_t off = r.fileOffset + done;
    const size_t want = (size_t)std::min<uint64_t>(r.length - done, 0x7ffff000ull);
    const ssize_t got = ::pread(fd_, r.dst + done, want, (off_t)off);
    if (got < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      return failMsg(path_, off, r.length - done, errno);
    }
    if (got == 0) {
      // EOF (or a transient zero read before the known end: retry a few times).
      if (off < size_ && ++zeroRetries < 3) continue;
      return shortReadMsg(path_, r, done);
    }
    done += (uint64_t)got;
    if (done < r.length && r.fileOffset + done >= size_) return shortReadMsg(path_, r, done);
  }
  return {};
}

void Loader::workerLoop() {
  std::unique_lock<std::mutex> lk(mu_);
  uint64_t seen = 0;
  for (;;) {
    cv_.wait(lk, [&] { return stop_ || (job_ != nullptr && jobSeq_ != seen); });
    if (stop_) return;
    seen = jobSeq_;
    active_++;
    const std::vector<ReadReq>* job = job_;
    while (next_ < job->size() && err_.empty()) {
      const size_t i = next_++;
      lk.unlock();
      std::string e = preadOne((*job)[i]);
      lk.lock();
      if (!e.empty() && i < errIdx_) {
        err_ = std::move(e);
        errIdx_ = i;
      }
    }
    if (--active_ == 0) doneCv_.notify_all();
  }
}

void Loader::readPread(const std::vector<ReadReq>& reqs) {
  std::unique_lock<std::mutex> lk(mu_);
  job_ = &reqs;
  next_ = 0;
  err_.clear();
  errIdx_ = SIZE_MAX;
  jobSeq_++;
  active_++;
  if (!workers_.empty() && reqs.size() > 1) cv_.notify_all();
  while (next_ < reqs.size() && err_.empty()) {
    const size_t i = next_++;
    lk.unlock();
    std::string e = preadOne(reqs[i]);
    lk.lock();
    if (!e.empty() && i < errIdx_) {
      err_ = std::move(e);
      errIdx_ = i;
    }
  }
  active_--;
  doneCv_.wait(lk, [&] { return active_ == 0; });
  job_ = nullptr;
  if (!err_.empty()) {
    std::string e = std::move(err_);
    err_.clear();
    throw std::runtime_error(e);
  }
}

// ---- io_uring backend --------------------------------------------------------------------

uint64_t Loader::uringStart(std::vector<ReadReq> reqs, bool submit) {
#ifdef NP_HAVE_LIBURING
  io_uring* ring = &ring_->ring;
  if (ring_->broken) throw std::runtime_error(path_ + ": io_uring is in a failed state; reopen the loader");
  if (singleIssuer_) {
    if (!enabled_) {
      // the raw syscall: Debian's liburing 2.3 declares io_uring_enable_rings but does not export it
      const int ret = (int)syscall(__NR_io_uring_register, ring->ring_fd, IORING_REGISTER_ENABLE_RINGS, nullptr, 0) < 0 ? -errno : 0;
      if (ret < 0) {
        ring_->broken = true;
        throw std::runtime_error(path_ + ": io_uring_enable_rings failed: " + errText(-ret));
      }
      enabled_ = true;
      issuer_ = std::this_thread::get_id();
    } else if (issuer_ != std::this_thread::get_id()) {
      throw std::runtime_error(path_ + ": this loader's io_uring ring belongs to the thread that read first (single issuer); read from that thread only");
    }
  }
  if (reqs.size() >= ((size_t)1 << kIndexBits))
    throw std::out_of_range(path_ + ": a batch of " + std::to_string(reqs.size()) + " requests exceeds " + std::to_string(((size_t)1 << kIndexBits) - 1));
  auto f = std::make_unique<Flight>();
  const uint64_t seq = f->seq = ++flightSeq_;
  f->done.assign(reqs.size(), 0);
  f->reqs = std::move(reqs);
  flights_.push_back(std::move(f));
  uringPump(submit);
  return seq;
#else
  (void)reqs;
  throw std::runtime_error(path_ + ": io_uring backend unavailable");
#endif
}

void Loader::uringPrep(Flight& f, size_t i) {
#ifdef NP_HAVE_LIBURING
  io_uring* ring = &ring_->ring;
  io_uring_sqe* sqe = io_uring_get_sqe(ring);
  if (!sqe) {  // cannot happen: queued + submitted <= depth = SQ size
    ring_->broken = true;
    throw std::runtime_error(path_ + ": io_uring submission queue full");
  }
  const ReadReq& r = f.reqs[i];
  const unsigned len = (unsigned)std::min<uint64_t>(r.length - f.done[i], 0x7ffff000ull);
  uint8_t* dst = r.dst + f.done[i];
  if (fixed_ && dst >= fixed_->ptr && (size_t)(dst - fixed_->ptr) + len <= fixed_->size)
    io_uring_prep_read_fixed(sqe, fd_, dst, len, r.fileOffset + f.done[i], 0);
  else
    io_uring_prep_read(sqe, fd_, dst, len, r.fileOffset + f.done[i]);
  io_uring_sqe_set_data64(sqe, (f.seq << kIndexBits) | (uint64_t)i);
  queued_++;
  f.onRing++;
#else
  (void)f;
  (void)i;
#endif
}

void Loader::uringPump(bool submit) {
#ifdef NP_HAVE_LIBURING
  for (auto& fp : flights_) {
    Flight& f = *fp;
    while (f.err.empty() && queued_ + submitted_ < qd_ && !f.resubmit.empty()) {
      uringPrep(f, f.resubmit.back());
      f.resubmit.pop_back();
    }
    while (f.err.empty() && queued_ + submitted_ < qd_ && f.next < f.reqs.size()) {
      const size_t i = f.next++;
      if (f.reqs[i].length == 0) continue;
      uringPrep(f, i);
    }
  }
  if (!queued_ || !submit) return;
  const int ret = io_uring_submit(&ring_->ring);
  if (ret >= 0) {
    const size_t n = std::min<size_t>(queued_, (size_t)ret);
    queued_ -= n;
    submitted_ += n;
  } else if (ret != -EINTR && ret != -EAGAIN && ret != -EBUSY) {
    // The SQEs stay queued in the ring and nothing was submitted: mark the ring unusable rather
    // than guess what the kernel holds
    ring_->broken = true;
    throw std::runtime_error(path_ + ": io_uring_submit failed: " + errText(-ret));
  }
#endif
}

void Loader::uringReap(unsigned want) {
#ifdef NP_HAVE_LIBURING
  io_uring* ring = &ring_->ring;
  io_uring_cqe* cqe = nullptr;
  const int ret = io_uring_wait_cqe_nr(ring, &cqe, want);
  if (ret == -EINTR || ret == -EAGAIN) return;
  if (ret < 0) {
    ring_->broken = true;
    throw std::runtime_error(path_ + ": io_uring_wait_cqe failed: " + errText(-ret));
  }
  while (cqe) {
    const uint64_t ud = io_uring_cqe_get_data64(cqe);
    const int res = cqe->res;
    io_uring_cqe_seen(ring, cqe);
    submitted_--;
    const uint64_t seq = ud >> kIndexBits;
    const size_t i = (size_t)(ud & (((uint64_t)1 << kIndexBits) - 1));
    Flight* fp = nullptr;
    for (auto& g : flights_)
      if (g->seq == seq) fp = g.get();
    if (!fp || i >= fp->reqs.size()) {  // cannot happen: a flight leaves only with nothing on the ring
      ring_->broken = true;
      throw std::runtime_error(path_ + ": io_uring completion for no batch in flight");
    }
    Flight& f = *fp;
    f.onRing--;
    const ReadReq& r = f.reqs[i];
    if (res < 0) {
      if (res == -EAGAIN || res == -EINTR) {
        if (f.err.empty()) f.resubmit.push_back(i);
      } else {
        f.setErr(i, failMsg(path_, r.fileOffset + f.done[i], r.length - f.done[i], -res));
      }
    } else if (res == 0) {
      f.setErr(i, shortReadMsg(path_, r, f.done[i]));
    } else {
      f.done[i] += (uint64_t)res;
      if (f.done[i] < r.length) {
        if (r.fileOffset + f.done[i] >= size_)
          f.setErr(i, shortReadMsg(path_, r, f.done[i]));
        else if (f.err.empty())
          f.resubmit.push_back(i);  // short read inside the file: read the remainder
      }
    }
    cqe = nullptr;
    if (io_uring_peek_cqe(ring, &cqe) != 0) cqe = nullptr;
  }
#else
  (void)want;
#endif
}

void Loader::uringFinish(uint64_t batch) {
#ifdef NP_HAVE_LIBURING
  auto it = std::find_if(flights_.begin(), flights_.end(), [&](const auto& f) { return f->seq == batch; });
  if (it == flights_.end()) throw std::out_of_range(path_ + ": batch " + std::to_string(batch) + " is not in flight");
  Flight& f = **it;
  if (ring_->broken) {
    // what the kernel still holds is unknown: the batch fails, and leaves
    flights_.erase(it);
    throw std::runtime_error(path_ + ": io_uring is in a failed state; reopen the loader");
  }
  while (!f.finished()) {
    uringPump();
    if (queued_) continue;  // nothing submitted (EAGAIN/EBUSY): try again
    if (f.finished()) break;
    // Wait for this batch's requests on the ring and those of the batches before it (they went
    // first): one wake-up a batch (on a single-issuer ring the completions are not even posted
    // before). A batch deeper than the ring refills it: after one completion, or on a
    // single-issuer ring (where the wake-ups are what it saves) after half of those submitted.
    size_t ahead = 0;
    for (auto& g : flights_) {
      ahead += g->onRing;
      if (g.get() == &f) break;
    }
    const unsigned want = (unsigned)std::max<size_t>(1, !f.toQueue() ? std::min(ahead, submitted_) : singleIssuer_ ? submitted_ / 2 : 1);
    uringReap(want);
  }
  std::string err = std::move(f.err);
  flights_.erase(std::find_if(flights_.begin(), flights_.end(), [&](const auto& g) { return g->seq == batch; }));
  if (!err.empty()) throw std::runtime_error(err);
#else
  (void)batch;
#endif
}

std::string Loader::fixBuffer(BufferRef buf) {
  std::lock_guard<std::mutex> lk(batchMu_);
  if (backend_ != Backend::Uring) return "the pread backend has no fixed buffers";
#ifdef NP_HAVE_LIBURING
  if (!buf || buf->size == 0) return "no buffer";
  if (buf->size > (size_t)1 << 30) return "buffers over 1 GiB cannot be registered";
  io_uring* ring = &ring_->ring;
  if (fixed_) {
    io_uring_unregister_buffers(ring);
    fixed_.reset();
  }
  iovec iov{buf->ptr, buf->size};
  const int ret = io_uring_register_buffers(ring, &iov, 1);
  if (ret == -ENOMEM) return "io_uring_register_buffers: " + std::to_string(buf->size) + " bytes exceed RLIMIT_MEMLOCK (ulimit -l)";
  if (ret < 0) return "io_uring_register_buffers: " + errText(-ret);
  fixed_ = std::move(buf);
  return {};
#else
  (void)buf;
  return "built without liburing";  // not reached: without liburing every loader is pread
#endif
}

// ---- table ---------------------------------------------------------------------------

namespace {
std::mutex gMu;
std::unordered_map<int64_t, std::shared_ptr<Loader>> gLoaders;
int64_t gNext = 1;
}  // namespace

int64_t loaderOpen(const std::string& path, const LoaderOpts& opts) {
  auto l = std::make_shared<Loader>(path, opts);
  std::lock_guard<std::mutex> lk(gMu);
  const int64_t id = gNext++;
  gLoaders.emplace(id, std::move(l));
  return id;
}

std::shared_ptr<Loader> loaderGet(int64_t id) {
  std::lock_guard<std::mutex> lk(gMu);
  auto it = gLoaders.find(id);
  return it == gLoaders.end() ? nullptr : it->second;
}

bool loaderClose(int64_t id) {
  std::shared_ptr<Loader> l;
  {
    std::lock_guard<std::mutex> lk(gMu);
    auto it = gLoaders.find(id);
    if (it == gLoaders.end()) return false;
    l = std::move(it->second);
    gLoaders.erase(it);
  }
  return true;  // destroyed here (outside the lock) unless a batch still holds it
}

}  // namespace np::io
