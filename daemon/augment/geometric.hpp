// Rotation about the image centre with torchvision 0.14's tensor rotate (expand=False):
// functional.rotate builds the inverse affine matrix of -angle, _gen_affine_grid maps each
// output pixel centre to normalized source coordinates in float32, and grid_sample
// (align_corners=False, zeros padding) samples it; RandomRotation always passes a fill, so the
// in-image weight m of each output pixel blends: out = sample * m + (1 - m) * fill (nearest:
// fill where the nearest source pixel is outside). Back to uint8 rounded half to even.
// Angle sign as torchvision: positive turns the content counter-clockwise.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

namespace stoker::augment {

enum class Interpolation : std::uint8_t { kNearest, kBilinear };

// Packed RGB `width` x `height`, in place (the output keeps the input's size); `scratch`
// keeps its capacity between calls.
void rotate(std::uint8_t* rgb, int width, int height, double degrees, Interpolation mode,
            const std::array<float, 3>& fill, std::vector<std::uint8_t>& scratch);

}  // namespace stoker::augment
