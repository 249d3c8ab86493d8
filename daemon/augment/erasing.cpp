#include "augment/erasing.hpp"

#include <cmath>
#include <cstring>

#include "core/half.hpp"

namespace stoker::augment {
namespace {

// A standard normal (Box-Muller on two draws of the sample's stream).
float standard_normal(CounterRng& rng) {
  const double u1 = 1.0 - rng.uniform();  // (0, 1]: log is finite
  const double u2 = rng.uniform();
  return static_cast<float>(std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2));
}

}  // namespace

EraseBox erase_box(const ErasingParams& e, int image_height, int image_width, CounterRng& rng) {
  if (!(rng.uniform() < e.p)) return {};
  const double area = static_cast<double>(image_height) * image_width;
  // torch.log(torch.tensor(ratio)): float32 logs.
  const double log_lo = std::log(static_cast<float>(e.ratio[0]));
  const double log_hi = std::log(static_cast<float>(e.ratio[1]));
  for (int attempt = 0; attempt < 10; ++attempt) {
    const double erase_area = area * rng.uniform(e.scale[0], e.scale[1]);
    const double aspect = std::exp(rng.uniform(log_lo, log_hi));
    // Python's round(): half to even, which nearbyint does in the default rounding mode.
    const int h = static_cast<int>(std::nearbyint(std::sqrt(erase_area * aspect)));
    const int w = static_cast<int>(std::nearbyint(std::sqrt(erase_area / aspect)));
    if (!(h < image_height && w < image_width)) continue;
    EraseBox box;
    box.height = h;
    box.width = w;
    box.top = static_cast<int>(rng.below(static_cast<std::uint64_t>(image_height - h + 1)));
    box.left = static_cast<int>(rng.below(static_cast<std::uint64_t>(image_width - w + 1)));
    return box;
  }
  return {};  // torchvision returns the image itself as the "erased" patch: unchanged
}

void erase_rgb8(std::uint8_t* rgb, int width, const EraseBox& box, const ErasingParams& e) {
  if (box.empty()) return;
  std::uint8_t v[3];
  for (int c = 0; c < 3; ++c) v[c] = static_cast<std::uint8_t>(e.value[c]);
  for (int y = box.top; y < box.top + box.height; ++y) {
    std::uint8_t* p = rgb + (static_cast<std::size_t>(y) * width + box.left) * 3;
    for (int x = 0; x < box.width; ++x, p += 3) std::memcpy(p, v, 3);
  }
}

namespace {

// Fills the box of one channel, row by row: `at(y)` is the element index of (c, y, box.left),
// consecutive columns `stride` elements apart (1 planar, 3 packed). Values come from `next()`
// in row-major order, which is torchvision's order within a channel.
template <class T, class At, class Next>
void fill_channel(T* out, const EraseBox& box, std::size_t stride, At at, Next next) {
  for (int y = box.top; y < box.top + box.height; ++y) {
    T* p = out + at(y);
    for (int x = 0; x < box.width; ++x, p += stride) *p = next();
  }
}

template <class T, class Convert>
void erase_typed(T* out, bool planar, int width, int height, const EraseBox& box, const ErasingParams& e,
                 CounterRng& rng, Convert convert) {
  const std::size_t plane = static_cast<std::size_t>(width) * height;
  const std::size_t stride = planar ? 1 : 3;
  for (int c = 0; c < 3; ++c) {
    auto at = [&](int y) {
      const std::size_t pixel = static_cast<std::size_t>(y) * width + box.left;
      return planar ? c * plane + pixel : pixel * 3 + c;
    };
    if (e.random) {
      fill_channel(out, box, stride, at, [&] { return convert(standard_normal(rng)); });
    } else {
      const T v = convert(e.value[c]);  // one conversion per channel, not per value
      fill_channel(out, box, stride, at, [v] { return v; });
    }
  }
}

}  // namespace

void erase_float(void* out, FloatKind kind, bool planar, int width, int height, const EraseBox& box,
                 const ErasingParams& e, CounterRng& rng) {
  if (box.empty()) return;
  if (kind == FloatKind::kFloat32) {
    erase_typed(static_cast<float*>(out), planar, width, height, box, e, rng, [](float v) { return v; });
  } else {
    erase_typed(static_cast<std::uint16_t*>(out), planar, width, height, box, e, rng,
                [](float v) { return float_to_half(v); });
  }
}

}  // namespace stoker::augment
