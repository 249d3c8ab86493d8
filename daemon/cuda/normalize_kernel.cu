// uint8 -> (x/255 - mean[c]) / stddev[c] as float32 or float16, on the device.
//
// Memory-bound (1 byte in, 2 or 4 bytes out per element), so the kernels only care about
// wide, coalesced accesses and no per-element integer division:
//  - NCHW: one plane (image, channel) per grid row, so the channel is uniform per block; each
//    thread reads a uchar4 and writes a float4 (or 4 halves, 8 bytes) in a grid-stride loop;
//    a plane that does not start on a 4-element boundary gets a scalar head and tail;
//  - NHWC: groups of 4*C elements (C uchar4 words); element j of a group has channel j % C, a
//    compile-time constant once the loop over the C words is unrolled; a scalar tail at the end.
#include "cuda/normalize_kernel.cuh"

#include <cuda_fp16.h>

namespace stoker::cuda {
namespace {

constexpr int kThreads = 256;

struct Coeffs {
  float scale[kMaxNormalizeChannels];  // 1 / (255 * stddev)
  float bias[kMaxNormalizeChannels];   // -mean / stddev
};

template <class T>
struct Store;

template <>
struct Store<float> {
  static __device__ __forceinline__ void one(float* p, float v) { *p = v; }
  static __device__ __forceinline__ void four(float* p, float a, float b, float c, float d) {
    *reinterpret_cast<float4*>(p) = make_float4(a, b, c, d);
  }
};

struct alignas(8) Half4 {
  __half2 lo, hi;
};

template <>
struct Store<__half> {
  static __device__ __forceinline__ void one(__half* p, float v) { *p = __float2half_rn(v); }
  static __device__ __forceinline__ void four(__half* p, float a, float b, float c, float d) {
    *reinterpret_cast<Half4*>(p) = Half4{__floats2half2_rn(a, b), __floats2half2_rn(c, d)};
  }
};

template <class T>
__global__ void __launch_bounds__(kThreads)
    normalize_nchw(const std::uint8_t* __restrict__ in, T* __restrict__ out, std::size_t pixels,
                   std::uint32_t planes, std::uint32_t channels, Coeffs k) {
  const std::size_t tid = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const std::size_t nthreads = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::uint32_t p = blockIdx.y; p < planes; p += gridDim.y) {
    const std::uint32_t c = p % channels;
    const float s = k.scale[c];
    const float b = k.bias[c];
    const std::size_t base = static_cast<std::size_t>(p) * pixels;
    const std::uint8_t* src = in + base;
    T* dst = out + base;
    std::size_t head = (4 - (base & 3)) & 3;
    if (head > pixels) head = pixels;
    const std::size_t groups = (pixels - head) / 4;
    const std::size_t tail = head + groups * 4;
    if (tid < head) Store<T>::one(dst + tid, fmaf(src[tid], s, b));
    const uchar4* src4 = reinterpret_cast<const uchar4*>(src + head);
    T* dst4 = dst + head;
    for (std::size_t g = tid; g < groups; g += nthreads) {
      const uchar4 v = src4[g];
      Store<T>::four(dst4 + 4 * g, fmaf(v.x, s, b), fmaf(v.y, s, b), fmaf(v.z, s, b), fmaf(v.w, s, b));
    }
    if (tid < pixels - tail) Store<T>::one(dst + tail + tid, fmaf(src[tail + tid], s, b));
  }
}

template <class T, int C>
__global__ void __launch_bounds__(kThreads)
    normalize_nhwc(const std::uint8_t* __restrict__ in, T* __restrict__ out, std::size_t n, Coeffs k) {
  float s[C], b[C];
#pragma unroll
  for (int c = 0; c < C; ++c) {
    s[c] = k.scale[c];
    b[c] = k.bias[c];
  }
  const std::size_t tid = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const std::size_t nthreads = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  const std::size_t groups = n / (4 * C);
  const uchar4* in4 = reinterpret_cast<const uchar4*>(in);
  for (std::size_t g = tid; g < groups; g += nthreads) {
#pragma unroll
    for (int w = 0; w < C; ++w) {
      const uchar4 v = in4[g * C + w];
      Store<T>::four(out + (g * C + w) * 4, fmaf(v.x, s[(4 * w) % C], b[(4 * w) % C]),
                     fmaf(v.y, s[(4 * w + 1) % C], b[(4 * w + 1) % C]),
                     fmaf(v.z, s[(4 * w + 2) % C], b[(4 * w + 2) % C]),
                     fmaf(v.w, s[(4 * w + 3) % C], b[(4 * w + 3) % C]));
    }
  }
  // The tail starts at a multiple of C, so element rest + t has channel t % C.
  const std::size_t rest = groups * 4 * C;
  if (tid < n - rest) {
    const int c = static_cast<int>(tid % C);
    Store<T>::one(out + rest + tid, fmaf(in[rest + tid], k.scale[c], k.bias[c]));
  }
}

unsigned blocks_for(std::size_t work_items, unsigned cap) {
  const std::size_t b = (work_items + kThreads - 1) / kThreads;
  return b == 0 ? 1u : b > cap ? cap : static_cast<unsigned>(b);
}

template <class T>
void launch_nhwc(const std::uint8_t* in, T* out, std::size_t n, int c, const Coeffs& k, cudaStream_t s) {
  const unsigned blocks = blocks_for(n / (4 * c), 1u << 20);
  switch (c) {
    case 1: normalize_nhwc<T, 1><<<blocks, kThreads, 0, s>>>(in, out, n, k); break;
    case 2: normalize_nhwc<T, 2><<<blocks, kThreads, 0, s>>>(in, out, n, k); break;
    case 3: normalize_nhwc<T, 3><<<blocks, kThreads, 0, s>>>(in, out, n, k); break;
    default: normalize_nhwc<T, 4><<<blocks, kThreads, 0, s>>>(in, out, n, k); break;
  }
}

}  // namespace

