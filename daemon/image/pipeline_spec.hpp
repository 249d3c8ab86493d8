// What one job does to every sample, as parsed from the YAML `pipeline:` and `output:`.
// The config parser (daemon/config) fills it; the image engine (daemon/image) executes it.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "augment/color_ops.hpp"  // AugmentStep
#include "augment/erasing.hpp"    // ErasingParams
#include "image/resize_filter.hpp"

#include "stoker/proto/layout.hpp"

namespace stoker::image {

enum class Geometry : std::uint8_t {
  kRandomResizedCrop,  // torchvision RandomResizedCrop(size, scale, ratio), `filter`, antialias
  kResizeCenterCrop,   // Resize(shorter side = resize) then CenterCrop(out_h, out_w)
  kResize,             // Resize to exactly (out_h, out_w), aspect not kept
};

// Whether a JPEG is decoded at a reduced DCT scale (1/2, 1/4, 1/8) and a WebP through libwebp's
// area-averaging rescaler where the output resolution allows. Faster, but the pixels differ
// from a full decode + one filter (torchvision's) by a few levels, worst on large images.
// kAuto: only for random_resized_crop (a random crop differs every epoch anyway), never for a
// deterministic geometry (eval must give torchvision's pixels) nor for nearest.
enum class DctScale : std::uint8_t { kAuto, kAlways, kNever };

struct PipelineSpec {
  // decode
  bool apply_exif_orientation = true;
  bool strict = false;                 // every libjpeg warning is an error
  std::uint64_t max_pixels = 178956970;  // header w*h above this is refused before allocating
  std::uint64_t max_memory_bytes = std::uint64_t{256} << 20;  // per worker's decoder; 0: unbounded
  // WebP: decode only the window a sample needs, at a reduced scale where the output allows
  // (as JPEG always does). Not a config key: false only in benchmarks and tests, to compare
  // with a whole-image decode.
  bool webp_region_decode = true;
  DctScale dct_scale = DctScale::kAuto;
  // decoded_store (job key decoded_store.max_side): every image is first reduced so that its
  // longer side is at most this (a DCT-scaled JPEG decode, then an antialiased bicubic
  // resize; never enlarged), and the geometry runs on the reduced image. Part of the
  // pipeline's definition, so a sample gives the same pixels whether the reduced image came
  // from the store or from a fresh decode. 0: no reduction (the original pipeline).
  std::uint32_t store_max_side = 0;

  // geometry
  Geometry geometry = Geometry::kResizeCenterCrop;
  std::uint32_t out_height = 224;
  std::uint32_t out_width = 224;
  std::uint32_t resize_shorter = 256;            // kResizeCenterCrop
  std::array<double, 2> scale{0.08, 1.0};        // kRandomResizedCrop area fraction
  std::array<double, 2> ratio{3.0 / 4.0, 4.0 / 3.0};
  ResizeFilter filter = ResizeFilter::kBilinear;

  // augment
  double flip_probability = 0.0;
  std::vector<augment::AugmentStep> augment;  // colour steps after the geometry, in config order
  // random_erasing steps written after `normalize`: run in config order on the finished
  // float sample (values in normalized units), from their own stream (kStreamErasing).
  // Invariant (the config's): non-empty only with normalize and a float dtype on the CPU.
  std::vector<augment::ErasingParams> erase_output;

  // output: uint8 never touches floats; float16/float32 is (x/255 - mean)/stddev in one pass,
  // with mean 0 and stddev 1 when `normalize` is absent (i.e. ToTensor's [0,1] scaling).
  bool normalize = false;
  std::array<float, 3> mean{0.f, 0.f, 0.f};
  std::array<float, 3> stddev{1.f, 1.f, 1.f};
  proto::DType dtype = proto::DType::kUInt8;
  proto::Layout layout = proto::Layout::kNCHW;

  // Decode at a reduced scale where the output allows (see DctScale). Invariant (the
  // config's): never with kNearest, whose pixels a reduced decode would change.
  bool reduced_decode() const {
    if (filter == ResizeFilter::kNearest) return false;
    return dct_scale == DctScale::kAlways ||
           (dct_scale == DctScale::kAuto && geometry == Geometry::kRandomResizedCrop);
  }

  std::uint64_t sample_bytes() const {
    return std::uint64_t{3} * out_height * out_width * proto::dtype_size(dtype);
  }
};

}  // namespace stoker::image
