// The resize filter a pipeline names (torchvision's InterpolationMode on a PIL image). Its own
// header: PipelineSpec and the config reader need the name, not the resampler behind it.
#pragma once

#include <cstdint>

namespace stoker::image {

// torchvision's InterpolationMode BILINEAR / BICUBIC / NEAREST on a PIL image.
enum class ResizeFilter : std::uint8_t { kBilinear, kBicubic, kNearest };

}  // namespace stoker::image