cudaError_t launch_normalize(const std::uint8_t* in, void* out, const NormalizeArgs& a,
                             cudaStream_t stream) {
  if (a.channels < 1 || a.channels > kMaxNormalizeChannels ||
      (reinterpret_cast<std::uintptr_t>(in) & 3) != 0 || (reinterpret_cast<std::uintptr_t>(out) & 15) != 0) {
    return cudaErrorInvalidValue;
  }
  const std::uint64_t planes = static_cast<std::uint64_t>(a.images) * a.channels;
  const std::size_t n = static_cast<std::size_t>(planes) * a.pixels;
  if (n == 0) return cudaSuccess;
  if (planes > 0xffffffffull) return cudaErrorInvalidValue;
  Coeffs k{};
  for (std::uint32_t c = 0; c < a.channels; ++c) {
    if (!(a.stddev[c] != 0.0f)) return cudaErrorInvalidValue;
    k.scale[c] = 1.0f / (255.0f * a.stddev[c]);
    k.bias[c] = -a.mean[c] / a.stddev[c];
  }
  if (a.nhwc) {
    if (a.out_half) {
      launch_nhwc(in, static_cast<__half*>(out), n, static_cast<int>(a.channels), k, stream);
    } else {
      launch_nhwc(in, static_cast<float*>(out), n, static_cast<int>(a.channels), k, stream);
    }
  } else {
    const dim3 grid(blocks_for(a.pixels / 4 + 1, 4096), static_cast<unsigned>(planes < 65535 ? planes : 65535));
    const auto p32 = static_cast<std::uint32_t>(planes);
    if (a.out_half) {
      normalize_nchw<__half><<<grid, kThreads, 0, stream>>>(in, static_cast<__half*>(out), a.pixels, p32, a.channels, k);
    } else {
      normalize_nchw<float><<<grid, kThreads, 0, stream>>>(in, static_cast<float*>(out), a.pixels, p32, a.channels, k);
    }
  }
  return cudaGetLastError();
}

}  // namespace stoker::cuda
