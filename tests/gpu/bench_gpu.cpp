// stoker_bench_gpu [--strict] [--batch N]: the GPU figures of device delivery, on device 0,
// through the same `cuda` backend stokerd uses (run by scripts/gpu-check.sh).
//  1. H2D: a batch copied from POSIX shared memory page-locked with register_host (what
//     stokerd does with a job's segment) as a ratio of the same copy from page-locked
//     anonymous memory (the pinned cudaMemcpyAsync peak). Target >= 0.9.
//  2. Normalize: the table kernel (uint8 in, float32/float16 out, NCHW/NHWC), bytes read +
//     written per second, as a ratio of a device-to-device copy of the output size (bytes read
//     + written). Target >= 0.8.
// Exit status: 0 done, 77 no CUDA device, 1 error, 2 a target missed (with --strict).
// Not measured here (see docs/GPU.md): ready -> usable torch tensor latency through the
// daemon, and images/s against torchvision's DataLoader (both need the daemon and torch).
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "device/cuda_driver_api.hpp"
#include "gpu_support.hpp"

using namespace stoker;
using Clock = std::chrono::steady_clock;

namespace {

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "stoker_bench_gpu: %s\n", what.c_str());
  std::exit(1);
}

// Seconds per run of `op` (queued `reps` times on `s`, then synchronized), best of 3.
template <typename Op>
double time_per_run(device::Backend& b, device::StreamId s, int reps, Op op) {
  double best = 1e30;
  for (int round = 0; round < 3; ++round) {
    const auto t0 = Clock::now();
    for (int i = 0; i < reps; ++i) op();
    if (auto st = b.synchronize_stream(0, s); !st) die(st.message());
    best = std::min(best, std::chrono::duration<double>(Clock::now() - t0).count() / reps);
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  bool strict = false;
  std::size_t batch = 256;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--strict") == 0) strict = true;
    else if (std::strcmp(argv[i], "--batch") == 0 && i + 1 < argc) batch = std::strtoull(argv[++i], nullptr, 10);
  }
  auto b = gputest::cuda_or_skip();
  const auto devs = b->devices().devices;
  std::printf("device 0: %s %s; %s\n", devs.at(0).name.c_str(), device::uuid_string(devs[0].uuid).c_str(),
              b->version().c_str());
  device::StreamId s = 0;
  if (auto made = b->create_stream(0); made) {
    s = *made;
  } else {
    die(made.status().message());
  }
  const std::uint32_t h = 224, w = 224, c = 3;
  const std::size_t image = std::size_t{h} * w * c;
  const std::size_t bytes = image * batch;
  int missed = 0;

  // 1. H2D from a registered shared-memory segment vs from registered anonymous memory.
  const std::string name = "/stoker-bench-gpu-" + std::to_string(::getpid());
  const int fd = ::shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  if (fd < 0 || ::ftruncate(fd, static_cast<off_t>(bytes)) != 0) die("shm_open/ftruncate failed");
  void* shm = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ::close(fd);
  ::shm_unlink(name.c_str());
  void* anon = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (shm == MAP_FAILED || anon == MAP_FAILED) die("mmap failed");
  std::memset(shm, 7, bytes);
  std::memset(anon, 7, bytes);
  if (auto st = b->register_host(0, shm, bytes, true); !st) die(st.message());
  if (auto st = b->register_host(0, anon, bytes, false); !st) die(st.message());
  device::DeviceBuffer slot, out;
  for (auto [buf, size] : {std::pair{&slot, bytes}, std::pair{&out, bytes * 4}}) {
    auto made = b->allocate(0, size);
    if (!made) die(made.status().message());
    *buf = *made;
  }
  const double t_shm = time_per_run(*b, s, 20, [&] {
    if (auto st = b->copy_to_device(s, slot, 0, shm, bytes); !st) die(st.message());
  });
  const double t_anon = time_per_run(*b, s, 20, [&] {
    if (auto st = b->copy_to_device(s, slot, 0, anon, bytes); !st) die(st.message());
  });
  const double h2d = t_anon / t_shm;
  std::printf("H2D batch of %zu images (%.1f MB): segment %.2f GB/s, pinned peak %.2f GB/s, ratio %.3f (target >= 0.9)%s\n",
              batch, bytes / 1e6, bytes / t_shm / 1e9, bytes / t_anon / 1e9, h2d, h2d >= 0.9 ? "" : "  MISSED");
  missed += h2d < 0.9;

  // 2. Normalize vs a device-to-device copy of the output.
  const auto loaded = device::cu::load_driver();
  if (!loaded) die(loaded.status().message());
  const device::cu::DriverApi* api = *loaded;
  device::NormalizeSpec spec;
  spec.channels = c;
  spec.height = h;
  spec.width = w;
  for (std::uint32_t dtype : {3u, 2u}) {
    for (std::uint32_t layout : {1u, 2u}) {
      spec.out_dtype = dtype;
      spec.layout = layout;
      const std::size_t out_bytes = bytes * (dtype == 2 ? 2 : 4);
      const double t_norm = time_per_run(*b, s, 20, [&] {
        if (auto st = b->normalize(s, out, 0, slot, 0, static_cast<std::uint32_t>(batch), spec); !st) die(st.message());
      });
      // The D2D reference inside the backend's context (pushed by a no-op call first).
      const double t_copy = time_per_run(*b, s, 20, [&] {
        device::cu::CUcontext ctx = nullptr;
        device::cu::CUdevice d = 0;
        api->cuDeviceGet(&d, 0);
        api->cuDevicePrimaryCtxRetain(&ctx, d);
        api->cuCtxPushCurrent(ctx);
        const auto src = reinterpret_cast<device::cu::CUdeviceptr>(out.ptr);
        api->cuMemcpyDtoDAsync(src + out_bytes / 2, src, out_bytes / 2, reinterpret_cast<device::cu::CUstream>(s));
        api->cuCtxPopCurrent(&ctx);
        api->cuDevicePrimaryCtxRelease(d);
      });
      // Both as bytes moved: normalize reads `bytes`, writes out_bytes; the copy reads and
      // writes out_bytes / 2 each.
      const double bw_norm = (bytes + out_bytes) / t_norm, bw_copy = out_bytes / t_copy;
      const double ratio = bw_norm / bw_copy;
      std::printf("normalize %s %s: %.0f GB/s, D2D copy %.0f GB/s, ratio %.3f (target >= 0.8)%s\n",
                  dtype == 3 ? "float32" : "float16", layout == 1 ? "NCHW" : "NHWC", bw_norm / 1e9,
                  bw_copy / 1e9, ratio, ratio >= 0.8 ? "" : "  MISSED");
      missed += ratio < 0.8;
    }
  }
  b->unregister_host(0, shm);
  b->unregister_host(0, anon);
  b->free(slot);
  b->free(out);
  b->destroy_stream(0, s);
  std::printf("targets missed: %d\n", missed);
  return strict && missed > 0 ? 2 : 0;
}
