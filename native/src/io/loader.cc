// Direct-I/O loader: io_uring (liburing) and pread thread-pool backends. See loader.h.
#include "io/loader.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
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
    readUring(reqs);
  else
    readPread(reqs);
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

void Loader::readUring(const std::vector<ReadReq>& reqs) {
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
  const size_t n = reqs.size();
  std::vector<uint64_t> done(n, 0);
  std::vector<size_t> resubmit;  // requests to (re)submit before new ones
  size_t next = 0, inflight = 0, queued = 0;
  std::string err;
  size_t errIdx = SIZE_MAX;
  auto setErr = [&](size_t i, std::string m) {
    if (i < errIdx) {
      errIdx = i;
      err = std::move(m);
    }
  };
  auto prep = [&](size_t i) {
    io_uring_sqe* sqe = io_uring_get_sqe(ring);
    if (!sqe) {  // cannot happen: in flight + queued <= depth = SQ size
      ring_->broken = true;
      throw std::runtime_error(path_ + ": io_uring submission queue full");
    }
    const ReadReq& r = reqs[i];
    const unsigned len = (unsigned)std::min<uint64_t>(r.length - done[i], 0x7ffff000ull);
    uint8_t* dst = r.dst + done[i];
    if (fixed_ && dst >= fixed_->ptr && (size_t)(dst - fixed_->ptr) + len <= fixed_->size)
      io_uring_prep_read_fixed(sqe, fd_, dst, len, r.fileOffset + done[i], 0);
    else
      io_uring_prep_read(sqe, fd_, dst, len, r.fileOffset + done[i]);
    io_uring_sqe_set_data64(sqe, (uint64_t)i);
    queued++;
    inflight++;
  };
  for (;;) {
    while (err.empty() && inflight < qd_ && !resubmit.empty()) {
      prep(resubmit.back());
      resubmit.pop_back();
    }
    while (err.empty() && inflight < qd_ && next < n) {
      const size_t i = next++;
      if (reqs[i].length == 0) continue;
      prep(i);
    }
    if (queued) {
      const int ret = io_uring_submit(ring);
      if (ret >= 0) {
        queued -= std::min<size_t>(queued, (size_t)ret);
      } else if (ret != -EINTR && ret != -EAGAIN && ret != -EBUSY) {
        // The SQEs stay queued in the ring: nothing was submitted, so in-flight count is
        // what was submitted before. Mark the ring unusable rather than guess.
        ring_->broken = true;
        inflight -= queued;
        queued = 0;
        setErr(0, path_ + ": io_uring_submit failed: " + errText(-ret));
      }
    }
    if (inflight == 0) break;
    if (inflight == queued) continue;  // nothing submitted yet (EAGAIN/EBUSY): try again
    // With nothing left to submit, wait for every read in flight at once: one wake-up a batch
    // (on a single-issuer ring the completions are not even posted before). A batch deeper than
    // the ring refills it: after one completion, or on a single-issuer ring (where the wake-ups
    // are what it saves) after half of those in flight. Then take every completion there is.
    const bool more = err.empty() && (next < n || !resubmit.empty());
    const unsigned submitted = (unsigned)(inflight - queued);
    const unsigned want = !more ? submitted : singleIssuer_ ? std::max(1u, submitted / 2) : 1u;
    io_uring_cqe* cqe = nullptr;
    int ret = io_uring_wait_cqe_nr(ring, &cqe, want);
    if (ret == -EINTR || ret == -EAGAIN) continue;
    if (ret < 0) {
      ring_->broken = true;
      throw std::runtime_error(path_ + ": io_uring_wait_cqe failed: " + errText(-ret));
    }
    while (cqe) {
      const size_t i = (size_t)io_uring_cqe_get_data64(cqe);
      const int res = cqe->res;
      io_uring_cqe_seen(ring, cqe);
      inflight--;
      const ReadReq& r = reqs[i];
      if (res < 0) {
        if (res == -EAGAIN || res == -EINTR) {
          if (err.empty()) resubmit.push_back(i);
        } else {
          setErr(i, failMsg(path_, r.fileOffset + done[i], r.length - done[i], -res));
        }
      } else if (res == 0) {
        setErr(i, shortReadMsg(path_, r, done[i]));
      } else {
        done[i] += (uint64_t)res;
        if (done[i] < r.length) {
          if (r.fileOffset + done[i] >= size_)
            setErr(i, shortReadMsg(path_, r, done[i]));
          else if (err.empty())
            resubmit.push_back(i);  // short read inside the file: read the remainder
        }
      }
      cqe = nullptr;
      if (io_uring_peek_cqe(ring, &cqe) != 0) cqe = nullptr;
    }
  }
  if (!err.empty()) throw std::runtime_error(err);
#else
  (void)reqs;
  throw std::runtime_error(path_ + ": io_uring backend unavailable");
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
