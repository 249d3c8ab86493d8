// uint8 batch -> normalized float32/float16 on the device. Included only by .cu files.
#pragma once

#include <cstddef>
#include <cstdint>

#include <cuda_runtime.h>

namespace stoker::cuda {

inline constexpr int kMaxNormalizeChannels = 4;

struct NormalizeArgs {
  std::uint32_t images = 0;
  std::uint32_t channels = 3;    // 1..kMaxNormalizeChannels
  std::size_t pixels = 0;        // height * width of one image
  bool nhwc = false;             // false: NCHW planes; true: interleaved channels
  bool out_half = false;         // false: float32; true: float16 (round to nearest)
  float mean[kMaxNormalizeChannels] = {0, 0, 0, 0};
  float stddev[kMaxNormalizeChannels] = {1, 1, 1, 1};
};

// out[i] = (in[i] / 255 - mean[c]) / stddev[c], c the channel of element i, on `stream`.
// `in` must be 4-byte aligned and `out` 16-byte aligned (cudaMalloc'd pointers and the
// exporter's slot offsets are); cudaErrorInvalidValue otherwise or for a bad channel count.
cudaError_t launch_normalize(const std::uint8_t* in, void* out, const NormalizeArgs& args,
                             cudaStream_t stream);

}  // namespace stoker::cuda
