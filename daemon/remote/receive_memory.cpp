#include "remote/receive_memory.hpp"

#include <mutex>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace stoker::remote {

void keep_receive_memory_mapped() {
#if defined(__GLIBC__)
  static std::once_flag once;
  std::call_once(once, [] {
    // Setting either also stops glibc's dynamic adjustment, so both are set, together, to the
    // pair that adjustment would settle on (receive_memory.hpp).
    mallopt(M_MMAP_THRESHOLD, 32 << 20);
    mallopt(M_TRIM_THRESHOLD, 64 << 20);
  });
#endif
}

}  // namespace stoker::remote
