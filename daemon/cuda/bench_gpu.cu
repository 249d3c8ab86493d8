// stoker_bench_gpu [--strict] [--batch N]: the GPU figures of device delivery, in one run, on
// device 0 (run by scripts/gpu-check.sh).
//  1. H2D throughput of the batch path (shared memory registered with cudaHostRegister ->
//     device slot, DeviceExporter::copy_and_publish with normalize off) as a ratio of plain
//     cudaMemcpy from cudaMallocHost memory; target >= 0.9.
//  2. Normalize kernel (uint8 in, float32 out, NCHW) bandwidth as a ratio of a device-to-device
//     cudaMemcpy, both counted as bytes read + written; target >= 0.8.
//  3. Publish -> import latency: from the daemon's event record (copy_and_publish returned)
//     to cudaStreamWaitEvent having been queued in another process (DeviceImporter::map,
//     handles cached, the wake-up over a Unix socket as stokerd's control socket does);
//     median microseconds; target <= 50.
// Exit status: 0 done, 77 no CUDA device, 1 error, 2 a target missed (with --strict).
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fcntl.h>
#include <spawn.h>
#include <string>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

#include <cuda_runtime.h>

#include "cuda/device_exporter.hpp"
#include "cuda/device_importer.hpp"
#include "cuda/normalize_kernel.cuh"

extern char** environ;

namespace {

using stoker::cuda::DeviceExporter;
using stoker::cuda::DeviceImporter;
using stoker::cuda::DeviceOutputSpec;
using stoker::cuda::RingKey;

#define CK(x)                                                                                        \
  do {                                                                                               \
    const cudaError_t e_ = (x);                                                                      \
    if (e_ != cudaSuccess) {                                                                         \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_));        \
      std::exit(1);                                                                                  \
    }                                                                                                \
  } while (0)

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "stoker_bench_gpu: %s\n", what.c_str());
  std::exit(1);
}

std::int64_t now_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);  // system-wide: comparable across processes
  return static_cast<std::int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

double seconds_since(std::int64_t t0) { return (now_ns() - t0) * 1e-9; }

struct LatencyMsg {
  stoker::proto::SlotHeader header;
  std::int64_t published_ns;
  std::int32_t quit;
};
struct LatencyReply {
  std::int64_t waited_ns;  // cudaStreamWaitEvent queued
  std::int64_t done_ns;    // the peer's stream passed the wait (host observed)
  std::int32_t ok;
};

// The trainer's side of figure 3: a separate, exec'ed process.
int run_peer(int sock) {
  std::string why;
  auto importer = DeviceImporter::create(0, why);
  std::uint8_t uuid[16] = {};
  if (!importer || !DeviceImporter::device_uuid(0, uuid, why)) die("peer: " + why);
  cudaStream_t stream;
  CK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  if (send(sock, uuid, sizeof uuid, 0) != sizeof uuid) return 1;
  for (;;) {
    LatencyMsg m{};
    if (recv(sock, &m, sizeof m, 0) != sizeof m || m.quit != 0) break;
    LatencyReply r{};
    r.ok = importer->map(m.header, 1, stream, why) != nullptr;
    r.waited_ns = now_ns();
    r.ok = r.ok && importer->finish_reading(stream, why);
    r.done_ns = now_ns();
    if (!r.ok) std::fprintf(stderr, "peer: %s\n", why.c_str());
    if (send(sock, &r, sizeof r, 0) != sizeof r) return 1;
  }
  return 0;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}
double percentile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  return v[static_cast<std::size_t>(p * (v.size() - 1))];
}

// Shared memory like the job's segment (POSIX shm, MAP_SHARED), filled.
std::uint8_t* map_shared(std::size_t bytes) {
  const std::string name = "/stoker-bench-gpu-" + std::to_string(getpid());
  const int fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  if (fd < 0) die("shm_open: " + std::string(std::strerror(errno)));
  shm_unlink(name.c_str());
  if (ftruncate(fd, static_cast<off_t>(bytes)) != 0) die("ftruncate of the shared memory");
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (p == MAP_FAILED) die("mmap of the shared memory");
  std::memset(p, 0x5a, bytes);
  return static_cast<std::uint8_t*>(p);
}

struct Verdict {
  bool strict = false;
  bool missed = false;
  void check(const char* name, double value, double target, bool higher_is_better) {
    const bool ok = higher_is_better ? value >= target : value <= target;
    std::printf("  -> %s %s (target %s %.2f)\n", name, ok ? "MEETS" : "MISSES", higher_is_better ? ">=" : "<=", target);
    missed = missed || !ok;
  }
};

}  // namespace

