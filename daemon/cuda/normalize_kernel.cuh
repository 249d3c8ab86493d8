// uint8 batch -> normalized float16/float32 on the device. Kernels live only in .cu files.
#pragma once

#include <cstddef>
#include <cstdint>

#include <cuda_runtime.h>

namespace stoker::cuda {

// `images` x 3 x (h*w) planes (NCHW) or interleaved (NHWC); out_half selects float16.
cudaError_t launch_normalize(const std::uint8_t* in, void* out, std::size_t pixels_per_image,
                             std::uint32_t images, bool nhwc, bool out_half, const float mean[3],
                             const float inv_std[3], cudaStream_t stream);

}  // namespace stoker::cuda
