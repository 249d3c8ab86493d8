// Hue rotation with torchvision 0.14's adjust_hue on a uint8 tensor (functional_tensor.py):
// x/255 in float32 -> _rgb2hsv -> h = (h + factor) mod 1 -> _hsv2rgb -> (x * 255) truncated.
#pragma once

#include <cstddef>
#include <cstdint>

namespace stoker::augment {

// `factor` in [-0.5, 0.5] (a turn of the hue circle is 1); packed RGB, in place.
void adjust_hue(std::uint8_t* rgb, std::size_t pixels, double factor);

}  // namespace stoker::augment