int main(int argc, char** argv) {
  if (argc == 3 && std::strcmp(argv[1], "--peer") == 0) return run_peer(std::atoi(argv[2]));
  Verdict verdict;
  std::uint32_t batch = 256;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--strict") == 0) {
      verdict.strict = true;
    } else if (std::strcmp(argv[i], "--batch") == 0 && i + 1 < argc) {
      batch = static_cast<std::uint32_t>(std::atoi(argv[++i]));
    } else {
      std::fprintf(stderr, "usage: %s [--strict] [--batch N]\n", argv[0]);
      return 1;
    }
  }
  std::string why;
  auto exporter = DeviceExporter::create(why);
  if (!exporter) {
    std::printf("SKIP: %s\n", why.c_str());
    return 77;
  }
  const int dev = 0;
  CK(cudaSetDevice(dev));
  cudaDeviceProp prop{};
  CK(cudaGetDeviceProperties(&prop, dev));
  int driver = 0, runtime = 0;
  cudaDriverGetVersion(&driver);
  cudaRuntimeGetVersion(&runtime);
  std::printf("gpu: %s\n", exporter->describe_device(dev).c_str());
  std::printf("compute capability %d.%d, %d SMs, %.1f GiB, driver %d, runtime %d\n", prop.major, prop.minor,
              prop.multiProcessorCount, prop.totalGlobalMem / double(1 << 30), driver, runtime);

  const std::uint32_t c = 3, h = 224, w = 224;
  const std::size_t bytes = std::size_t{batch} * c * h * w;  // one uint8 batch
  std::printf("batch: %u x %ux%ux%u uint8 = %.1f MB\n\n", batch, c, h, w, bytes / 1e6);

  // ---- 1. H2D: plain pinned cudaMemcpy vs the batch path.
  const int reps = 40;
  void* pinned = nullptr;
  void* dev_buf = nullptr;
  CK(cudaMallocHost(&pinned, bytes));
  CK(cudaMalloc(&dev_buf, bytes * 4));
  std::memset(pinned, 0x5a, bytes);
  for (int i = 0; i < 3; ++i) CK(cudaMemcpy(dev_buf, pinned, bytes, cudaMemcpyHostToDevice));
  std::int64_t t0 = now_ns();
  for (int i = 0; i < reps; ++i) CK(cudaMemcpy(dev_buf, pinned, bytes, cudaMemcpyHostToDevice));
  const double plain = bytes * double(reps) / seconds_since(t0) / 1e9;

  const std::uint32_t slots = 4;
  std::uint8_t* shm = map_shared(bytes * slots);
  if (!exporter->register_host(shm, bytes * slots, why)) die(why);
  const RingKey ring{0, 0};
  if (!exporter->allocate_ring(ring, dev, bytes * 4, slots, why)) die(why);
  stoker::proto::SlotHeader header{};
  const DeviceOutputSpec verbatim;
  auto run_path = [&](const DeviceOutputSpec& spec, int n) {
    for (int i = 0; i < n; ++i) {
      const std::uint32_t s = static_cast<std::uint32_t>(i) % slots;
      if (!exporter->copy_and_publish(ring, s, shm + bytes * s, bytes, batch, spec, &header, why)) die(why);
    }
    for (std::uint32_t s = 0; s < slots; ++s) {
      if (!exporter->wait_copied(ring, s, why)) die(why);
    }
  };
  run_path(verbatim, 4);
  t0 = now_ns();
  run_path(verbatim, reps);
  const double path = bytes * double(reps) / seconds_since(t0) / 1e9;
  std::printf("1. H2D plain pinned cudaMemcpy     %7.2f GB/s\n", plain);
  std::printf("   H2D batch path (registered shm) %7.2f GB/s\n", path);
  std::printf("   ratio %.3f\n", path / plain);
  verdict.check("h2d_ratio", path / plain, 0.9, true);

  DeviceOutputSpec norm;
  norm.normalize = true;
  norm.out_dtype = stoker::proto::DType::kFloat32;
  norm.height = h;
  norm.width = w;
  norm.mean = {0.485f, 0.456f, 0.406f, 0};
  norm.stddev = {0.229f, 0.224f, 0.225f, 1};
  run_path(norm, 4);
  t0 = now_ns();
  run_path(norm, reps);
  const double per_batch_ms = seconds_since(t0) * 1e3 / reps;
  std::printf("   batch path with device normalize (uint8 over PCIe, float32 out): %.2f ms/batch, %.2f GB/s of uint8\n\n",
              per_batch_ms, bytes / (per_batch_ms * 1e-3) / 1e9);

  // ---- 2. Normalize kernel vs D2D copy (bytes read + written per second).
  void* dev_in = nullptr;
  void* dev_copy = nullptr;
  CK(cudaMalloc(&dev_in, bytes));
  CK(cudaMalloc(&dev_copy, bytes * 4));
  CK(cudaMemset(dev_in, 7, bytes));
  cudaStream_t stream;
  CK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cudaEvent_t ev0, ev1;
  CK(cudaEventCreate(&ev0));
  CK(cudaEventCreate(&ev1));
  auto time_ms = [&](auto&& body, int n) {
    for (int i = 0; i < 3; ++i) body();
    CK(cudaEventRecord(ev0, stream));
    for (int i = 0; i < n; ++i) body();
    CK(cudaEventRecord(ev1, stream));
    CK(cudaEventSynchronize(ev1));
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, ev0, ev1));
    return double(ms) / n;
  };
  const int kreps = 100;
  const double d2d_ms = time_ms([&] { CK(cudaMemcpyAsync(dev_copy, dev_buf, bytes * 4, cudaMemcpyDeviceToDevice, stream)); }, kreps);
  const double d2d = 2.0 * 4 * bytes / (d2d_ms * 1e-3) / 1e9;
  std::printf("2. D2D cudaMemcpy (%.0f MB)          %7.1f GB/s read+write\n", 4 * bytes / 1e6, d2d);
  double nchw_f32_ratio = 0;
  for (int variant = 0; variant < 4; ++variant) {
    stoker::cuda::NormalizeArgs a;
    a.images = batch;
    a.channels = c;
    a.pixels = std::size_t{h} * w;
    a.nhwc = (variant & 2) != 0;
    a.out_half = (variant & 1) != 0;
    for (int i = 0; i < 3; ++i) {
      a.mean[i] = norm.mean[i];
      a.stddev[i] = norm.stddev[i];
    }
    const double ms = time_ms([&] { CK(stoker::cuda::launch_normalize(static_cast<std::uint8_t*>(dev_in), dev_buf, a, stream)); }, kreps);
    const double gbps = (1.0 + (a.out_half ? 2 : 4)) * bytes / (ms * 1e-3) / 1e9;
    std::printf("   normalize %s -> %s            %7.1f GB/s read+write, %.3f ms/batch, ratio %.3f\n",
                a.nhwc ? "NHWC" : "NCHW", a.out_half ? "float16" : "float32", gbps, ms, gbps / d2d);
    if (variant == 0) nchw_f32_ratio = gbps / d2d;
  }
  verdict.check("normalize_ratio (NCHW float32)", nchw_f32_ratio, 0.8, true);
  std::printf("\n");

  // ---- 3. Publish -> import latency, across processes.
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_SEQPACKET, 0, sv) != 0) die("socketpair");
  fcntl(sv[0], F_SETFD, FD_CLOEXEC);
  const std::string fd_arg = std::to_string(sv[1]);
  char self[] = "/proc/self/exe";
  char peer_flag[] = "--peer";
  char* peer_argv[] = {self, peer_flag, const_cast<char*>(fd_arg.c_str()), nullptr};
  pid_t child = -1;
  if (posix_spawn(&child, "/proc/self/exe", nullptr, nullptr, peer_argv, environ) != 0) die("spawning the peer");
  close(sv[1]);
  std::uint8_t uuid[16];
  if (recv(sv[0], uuid, sizeof uuid, 0) != sizeof uuid) die("the peer did not start");
  const int peer_dev = exporter->find_device(uuid, why);
  if (peer_dev < 0) die(why);
  const RingKey small_ring{0, 1};
  const std::size_t small = 4096;
  if (!exporter->allocate_ring(small_ring, peer_dev, small, slots, why)) die(why);
  std::vector<double> enqueue_us, done_us;
  const int iters = 2000, warm = 100;
  for (int i = 0; i < iters + warm; ++i) {
    const std::uint32_t s = static_cast<std::uint32_t>(i) % slots;
    if (!exporter->wait_copied(small_ring, s, why)) die(why);
    LatencyMsg m{};
    if (!exporter->copy_and_publish(small_ring, s, shm, small, 1, verbatim, &m.header, why)) die(why);
    m.published_ns = now_ns();
    if (send(sv[0], &m, sizeof m, 0) != sizeof m) die("peer gone");
    LatencyReply r{};
    if (recv(sv[0], &r, sizeof r, 0) != sizeof r || r.ok == 0) die("the peer failed to map a slot");
    if (i >= warm) {
      enqueue_us.push_back((r.waited_ns - m.published_ns) / 1e3);
      done_us.push_back((r.done_ns - m.published_ns) / 1e3);
    }
  }
  LatencyMsg quit{};
  quit.quit = 1;
  send(sv[0], &quit, sizeof quit, 0);
  int status = 0;
  waitpid(child, &status, 0);
  const double med = median(enqueue_us);
  std::printf("3. publish -> cudaStreamWaitEvent queued in another process: median %.1f us, p99 %.1f us\n", med,
              percentile(enqueue_us, 0.99));
  std::printf("   publish -> the other process's stream past the wait (host-observed): median %.1f us, p99 %.1f us\n",
              median(done_us), percentile(done_us, 0.99));
  verdict.check("publish_to_import_median_us", med, 50, false);

  exporter->free_ring(small_ring);
  exporter->free_ring(ring);
  exporter->unregister_host(shm);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) die("the peer process failed");
  std::printf("\n%s\n", verdict.missed ? "SOME TARGETS MISSED" : "ALL TARGETS MET");
  return verdict.strict && verdict.missed ? 2 : 0;
}
