// The GPU node's heap policy while remote workers serve it (issue #36).
//
// gRPC reads a worker's results into slices it mallocs from the reading thread's arena and
// frees once the pixels are in the slot. With glibc's defaults the freed top of that arena is
// soon handed back to the kernel (MADV_DONTNEED past M_TRIM_THRESHOLD), so the next message's
// slices fault their pages in again: measured on the 2-core bench, 2-12 page faults per remote
// sample and up to 0.7 ms of node CPU per sample in the worst runs, against ~0.1-0.2 faults and
// ~0.15 ms with trimming held off (docs/PERFORMANCE.md, "Remote workers").
#pragma once

namespace stoker::remote {

// Once per process (later calls do nothing): fixes glibc's mmap threshold at 32 MiB and its
// trim threshold at 64 MiB — the values its own dynamic rule reaches after freeing a 32 MiB
// block (threshold = the freed size, trim = twice it), so allocations below 32 MiB reuse heap
// memory and a heap keeps up to 64 MiB of free top instead of returning it. Process-wide: the
// daemon may hold that much more freed memory per arena it uses. No-op without glibc.
void keep_receive_memory_mapped();

}  // namespace stoker::remote
