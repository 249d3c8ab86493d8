#include "augment/blur.hpp"

#include <algorithm>
#include <cmath>

#include "augment/pixel_math.hpp"

namespace stoker::augment {
namespace {

// torch.nn.functional.pad(mode="reflect"): -1 -> 1, n -> n - 2 (the edge is not repeated).
// Valid for i within (-n, 2n - 1), which the precondition pad < n guarantees.
inline int reflect(int i, int n) { return i < 0 ? -i : i >= n ? 2 * (n - 1) - i : i; }

}  // namespace

std::vector<float> gaussian_kernel1d(int size, double sigma) {
  // linspace(-half, half, size) is exact here: size is odd, so every x is an integer.
  const float half = static_cast<float>(size - 1) * 0.5f;
  const float sig = static_cast<float>(sigma);
  std::vector<float> k(static_cast<std::size_t>(size));
  float sum = 0;
  for (int i = 0; i < size; ++i) {
    const float x = (static_cast<float>(i) - half) / sig;
    k[i] = std::exp(-0.5f * (x * x));
    sum += k[i];
  }
  for (float& v : k) v /= sum;
  return k;
}

void gaussian_blur(std::uint8_t* rgb, int width, int height, int kernel_x, int kernel_y, double sigma_x,
                   double sigma_y) {
  const std::vector<float> kx = gaussian_kernel1d(kernel_x, sigma_x);
  const std::vector<float> ky = gaussian_kernel1d(kernel_y, sigma_y);
  const int rx = kernel_x / 2, ry = kernel_y / 2;
  const std::size_t row = static_cast<std::size_t>(width) * 3;
  // Buffers kept per worker thread: the hot path allocates nothing once warmed up.
  thread_local std::vector<float> tmp, padded, acc;
  tmp.resize(row * static_cast<std::size_t>(height));
  padded.resize(static_cast<std::size_t>(width + 2 * rx) * 3);
  acc.resize(row);
  // Horizontal pass into float32 (no rounding between the passes, as torch's single conv).
  // Each row is first widened to float with its reflect padding, so the taps are plain
  // strided reads the compiler vectorises; every output still sums its taps left to right,
  // starting from 0, as before.
  for (int y = 0; y < height; ++y) {
    const std::uint8_t* src = rgb + row * y;
    for (int x = -rx; x < width + rx; ++x) {
      const std::uint8_t* p = src + 3 * reflect(x, width);
      float* q = padded.data() + 3 * (x + rx);
      q[0] = p[0], q[1] = p[1], q[2] = p[2];
    }
    float* dst = tmp.data() + row * y;
    std::fill(dst, dst + row, 0.0f);
    for (int t = 0; t < kernel_x; ++t) {
      const float w = kx[t];
      const float* p = padded.data() + 3 * t;
      for (std::size_t i = 0; i < row; ++i) dst[i] += w * p[i];
    }
  }
  // Vertical pass, accumulated a row at a time so the inner loop runs along memory.
  for (int y = 0; y < height; ++y) {
    std::fill(acc.begin(), acc.end(), 0.0f);
    for (int t = -ry; t <= ry; ++t) {
      const float* src = tmp.data() + row * reflect(y + t, height);
      const float w = ky[t + ry];
      for (std::size_t i = 0; i < row; ++i) acc[i] += w * src[i];
    }
    std::uint8_t* dst = rgb + row * y;
    // torch.round (half to even) then .to(uint8); the kernel sums to 1, so the sum stays
    // within [0, 255] but for float rounding: clamp that.
    for (std::size_t i = 0; i < row; ++i) dst[i] = round_to_u8(acc[i]);
  }
}

}  // namespace stoker::augment
