// Process-wide buffer registry: buffer id -> native memory (aligned allocation or
// read-only file mapping). Shared across worker threads (each has its own addon
// instance but the same registry). A Buffer is released when its last shared_ptr
// goes: the registry entry (dropped by free()) and one per live JS view.
#pragma once
#include <cstddef>
#include <cstdint>
#include <atomic>
#include <memory>
#include <string>

namespace np {

enum class BufKind { Alloc, Anon, Mapped };  // Anon: large allocations (lazily zeroed mmap)

struct Buffer {
  uint8_t* ptr = nullptr;
  size_t size = 0;
  size_t mapLen = 0;  // bytes actually allocated / mapped
  BufKind kind = BufKind::Alloc;
  // JS views (viewF32/…) holding this buffer: they keep it mapped until the garbage collector
  // finalises them, which for synchronous JS may be long after free()
  std::atomic<int64_t> views{0};
  ~Buffer();
};

using BufferRef = std::shared_ptr<Buffer>;

// Throws std::bad_alloc / std::runtime_error on failure.
int64_t registryAlloc(size_t nbytes);
// Throws std::runtime_error with the path and errno text on failure.
int64_t registryMapFile(const std::string& path, size_t* sizeOut);
// Returns false if the id is unknown. discard: when only JS views still hold a large allocation,
// its pages go back to the system now and those views read zeros from then on.
bool registryFree(int64_t id, bool discard = false);
// nullptr if unknown.
BufferRef registryGet(int64_t id);
size_t registryLiveCount();

}  // namespace np
