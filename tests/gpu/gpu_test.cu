// gpu tier (ctest -L gpu): needs a CUDA device; without one it exits 77, which ctest reports
// as "Skipped" (never as passed).
//  - the normalize kernel against a CPU reference on fresh random inputs (max abs error printed);
//  - exporter -> importer across two processes on one GPU: the device bytes equal the host
//    batch, the importer's stream waits on the slot's IPC event;
//  - a daemon-generation change drops the importer's cached mappings.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

#include <cuda_runtime.h>

#include "cuda/device_exporter.hpp"
#include "cuda/device_importer.hpp"
#include "cuda/normalize_kernel.cuh"

namespace {

int failures = 0;

void check(bool ok, const char* what) {
  std::printf("%s: %s\n", ok ? "ok" : "FAILED", what);
  if (!ok) ++failures;
}

void test_normalize_kernel() {
  const std::size_t hw = 37 * 53, images = 5, n = hw * 3 * images;
  std::vector<std::uint8_t> in(n);
  std::mt19937 rng(std::random_device{}());
  for (auto& v : in) v = static_cast<std::uint8_t>(rng());
  const float mean[3] = {0.485f, 0.456f, 0.406f}, sd[3] = {0.229f, 0.224f, 0.225f};
  const float inv[3] = {1 / sd[0], 1 / sd[1], 1 / sd[2]};
  std::uint8_t* d_in = nullptr;
  float* d_out = nullptr;
  cudaMalloc(&d_in, n);
  cudaMalloc(&d_out, n * 4);
  for (bool nhwc : {false, true}) {
    cudaMemcpy(d_in, in.data(), n, cudaMemcpyHostToDevice);
    const cudaError_t e = stoker::cuda::launch_normalize(d_in, d_out, hw, images, nhwc, false, mean, inv, nullptr);
    std::vector<float> out(n);
    cudaMemcpy(out.data(), d_out, n * 4, cudaMemcpyDeviceToHost);
    double max_err = 0;
    for (std::size_t i = 0; i < n; ++i) {
      const int c = nhwc ? static_cast<int>(i % 3) : static_cast<int>((i / hw) % 3);
      const double want = (in[i] / 255.0 - mean[c]) / sd[c];
      max_err = std::max(max_err, std::fabs(out[i] - want));
    }
    std::printf("normalize kernel (%s) max abs error vs CPU: %.3g\n", nhwc ? "NHWC" : "NCHW", max_err);
    check(e == cudaSuccess && max_err < 1e-5, "normalize kernel matches the CPU reference");
  }
  cudaFree(d_in);
  cudaFree(d_out);
}

void test_ipc_round_trip() {
  std::string why;
  auto exporter = stoker::cuda::DeviceExporter::create(why);
  check(exporter != nullptr, "exporter created");
  if (!exporter) return;
  const std::size_t bytes = 4 << 20;
  auto* host = static_cast<std::uint8_t*>(mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0));
  for (std::size_t i = 0; i < bytes; ++i) host[i] = static_cast<std::uint8_t>(i * 31 + 7);
  check(exporter->register_host(host, bytes, why), "segment registered (pinned)");
  std::uint8_t uuid[16];
  cudaDeviceProp p{};
  cudaGetDeviceProperties(&p, 0);
  std::memcpy(uuid, p.uuid.bytes, 16);
  const int dev = exporter->find_device(uuid, why);
  check(dev == 0, "device found by UUID");
  std::uint8_t bogus[16] = {1, 2, 3};
  check(exporter->find_device(bogus, why) < 0 && why.find("not visible") != std::string::npos,
        "an unknown UUID is refused with a reason");
  check(exporter->allocate_ring(0, dev, bytes, 2, why), "ring allocated");
  auto* header = static_cast<stoker::proto::SlotHeader*>(
      mmap(nullptr, sizeof(stoker::proto::SlotHeader), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0));
  stoker::cuda::DeviceNormalize none;
  check(exporter->publish(0, 1, host, bytes, 1, none, header, why), "slot published");
  const pid_t child = fork();
  if (child == 0) {
    std::string w;
    auto importer = stoker::cuda::DeviceImporter::create(w);
    if (!importer) _exit(2);
    cudaStream_t s;
    cudaStreamCreate(&s);
    void* ptr = importer->map(*header, 42, s, w);
    if (ptr == nullptr) _exit(3);
    std::vector<std::uint8_t> back(bytes);
    cudaMemcpyAsync(back.data(), ptr, bytes, cudaMemcpyDeviceToHost, s);
    cudaStreamSynchronize(s);
    for (std::size_t i = 0; i < bytes; ++i) {
      if (back[i] != static_cast<std::uint8_t>(i * 31 + 7)) _exit(4);
    }
    // Same handles again: served from the cache; a new generation reopens them.
    if (importer->map(*header, 42, s, w) != ptr) _exit(5);
    if (importer->map(*header, 43, s, w) == nullptr) _exit(6);
    _exit(0);
  }
  int status = 0;
  waitpid(child, &status, 0);
  check(WIFEXITED(status) && WEXITSTATUS(status) == 0, "another process maps the slot and reads the same bytes");
  exporter->free_ring(0);
  exporter->free_ring(0);  // idempotent
}

}  // namespace

int main() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
    std::printf("SKIP: no CUDA device on this machine\n");
    return 77;
  }
  test_normalize_kernel();
  test_ipc_round_trip();
  std::printf("%d failure(s)\n", failures);
  return failures == 0 ? 0 : 1;
}
