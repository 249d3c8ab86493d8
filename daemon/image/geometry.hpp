// Where in the source image a sample's output comes from, decided from the header alone
// (dimensions + EXIF orientation), before any pixel is decoded.
#pragma once

#include <cstdint>

#include "core/rng.hpp"
#include "image/pipeline_spec.hpp"
#include "image/resample.hpp"  // NearestAxis

namespace stoker::image {

// A continuous source box [x0, x1) x [y0, y1) that maps onto the whole output, and the clip
// rectangle whose pixels the resampling filter may read (PIL clips its filter there):
// the crop itself for RandomResizedCrop (torchvision crops first, then resizes), the whole
// image for Resize + CenterCrop (a center crop of a full resize sees pixels beyond the crop).
struct SourceBox {
  double x0, y0, x1, y1;
  double clip_x0, clip_y0, clip_x1, clip_y1;
};

struct SamplePlan {
  SourceBox box;       // in upright (orientation-applied) coordinates
  bool flip = false;   // horizontal flip of the upright output
  // The same geometry as PIL's nearest resize sees it (upright): which interval is resized to
  // how many pixels, and the center crop's offset. Used by ResizeFilter::kNearest only.
  NearestAxis nearest_x, nearest_y;
};

// torchvision semantics: RandomResizedCrop.get_params (10 attempts, center-crop fallback,
// Python's round-half-even), Resize(shorter) with int() truncation of the long side then
// CenterCrop with round((size - crop) / 2). Draws come from `rng` in a fixed order.
SamplePlan plan_sample(const PipelineSpec& spec, std::uint32_t width, std::uint32_t height,
                       CounterRng& rng);

// EXIF orientation 1..8: maps an upright box to stored-pixel coordinates (stored image is
// `width` x `height`). Orientations 5..8 swap the axes.
SourceBox to_stored(const SourceBox& upright, int orientation, std::uint32_t width,
                    std::uint32_t height);

constexpr bool swaps_axes(int orientation) { return orientation >= 5 && orientation <= 8; }

}  // namespace stoker::image
