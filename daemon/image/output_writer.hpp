// The one pass that writes a sample into its batch slot: EXIF orientation, horizontal flip,
// layout (NCHW / NHWC) and dtype (uint8 as is; float16/float32 as (x/255 - mean)/std through
// a per-channel 256-entry table, so no intermediate float image exists).
#pragma once

#include <array>
#include <cstdint>

#include "image/pipeline_spec.hpp"

namespace stoker::image {

class OutputWriter {
 public:
  explicit OutputWriter(const PipelineSpec& spec);

  // `src` is the resampled image in stored orientation, packed RGB, `src_w` x `src_h`
  // (axes swapped relative to the output when swaps_axes(orientation)).
  void write(const std::uint8_t* src, int src_w, int src_h, int orientation, bool flip,
             void* out) const;

 // The per-channel value tables the float writes use (the GPU normalize uses the same ones,
  // so both outputs are equal bit for bit).
  float table_f32(int channel, int value) const { return f32_[channel][value]; }
  std::uint16_t table_f16(int channel, int value) const { return f16_[channel][value]; }

 private:
  const PipelineSpec spec_;
  std::array<std::array<float, 256>, 3> f32_{};
  std::array<std::array<std::uint16_t, 256>, 3> f16_{};
};

// IEEE 754 binary16 from float, round to nearest even (exposed for tests).
std::uint16_t float_to_half(float f);

}  // namespace stoker::image
