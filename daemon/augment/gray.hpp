// rgb_to_grayscale for uint8 images as torchvision computes it, (0.2989 r + 0.587 g) + 0.114 b
// in float32 and truncated to uint8, for a run of pixels at once: the colour ops that need the
// gray image (contrast's mean, saturation's blend target, grayscale) take it from here. An AVX2
// version (8 pixels an iteration, chosen by simd_level.hpp) evaluates the same expression in
// the same order, so both give the same bytes.
#pragma once

#include <cstddef>
#include <cstdint>

namespace stoker::augment {

// One pixel's gray value.
inline std::uint8_t gray_of(const std::uint8_t* p) {
  const float g = 0.2989f * static_cast<float>(p[0]) + 0.587f * static_cast<float>(p[1]);
  return static_cast<std::uint8_t>(g + 0.114f * static_cast<float>(p[2]));
}

// gray[i] = gray_of(rgb + 3 i) for i < pixels.
void gray_values(const std::uint8_t* rgb, std::size_t pixels, std::uint8_t* gray);

}  // namespace stoker::augment
