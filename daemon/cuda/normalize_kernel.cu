#include "cuda/normalize_kernel.cuh"

#include <cuda_fp16.h>

namespace stoker::cuda {
namespace {

struct Coeffs {
  float scale[3];  // 1 / (255 * std)
  float bias[3];   // -mean / std
};

template <class T>
__device__ inline T convert(float v);
template <>
__device__ inline float convert<float>(float v) { return v; }
template <>
__device__ inline __half convert<__half>(float v) { return __float2half_rn(v); }

// Memory-bound: each thread handles 4 consecutive bytes (one 32-bit load), grid-stride.
// Channel of element i: NCHW -> (i / plane) % 3; NHWC -> i % 3.
template <class T>
__global__ void normalize_kernel(const std::uint8_t* __restrict__ in, T* __restrict__ out,
                                 std::size_t n, std::size_t plane, bool nhwc, Coeffs k) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x * 4;
  for (std::size_t i = (static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x) * 4; i < n; i += stride) {
    if (i + 4 <= n && (reinterpret_cast<std::uintptr_t>(in + i) & 3) == 0) {
      const uchar4 v = *reinterpret_cast<const uchar4*>(in + i);
      const std::uint8_t b[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const std::size_t e = i + j;
        const int c = nhwc ? static_cast<int>(e % 3) : static_cast<int>((e / plane) % 3);
        out[e] = convert<T>(b[j] * k.scale[c] + k.bias[c]);
      }
    } else {
      for (std::size_t e = i; e < n && e < i + 4; ++e) {
        const int c = nhwc ? static_cast<int>(e % 3) : static_cast<int>((e / plane) % 3);
        out[e] = convert<T>(in[e] * k.scale[c] + k.bias[c]);
      }
    }
  }
}

}  // namespace

cudaError_t launch_normalize(const std::uint8_t* in, void* out, std::size_t pixels_per_image,
                             std::uint32_t images, bool nhwc, bool out_half, const float mean[3],
                             const float inv_std[3], cudaStream_t stream) {
  Coeffs k{};
  for (int c = 0; c < 3; ++c) {
    k.scale[c] = inv_std[c] / 255.0f;
    k.bias[c] = -mean[c] * inv_std[c];
  }
  const std::size_t n = pixels_per_image * 3 * images;
  if (n == 0) return cudaSuccess;
  const int threads = 256;
  const std::size_t blocks_needed = (n / 4 + threads) / threads;
  const int blocks = static_cast<int>(blocks_needed < 65535 ? blocks_needed : 65535);
  if (out_half) {
    normalize_kernel<__half><<<blocks, threads, 0, stream>>>(in, static_cast<__half*>(out), n, pixels_per_image, nhwc, k);
  } else {
    normalize_kernel<float><<<blocks, threads, 0, stream>>>(in, static_cast<float*>(out), n, pixels_per_image, nhwc, k);
  }
  return cudaGetLastError();
}

}  // namespace stoker::cuda
