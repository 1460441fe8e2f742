#include "registry.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>
#include <stdexcept>
#include <unordered_map>

namespace np {

Buffer::~Buffer() {
  if (!ptr) return;
  if (kind == BufKind::Alloc) {
    std::free(ptr);
  } else if (mapLen > 0) {  // Anon or Mapped
    munmap(ptr, mapLen);
  }
}

namespace {
std::mutex g_mu;
std::unordered_map<int64_t, BufferRef> g_bufs;
int64_t g_next = 1;
// Static storage for zero-length mappings (a 0-byte file cannot be mmapped).
alignas(4096) uint8_t g_empty[64];

int64_t insert(BufferRef b) {
  std::lock_guard<std::mutex> lk(g_mu);
  int64_t id = g_next++;
  g_bufs.emplace(id, std::move(b));
  return id;
}
}  // namespace

constexpr size_t kHugeFrom = size_t(4) << 20;

int64_t registryAlloc(size_t nbytes) {
  constexpr size_t kAlign = 4096;
  // Round up to whole pages (and at least one) plus 64 bytes of slack so SIMD
  // kernels may over-read a few bytes past the end of a tensor safely.
  size_t len = ((nbytes + 64 + kAlign - 1) / kAlign) * kAlign;
  auto b = std::make_shared<Buffer>();
  b->size = nbytes;
  b->mapLen = len;
  if (len >= (size_t(1) << 20)) {
    // Large: anonymous mapping, zero pages committed lazily on first touch.
    void* p = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw std::bad_alloc();
    // Transparent huge pages where the kernel offers them (madvise mode): the sparse kernels
    // walk rows scattered over the neuron cache, ~one row per 4 KiB page, so with small pages
    // every row is a TLB miss.
    if (len >= kHugeFrom) (void)madvise(p, len, MADV_HUGEPAGE);
    b->ptr = static_cast<uint8_t*>(p);
    b->kind = BufKind::Anon;
  } else {
    void* p = std::aligned_alloc(kAlign, len);
    if (!p) throw std::bad_alloc();
    std::memset(p, 0, len);
    b->ptr = static_cast<uint8_t*>(p);
    b->kind = BufKind::Alloc;
  }
  return insert(std::move(b));
}

int64_t registryMapFile(const std::string& path, size_t* sizeOut) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    int e = errno;
    throw std::runtime_error("mapFile: cannot open '" + path + "': " + std::strerror(e));
  }
  struct stat st;
  if (fstat(fd, &st) != 0) {
    int e = errno;
    ::close(fd);
    throw std::runtime_error("mapFile: cannot stat '" + path + "': " + std::strerror(e));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    throw std::runtime_error("mapFile: '" + path + "' is not a regular file");
  }
  size_t size = static_cast<size_t>(st.st_size);
  auto b = std::make_shared<Buffer>();
  b->kind = BufKind::Mapped;
  b->size = size;
  if (size == 0) {
    b->ptr = g_empty;
    b->mapLen = 0;
  } else {
    void* p = mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
      int e = errno;
      ::close(fd);
      throw std::runtime_error("mapFile: mmap of '" + path + "' failed: " + std::strerror(e));
    }
    b->ptr = static_cast<uint8_t*>(p);
    b->mapLen = size;
  }
  ::close(fd);
  *sizeOut = size;
  return insert(std::move(b));
}

bool registryFree(int64_t id, bool discard) {
  BufferRef victim;  // destroyed outside the lock
  std::lock_guard<std::mutex> lk(g_mu);
  auto it = g_bufs.find(id);
  if (it == g_bufs.end()) return false;
  victim = std::move(it->second);
  g_bufs.erase(it);
  // discard: only JS views still hold a large allocation: give its pages back now (the mapping
  // stays, so a stale view reads zeros instead of faulting) rather than when the views are
  // collected. Plain free keeps the contents for live views (code relies on it).
  if (discard && victim->kind == BufKind::Anon && victim->mapLen > 0 && victim.use_count() - 1 == victim->views.load())
    (void)madvise(victim->ptr, victim->mapLen, MADV_DONTNEED);
  return true;
}

BufferRef registryGet(int64_t id) {
  std::lock_guard<std::mutex> lk(g_mu);
  auto it = g_bufs.find(id);
  if (it == g_bufs.end()) return nullptr;
  return it->second;
}

size_t registryLiveCount() {
  std::lock_guard<std::mutex> lk(g_mu);
  return g_bufs.size();
}

}  // namespace np
