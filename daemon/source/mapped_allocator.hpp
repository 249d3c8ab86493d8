// An allocator for large buffers filled by short-lived threads (the ImageFolder scan, tar
// indexing): memory straight from mmap, given back by munmap.
#pragma once

#include <sys/mman.h>

#include <atomic>
#include <cstddef>
#include <new>

namespace stoker::source {

// What a thread allocates through it leaves nothing in that thread's malloc arena (glibc
// trims a thread arena only from its top, and only past a threshold that big frees raise, so
// freed buffers of a scan would stay resident). Small blocks come from operator new (a mapping
// wastes a page), and so does every block once kMaxMappings are live (vm.max_map_count is
// 65530 by default: a million tar shards must not exhaust it); a 16-byte header says which.
inline std::atomic<std::size_t> g_mapped_blocks{0};

template <typename T>
struct MappedAllocator {
  using value_type = T;
  static constexpr std::size_t kMinMapped = 16 << 10;
  static constexpr std::size_t kMaxMappings = 16384;
  static constexpr std::size_t kHeader = 16;  // keeps the 16-byte alignment of operator new
  static_assert(alignof(T) <= kHeader);
  MappedAllocator() = default;
  template <typename U>
  MappedAllocator(const MappedAllocator<U>&) {}

  T* allocate(std::size_t n) {
    const std::size_t bytes = n * sizeof(T) + kHeader;
    char* block = nullptr;
    std::size_t mapped = 0;
    if (bytes >= kMinMapped && g_mapped_blocks.fetch_add(1) < kMaxMappings) {
      void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (p != MAP_FAILED) {
        block = static_cast<char*>(p);
        mapped = 1;
      } else {
        g_mapped_blocks.fetch_sub(1);
      }
    } else if (bytes >= kMinMapped) {
      g_mapped_blocks.fetch_sub(1);
    }
    if (block == nullptr) block = static_cast<char*>(::operator new(bytes));
    *reinterpret_cast<std::size_t*>(block) = mapped;
    return reinterpret_cast<T*>(block + kHeader);
  }
  void deallocate(T* p, std::size_t n) {
    char* block = reinterpret_cast<char*>(p) - kHeader;
    if (*reinterpret_cast<std::size_t*>(block) != 0) {
      ::munmap(block, n * sizeof(T) + kHeader);
      g_mapped_blocks.fetch_sub(1);
    } else {
      ::operator delete(block);
    }
  }
  template <typename U>
  bool operator==(const MappedAllocator<U>&) const { return true; }
};

}  // namespace stoker::source
