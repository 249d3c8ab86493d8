// libpng front end: any PNG (palette, gray, gray+alpha, RGB, RGBA; 1..16 bits) to 8-bit RGB,
// alpha dropped and 16-bit reduced to its high byte as PIL's convert("RGB") does.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "image/sample_result.hpp"

namespace stoker::image {

// Header only: dimensions, for the max_pixels check before any allocation.
bool png_dimensions(std::span<const std::uint8_t> data, std::uint32_t& width, std::uint32_t& height);

// Full decode to packed RGB; an image above max_pixels is refused (kTooLarge) before its
// pixels or row pointers are allocated.
bool decode_png(std::span<const std::uint8_t> data, std::uint64_t max_pixels, std::vector<std::uint8_t>& rgb,
                std::uint32_t& width, std::uint32_t& height, SampleResult& result);

}  // namespace stoker::image
