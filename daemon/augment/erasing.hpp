// torchvision 0.14's RandomErasing (transforms.py): with probability p, up to 10 tries of
// (area fraction in `scale`, log-uniform aspect in `ratio`), h = round(sqrt(area * aspect)),
// w = round(sqrt(area / aspect)); the first that fits strictly inside the image is erased at a
// uniform position, and when none fits nothing is. Values per channel, or `random`: one
// standard normal per erased value (channel, row, column order), as torchvision.
//
// Two places run it (the config decides, by where the step sits relative to `normalize`):
// on the upright uint8 image among the colour steps (values in pixel units 0..255), or on the
// finished float16/float32 output after normalize (values in normalized units).
#pragma once

#include <array>
#include <cstdint>

#include "core/rng.hpp"

namespace stoker::augment {

struct ErasingParams {
  double p = 0.5;
  std::array<double, 2> scale{0.02, 0.33};
  std::array<double, 2> ratio{0.3, 3.3};
  std::array<float, 3> value{0, 0, 0};  // per channel (a single number is given to all three)
  bool random = false;                  // standard normal values instead (normalized output only)
};

struct EraseBox {
  int top = 0, left = 0, height = 0, width = 0;  // height == 0 or width == 0: nothing to erase
  bool empty() const { return height == 0 || width == 0; }
};

// RandomErasing.forward's draws: the coin, then get_params. Empty when the coin says no or
// no try fits.
EraseBox erase_box(const ErasingParams& e, int image_height, int image_width, CounterRng& rng);

// Erases `box` of a packed RGB uint8 image with e.value (each within 0..255; the config
// refuses `random` here, where torch would cast normal values to uint8 meaninglessly).
void erase_rgb8(std::uint8_t* rgb, int width, const EraseBox& box, const ErasingParams& e);

// Erases `box` of a finished float sample (float32 or IEEE binary16, planar CHW or packed HWC).
enum class FloatKind : std::uint8_t { kFloat32, kFloat16 };
void erase_float(void* out, FloatKind kind, bool planar, int width, int height, const EraseBox& box,
                 const ErasingParams& e, CounterRng& rng);

}  // namespace stoker::augment
