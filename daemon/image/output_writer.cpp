#include "image/output_writer.hpp"

#include <cstring>

#include "core/half.hpp"
#include "image/geometry.hpp"

namespace stoker::image {

std::uint16_t float_to_half(float f) { return stoker::float_to_half(f); }

OutputWriter::OutputWriter(const PipelineSpec& spec) : spec_(spec) {
  for (int c = 0; c < 3; ++c) {
    const float mean = spec.normalize ? spec.mean[c] : 0.f;
    const float sd = spec.normalize ? spec.stddev[c] : 1.f;
    for (int v = 0; v < 256; ++v) {
      f32_[c][v] = (static_cast<float>(v) / 255.f - mean) / sd;
      f16_[c][v] = float_to_half(f32_[c][v]);
    }
  }
}

namespace {

// Where output row y of an upright W x H image starts in the stored-orientation source, and
// the step (in pixels) between consecutive output columns. Derived from the EXIF table:
// output (x, y) reads source (sx, sy) with sx, sy affine in x.
struct RowWalk {
  std::ptrdiff_t start;  // pixel index of output column 0
  std::ptrdiff_t step;   // pixel index increment per output column
};

RowWalk walk(int orientation, bool flip, int y, int ow, int src_w, int src_h) {
  // Output column x reads upright column ux = flip ? ow - 1 - x : x, upright row y.
  // Upright (ux, y) -> stored (sx, sy); stored pixel index = sy * src_w + sx.
  auto idx = [&](std::ptrdiff_t sx, std::ptrdiff_t sy) { return sy * src_w + sx; };
  std::ptrdiff_t a, b;  // stored index of ux = 0 and of ux = 1
  switch (orientation) {
    case 2: a = idx(src_w - 1, y); b = idx(src_w - 2, y); break;
    case 3: a = idx(src_w - 1, src_h - 1 - y); b = idx(src_w - 2, src_h - 1 - y); break;
    case 4: a = idx(0, src_h - 1 - y); b = idx(1, src_h - 1 - y); break;
    case 5: a = idx(y, 0); b = idx(y, 1); break;
    case 6: a = idx(y, src_h - 1); b = idx(y, src_h - 2); break;
    case 7: a = idx(src_w - 1 - y, src_h - 1); b = idx(src_w - 1 - y, src_h - 2); break;
    case 8: a = idx(src_w - 1 - y, 0); b = idx(src_w - 1 - y, 1); break;
    default: a = idx(0, y); b = idx(1, y); break;
  }
  RowWalk w{a, b - a};
  if (flip) {
    w.start = a + (ow - 1) * w.step;
    w.step = -w.step;
  }
  return w;
}

template <class T, class Convert>
void write_typed(const std::uint8_t* src, int ow, int oh, int src_w, int src_h, int orientation,
                 bool flip, proto::Layout layout, T* out, Convert conv) {
  const std::size_t plane = static_cast<std::size_t>(ow) * oh;
  for (int y = 0; y < oh; ++y) {
    const RowWalk w = walk(orientation, flip, y, ow, src_w, src_h);
    const std::uint8_t* p = src + w.start * 3;
    const std::ptrdiff_t step = w.step * 3;
    if (layout == proto::Layout::kNCHW) {
      T* r = out + static_cast<std::size_t>(y) * ow;
      T* g = r + plane;
      T* b = g + plane;
      for (int x = 0; x < ow; ++x, p += step) {
        r[x] = conv(0, p[0]);
        g[x] = conv(1, p[1]);
        b[x] = conv(2, p[2]);
      }
    } else {
      T* o = out + static_cast<std::size_t>(y) * ow * 3;
      for (int x = 0; x < ow; ++x, p += step, o += 3) {
        o[0] = conv(0, p[0]);
        o[1] = conv(1, p[1]);
        o[2] = conv(2, p[2]);
      }
    }
  }
}

}  // namespace

void OutputWriter::write(const std::uint8_t* src, int src_w, int src_h, int orientation, bool flip,
                         void* out) const {
  const int ow = static_cast<int>(spec_.out_width), oh = static_cast<int>(spec_.out_height);
  if (!swaps_axes(orientation) && orientation <= 1 && !flip && spec_.layout == proto::Layout::kNHWC &&
      spec_.dtype == proto::DType::kUInt8) {
    std::memcpy(out, src, static_cast<std::size_t>(ow) * oh * 3);  // already in place
    return;
  }
  switch (spec_.dtype) {
    case proto::DType::kUInt8:
      write_typed(src, ow, oh, src_w, src_h, orientation, flip, spec_.layout,
                  static_cast<std::uint8_t*>(out), [](int, std::uint8_t v) { return v; });
      break;
    case proto::DType::kFloat32:
      write_typed(src, ow, oh, src_w, src_h, orientation, flip, spec_.layout, static_cast<float*>(out),
                  [this](int c, std::uint8_t v) { return f32_[c][v]; });
      break;
    case proto::DType::kFloat16:
      write_typed(src, ow, oh, src_w, src_h, orientation, flip, spec_.layout,
                  static_cast<std::uint16_t*>(out), [this](int c, std::uint8_t v) { return f16_[c][v]; });
      break;
  }
}

}  // namespace stoker::image
