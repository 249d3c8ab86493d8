// gpu_test_support.hpp with CUDA.
#include "gpu_test_support.hpp"

#include <cstdio>
#include <cstdlib>

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "cuda/normalize_kernel.cuh"

namespace stoker::gputest {

int device_count(std::string& why) {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess || n == 0) {
    why = e != cudaSuccess ? std::string("no usable CUDA device: ") + cudaGetErrorString(e) : "no CUDA device";
    cudaGetLastError();
    return 0;
  }
  return n;
}

void skip_without_device() {
  std::string why;
  if (device_count(why) > 0) return;
  const char* req = std::getenv("STOKER_REQUIRE_GPU");
  if (req != nullptr && std::string(req) == "1") {
    std::printf("FAILED: STOKER_REQUIRE_GPU=1 but %s\n", why.c_str());
    std::fflush(stdout);
    std::_Exit(1);
  }
  std::printf("SKIP: %s\n", why.c_str());
  std::fflush(stdout);
  std::_Exit(77);
}

bool normalize_on_device(const std::vector<std::uint8_t>& in, const NormalizeCase& c, std::vector<float>& out,
                         std::string& why) {
  cuda::NormalizeArgs a;
  a.images = c.images;
  a.channels = c.channels;
  a.pixels = static_cast<std::size_t>(c.height) * c.width;
  a.nhwc = c.nhwc;
  a.out_half = c.out_half;
  for (int i = 0; i < 4; ++i) {
    a.mean[i] = c.mean[i];
    a.stddev[i] = c.stddev[i];
  }
  const std::size_t n = in.size();
  const std::size_t out_bytes = n * (c.out_half ? 2 : 4);
  std::uint8_t* d_in = nullptr;
  void* d_out = nullptr;
  cudaError_t e = cudaMalloc(&d_in, n + 1);
  if (e == cudaSuccess) e = cudaMalloc(&d_out, out_bytes + 16);
  if (e == cudaSuccess) e = cudaMemcpy(d_in, in.data(), n, cudaMemcpyHostToDevice);
  if (e == cudaSuccess) e = cudaMemset(d_out, 0xff, out_bytes + 16);  // NaN everywhere: gaps show
  if (e == cudaSuccess) e = cuda::launch_normalize(d_in, d_out, a, nullptr);
  if (e == cudaSuccess) e = cudaDeviceSynchronize();
  std::vector<std::uint8_t> raw(out_bytes + 16);
  if (e == cudaSuccess) e = cudaMemcpy(raw.data(), d_out, out_bytes + 16, cudaMemcpyDeviceToHost);
  cudaFree(d_in);
  cudaFree(d_out);
  if (e != cudaSuccess) {
    why = std::string("normalize on the device: ") + cudaGetErrorString(e);
    cudaGetLastError();
    return false;
  }
  // The kernel must not write past its output.
  for (std::size_t i = out_bytes; i < out_bytes + 16; ++i) {
    if (raw[i] != 0xff) {
      why = "the kernel wrote past the end of its output";
      return false;
    }
  }
  out.resize(n);
  for (std::size_t i = 0; i < n; ++i) {
    if (c.out_half) {
      std::uint16_t h;
      std::memcpy(&h, raw.data() + 2 * i, 2);
      out[i] = half_to_float(h);
    } else {
      std::memcpy(&out[i], raw.data() + 4 * i, 4);
    }
  }
  return true;
}

bool normalize_refuses_misaligned_output() {
  void* d = nullptr;
  if (cudaMalloc(&d, 4096) != cudaSuccess) return false;
  cuda::NormalizeArgs a;
  a.images = 1;
  a.pixels = 16;
  const cudaError_t e = cuda::launch_normalize(static_cast<std::uint8_t*>(d), static_cast<char*>(d) + 1024 + 4, a, nullptr);
  cudaFree(d);
  return e == cudaErrorInvalidValue;
}

void* stream_create(int device, std::string& why) {
  cudaStream_t s = nullptr;
  cudaError_t e = cudaSetDevice(device);
  if (e == cudaSuccess) e = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  if (e != cudaSuccess) {
    why = std::string("creating a stream: ") + cudaGetErrorString(e);
    return nullptr;
  }
  return s;
}

void stream_destroy(void* stream) {
  if (stream != nullptr) cudaStreamDestroy(static_cast<cudaStream_t>(stream));
}

bool copy_to_host(void* host, const void* device_ptr, std::size_t bytes, void* stream, std::string& why) {
  auto s = static_cast<cudaStream_t>(stream);
  cudaError_t e = cudaMemcpyAsync(host, device_ptr, bytes, cudaMemcpyDeviceToHost, s);
  if (e == cudaSuccess) e = cudaStreamSynchronize(s);
  if (e != cudaSuccess) {
    why = std::string("copying device data back: ") + cudaGetErrorString(e);
    return false;
  }
  return true;
}

std::size_t device_free_bytes(int device) {
  std::size_t free_b = 0, total = 0;
  if (cudaSetDevice(device) != cudaSuccess || cudaMemGetInfo(&free_b, &total) != cudaSuccess) return 0;
  return free_b;
}

}  // namespace stoker::gputest
