// Glue of the engine: sniff -> header -> plan (crop window from the header alone) -> decode
// only the window (at the largest DCT reduction that keeps the output resolution, where the
// spec allows a reduced decode) -> one resample -> one write into the slot.
#include "image/sample_processor.hpp"

#include <chrono>
#include <algorithm>
#include <cmath>
#include <cstring>

#include "augment/erasing.hpp"
#include "core/rng.hpp"
#include "image/geometry.hpp"
#include "image/jpeg_decoder.hpp"
#include "image/output_writer.hpp"
#include "image/other_decoders.hpp"
#include "image/png_decoder.hpp"
#include "image/resample.hpp"

namespace stoker::image {

namespace {

// Names what a non-decodable file is, from its first bytes, for the error message.
std::string describe_unknown(std::span<const std::uint8_t> d) {
  auto starts = [&](const char* magic, std::size_t n) {
    return d.size() >= n && std::memcmp(d.data(), magic, n) == 0;
  };
  // Formats that reach here are not decoded (the others were sniffed before).
  if (starts("BM", 2)) return "BMP file too short or malformed";
  if (starts("GIF8", 4)) return "GIF images are not supported";
  if (d.size() >= 2 && d[0] == 'P' && d[1] >= '1' && d[1] <= '7') {
    return "PNM variant P" + std::string(1, static_cast<char>(d[1])) + " is not supported (only binary P5/P6)";
  }
  std::size_t printable = 0;
  const std::size_t n = std::min<std::size_t>(d.size(), 512);
  for (std::size_t i = 0; i < n; ++i) {
    const auto c = d[i];
    printable += (c >= 0x20 && c < 0x7f) || c == '\n' || c == '\r' || c == '\t' ? 1 : 0;
  }
  if (printable == n) return "text, not an image";
  return "unknown format (not JPEG, PNG, WebP, TIFF, BMP or PPM/PGM)";
}

ImageFormat sniff(std::span<const std::uint8_t> d) {
  if (d.size() >= 3 && d[0] == 0xff && d[1] == 0xd8 && d[2] == 0xff) return ImageFormat::kJpeg;
  static const std::uint8_t kPng[8] = {0x89, 'P', 'N', 'G', 0x0d, 0x0a, 0x1a, 0x0a};
  if (d.size() >= 8 && std::memcmp(d.data(), kPng, 8) == 0) return ImageFormat::kPng;
  OtherFormat other;
  if (!sniff_other(d, other)) return ImageFormat::kUnknown;
  switch (other) {
    case OtherFormat::kWebp: return ImageFormat::kWebp;
    case OtherFormat::kTiff: return ImageFormat::kTiff;
    case OtherFormat::kBmp: return ImageFormat::kBmp;
    case OtherFormat::kPnm: return ImageFormat::kPnm;
  }
  return ImageFormat::kUnknown;
}

// Largest reduction 1/d (d in 8, 4, 2) that still leaves at least the output resolution across
// the box; 1 when none does.
int reduction_for(const SourceBox& b, int rw, int rh) {
  for (int d : {8, 4, 2}) {
    if ((b.x1 - b.x0) / d >= rw && (b.y1 - b.y0) / d >= rh) return d;
  }
  return 1;
}

// WebP: the largest integer reduction d that keeps at least 2x the output resolution across
// the box (1: none).
int webp_reduction(const SourceBox& b, int rw, int rh) {
  const double d = std::min((b.x1 - b.x0) / (2.0 * rw), (b.y1 - b.y0) / (2.0 * rh));
  return d >= 2 ? static_cast<int>(d) : 1;
}

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point& t) {
  const auto now = Clock::now();
  const double s = std::chrono::duration<double>(now - t).count();
  t = now;
  return s;
}

// The checks every decode path starts with (process() and reduce()): an empty file, or bytes
// no decoder recognizes, are refused as unsupported with the reason named. Sets r.format;
// false: r holds the refusal.
bool admit_encoded(std::span<const std::uint8_t> encoded, SampleResult& r) {
  if (encoded.empty()) {
    r.error = SampleErrorKind::kUnsupported;
    r.reason = "empty file (0 bytes)";
    return false;
  }
  r.format = sniff(encoded);
  if (r.format == ImageFormat::kUnknown) {
    r.error = SampleErrorKind::kUnsupported;
    r.reason = describe_unknown(encoded);
    return false;
  }
  return true;
}

}  // namespace

struct SampleProcessor::Impl {
  explicit Impl(const PipelineSpec& s) : spec(s), writer(s), upright_writer(upright_spec(s)) {
    jpeg.set_max_memory(s.max_memory_bytes);
  }
  // The same geometry written as packed RGB uint8 (NHWC, no normalize): the colour steps' input.
  static PipelineSpec upright_spec(PipelineSpec s) {
    s.dtype = proto::DType::kUInt8;
    s.layout = proto::Layout::kNHWC;
    s.normalize = false;
    s.augment.clear();
    return s;
  }
  PipelineSpec spec;
  JpegDecoder jpeg;
  OutputWriter writer;
  OutputWriter upright_writer;  // only used with colour steps
  std::vector<std::uint8_t> pixels, resampled, upright;
  std::vector<std::uint8_t> reduced;  // reduce()'s output (the ReducedView it returns)
  ResampleScratch scratch;
  AxisTaps xt, yt;

  // The steps after the resample (stored-orientation pixels in `resampled`, rw x rh): colour
  // steps, orientation and flip, the write in the output's dtype and layout, random erasing.
  void write_out(int rw, int rh, int orientation, const SamplePlan& plan, std::uint64_t seed, std::uint64_t epoch,
                 std::uint64_t sample_id, void* out) {
    if (spec.augment.empty()) {
      writer.write(resampled.data(), rw, rh, orientation, plan.flip, out);
    } else {
      // Colour steps work on the upright image: orient and flip into HWC uint8 first, apply
      // them, then write that with nothing left to orient. Their randomness has its own stream,
      // so adding a colour step does not change the crops.
      upright.resize(static_cast<std::size_t>(spec.out_width) * spec.out_height * 3);
      upright_writer.write(resampled.data(), rw, rh, orientation, plan.flip, upright.data());
      CounterRng color_rng(seed, epoch, sample_id, kStreamColor);
      augment::apply_augment(spec.augment, upright.data(), static_cast<int>(spec.out_width), static_cast<int>(spec.out_height),
                    color_rng);
      writer.write(upright.data(), static_cast<int>(spec.out_width), static_cast<int>(spec.out_height), 1, false, out);
    }
    if (!spec.erase_output.empty()) {
      // After normalize: erase in the output's own type and layout, values in normalized units.
      CounterRng erase_rng(seed, epoch, sample_id, kStreamErasing);
      const int w = static_cast<int>(spec.out_width), h = static_cast<int>(spec.out_height);
      const auto kind = spec.dtype == proto::DType::kFloat16 ? augment::FloatKind::kFloat16 : augment::FloatKind::kFloat32;
      for (const augment::ErasingParams& e : spec.erase_output) {
        augment::erase_float(out, kind, spec.layout == proto::Layout::kNCHW, w, h, augment::erase_box(e, h, w, erase_rng),
                             e, erase_rng);
      }
    }
  }

  // Taps for a stored-orientation box at a decode scale (fx, fy) of a scaled_w x scaled_h image.
  // Nearest has no reduced decode (spec.reduced_decode()), so its scale is always 1: its taps
  // come from the plan's upright PIL grid, turned to stored axes by the EXIF orientation.
  void taps_for(const SourceBox& b, double fx, double fy, int rw, int rh, int scaled_w, int scaled_h,
                const SamplePlan& plan, int orientation) {
    if (spec.filter == ResizeFilter::kNearest) {
      // Stored x is upright y for 5..8; which stored axes run mirrored (see to_stored).
      const bool swap = swaps_axes(orientation);
      const bool mirror_x = orientation == 2 || orientation == 3 || orientation == 7 || orientation == 8;
      const bool mirror_y = orientation == 3 || orientation == 4 || orientation == 6 || orientation == 7;
      nearest_taps(swap ? plan.nearest_y : plan.nearest_x, rw, scaled_w, mirror_x, xt);
      nearest_taps(swap ? plan.nearest_x : plan.nearest_y, rh, scaled_h, mirror_y, yt);
      return;
    }
    const int cx0 = std::max(0, static_cast<int>(std::floor(b.clip_x0 * fx + 1e-6)));
    const int cx1 = std::min(scaled_w, static_cast<int>(std::ceil(b.clip_x1 * fx - 1e-6)));
    const int cy0 = std::max(0, static_cast<int>(std::floor(b.clip_y0 * fy + 1e-6)));
    const int cy1 = std::min(scaled_h, static_cast<int>(std::ceil(b.clip_y1 * fy - 1e-6)));
    compute_taps(b.x0 * fx, b.x1 * fx, rw, cx0, std::max(cx1, cx0 + 1), xt, spec.filter);
    compute_taps(b.y0 * fy, b.y1 * fy, rh, cy0, std::max(cy1, cy0 + 1), yt, spec.filter);
  }
};

SampleProcessor::SampleProcessor(const PipelineSpec& spec) : impl_(std::make_unique<Impl>(spec)) {}
SampleProcessor::~SampleProcessor() = default;

SampleResult SampleProcessor::process(std::span<const std::uint8_t> encoded, std::uint64_t seed,
                                      std::uint64_t epoch, std::uint64_t sample_id, void* out,
                                      Breakdown* breakdown) {
  Impl& m = *impl_;
  const PipelineSpec& spec = m.spec;
  SampleResult r;
  if (!admit_encoded(encoded, r)) return r;
  if (spec.store_max_side > 0) {
    // The decoded-store pipeline: the reduced image is what the geometry sees, whether it
    // comes from here or from the store (job/decoded_store.hpp).
    ReducedView view;
    r = reduce(encoded, view);
    if (!r.ok()) return r;
    SampleResult done = process_reduced(view, seed, epoch, sample_id, out);
    done.format = r.format;
    done.warnings += r.warnings;
    return done;
  }
  Clock::time_point t = Clock::now();
  const ImageFormat format = r.format;

  CounterRng rng(seed, epoch, sample_id, kStreamAugment);
  std::uint32_t W = 0, H = 0;
  int orientation = 1;
  int rw = 0, rh = 0;  // resampled size, stored orientation
  SamplePlan plan{};
  // Bicubic passes in PIL's order: horizontal first on the upright image, i.e. on the stored
  // image's other axis when the EXIF orientation swaps them (set once the orientation is known).
  bool pil_order = false;
  // The crop is planned on the upright image (torchvision sees it upright) and mapped back to
  // stored pixels; the writer turns the resampled stored-orientation pixels upright.
  auto plan_oriented = [&]() -> SourceBox {
    const bool swap = swaps_axes(orientation);
    plan = plan_sample(spec, swap ? H : W, swap ? W : H, rng);
    pil_order = spec.filter == ResizeFilter::kBicubic && !swap;
    rw = static_cast<int>(swap ? spec.out_height : spec.out_width);
    rh = static_cast<int>(swap ? spec.out_width : spec.out_height);
    return to_stored(plan.box, orientation, W, H);
  };

  if (format == ImageFormat::kJpeg) {
    JpegHeader h;
    if (!m.jpeg.read_header(encoded, spec.strict, h, r)) return r;
    W = h.width;
    H = h.height;
    if (static_cast<std::uint64_t>(W) * H > spec.max_pixels) {
      r.error = SampleErrorKind::kTooLarge;
      r.reason = "JPEG header claims " + std::to_string(W) + "x" + std::to_string(H) +
                 " pixels, above max_pixels " + std::to_string(spec.max_pixels);
      return r;
    }
    orientation = spec.apply_exif_orientation ? h.orientation : 1;
    const SourceBox sbox = plan_oriented();

    // Largest DCT reduction (1/8, 1/4, 1/2) that still leaves at least the output
    // resolution across the box; libjpeg-turbo has fast IDCTs for exactly these. Only where
    // the spec allows it (random crops by default): a full decode is torchvision's path.
    const int k = spec.reduced_decode() ? 8 / reduction_for(sbox, rw, rh) : 8;
    const int sw = static_cast<int>(JpegDecoder::scaled(W, k));
    const int sh = static_cast<int>(JpegDecoder::scaled(H, k));
    m.taps_for(sbox, static_cast<double>(sw) / W, static_cast<double>(sh) / H, rw, rh, sw, sh, plan, orientation);
    if (breakdown) breakdown->header_s += seconds_since(t);

    // One column more on each side than the filter reads: libjpeg-turbo's fancy upsampling
    // replicates chroma at a cropped window's first and last columns (jpeg_crop_scanline), so
    // those columns differ from a full decode's (PIL's) and must not be read.
    JpegWindow win{k, std::max(0, m.xt.lo() - 1), m.yt.lo(), std::min(sw, m.xt.hi() + 1),
                   h.ends_with_eoi ? m.yt.hi() : sh};
    int stride = 0, win_x = 0, win_y = 0;
    if (!m.jpeg.decode(win, m.pixels, stride, win_x, win_y, r)) return r;
    if (breakdown) breakdown->decode_s += seconds_since(t);
    m.resampled.resize(static_cast<std::size_t>(rw) * rh * 3);
    resample_rgb(m.pixels.data(), stride, win_x, win_y, m.xt, m.yt, m.resampled.data(), m.scratch, pil_order);
  } else if (format == ImageFormat::kWebp && spec.webp_region_decode) {
    WebpInfo info;
    if (!webp_header(encoded, spec.max_pixels, info, r)) return r;
    W = info.width;
    H = info.height;
    orientation = spec.apply_exif_orientation ? info.orientation : 1;
    const SourceBox sbox = plan_oriented();
    // The window: every stored pixel the filter reads at full resolution (the crop itself for
    // RandomResizedCrop, the crop and its filter margin for Resize + CenterCrop).
    m.taps_for(sbox, 1.0, 1.0, rw, rh, static_cast<int>(W), static_cast<int>(H), plan, orientation);
    // Its top-left corner even: libwebp snaps a lossy (YUV 4:2:0) crop's origin down to even.
    WebpWindow win{m.xt.lo() & ~1, m.yt.lo() & ~1, m.xt.hi(), m.yt.hi()};
    const int cw = win.x1 - win.x0, ch = win.y1 - win.y0;
    int win_x = win.x0, win_y = win.y0, stride = cw * 3;
    // Reduced by libwebp's rescaler (an exact area average) by the largest integer d that
    // leaves at least twice the output resolution across the box, then the taps are
    // recomputed on the reduced window (its own coordinates: the box shifted to the window's
    // origin). Twice, not once as the JPEG DCT scale: averaging down to about the output size
    // and then filtering again blurs more than PIL's one filter (against a whole decode, 40 crops
    // of a photo at 48 px: mean 1.0-1.2 of 255 off, worst 2.3, at 1x; mean 0.1-0.6, worst 0.8,
    // at 2x); libwebp, unlike the DCT, takes any factor.
    if (const int d = spec.reduced_decode() ? webp_reduction(sbox, rw, rh) : 1; d > 1) {
      win.scaled_w = std::max(1, (cw + d - 1) / d);
      win.scaled_h = std::max(1, (ch + d - 1) / d);
      const double ox = win.x0, oy = win.y0;
      const SourceBox local{sbox.x0 - ox,      sbox.y0 - oy,      sbox.x1 - ox,      sbox.y1 - oy,
                            sbox.clip_x0 - ox, sbox.clip_y0 - oy, sbox.clip_x1 - ox, sbox.clip_y1 - oy};
      m.taps_for(local, static_cast<double>(win.scaled_w) / cw, static_cast<double>(win.scaled_h) / ch, rw, rh,
                 win.scaled_w, win.scaled_h, plan, orientation);
      win_x = win_y = 0;
      stride = win.scaled_w * 3;
    }
    if (breakdown) breakdown->header_s += seconds_since(t);
    if (!decode_webp_window(encoded, win, m.pixels, r)) return r;
    if (breakdown) breakdown->decode_s += seconds_since(t);
    m.resampled.resize(static_cast<std::size_t>(rw) * rh * 3);
    resample_rgb(m.pixels.data(), stride, win_x, win_y, m.xt, m.yt, m.resampled.data(), m.scratch, pil_order);
  } else {
    // Whole-image decoders, then one resample from the full image.
    if (format == ImageFormat::kPng) {
      if (!png_dimensions(encoded, W, H)) {
        r.error = SampleErrorKind::kCorrupt;
        r.reason = "PNG: missing or invalid IHDR";
        return r;
      }
      if (static_cast<std::uint64_t>(W) * H > spec.max_pixels) {
        r.error = SampleErrorKind::kTooLarge;
        r.reason = "PNG header claims " + std::to_string(W) + "x" + std::to_string(H) +
                   " pixels, above max_pixels " + std::to_string(spec.max_pixels);
        return r;
      }
      if (breakdown) breakdown->header_s += seconds_since(t);
      if (!decode_png(encoded, spec.max_pixels, m.pixels, W, H, r)) return r;
    } else {
      OtherFormat other = OtherFormat::kBmp;
      sniff_other(encoded, other);
      int stored_orientation = 1;
      if (!decode_other(other, encoded, spec.max_pixels, m.pixels, W, H, stored_orientation, r)) return r;
      orientation = spec.apply_exif_orientation ? stored_orientation : 1;
    }
    if (breakdown) breakdown->decode_s += seconds_since(t);
    const SourceBox sbox = plan_oriented();
    m.taps_for(sbox, 1.0, 1.0, rw, rh, static_cast<int>(W), static_cast<int>(H), plan, orientation);
    m.resampled.resize(static_cast<std::size_t>(rw) * rh * 3);
    resample_rgb(m.pixels.data(), static_cast<int>(W) * 3, 0, 0, m.xt, m.yt, m.resampled.data(), m.scratch, pil_order);
  }
  if (breakdown) breakdown->resize_s += seconds_since(t);
  m.write_out(rw, rh, orientation, plan, seed, epoch, sample_id, out);
  if (breakdown) {
    breakdown->write_s += seconds_since(t);
    breakdown->samples++;
  }
  return r;
}

namespace {

// Size of a w x h image whose longer side becomes at most max_side (aspect kept, each side at
// least 1; never enlarged).
void reduced_size(std::uint32_t w, std::uint32_t h, std::uint32_t max_side, std::uint32_t& rw, std::uint32_t& rh) {
  const std::uint32_t longer = std::max(w, h);
  if (longer <= max_side) {
    rw = w;
    rh = h;
    return;
  }
  const double f = static_cast<double>(max_side) / longer;
  rw = w >= h ? max_side : std::max<std::uint32_t>(1, static_cast<std::uint32_t>(std::lround(w * f)));
  rh = h > w ? max_side : std::max<std::uint32_t>(1, static_cast<std::uint32_t>(std::lround(h * f)));
}

}  // namespace

SampleResult SampleProcessor::reduce(std::span<const std::uint8_t> encoded, ReducedView& out) {
  Impl& m = *impl_;
  const PipelineSpec& spec = m.spec;
  const std::uint32_t max_side = spec.store_max_side;
  SampleResult r;
  if (!admit_encoded(encoded, r)) return r;
  const ImageFormat format = r.format;
  std::uint32_t W = 0, H = 0;  // decoded size (a JPEG's at its DCT scale)
  int orientation = 1;
  int stride = 0, win_x = 0, win_y = 0;
  if (format == ImageFormat::kJpeg) {
    JpegHeader h;
    if (!m.jpeg.read_header(encoded, spec.strict, h, r)) return r;
    if (static_cast<std::uint64_t>(h.width) * h.height > spec.max_pixels) {
      r.error = SampleErrorKind::kTooLarge;
      r.reason = "JPEG header claims " + std::to_string(h.width) + "x" + std::to_string(h.height) +
                 " pixels, above max_pixels " + std::to_string(spec.max_pixels);
      return r;
    }
    orientation = h.orientation;
    // The smallest DCT scale (1/8, 1/4, 1/2, 1) whose longer side still reaches max_side, so
    // the resize below only ever reduces by less than 2x from real decoded pixels.
    int k = 8;
    for (int c : {1, 2, 4}) {
      if (std::max(JpegDecoder::scaled(h.width, c), JpegDecoder::scaled(h.height, c)) >= max_side) {
        k = c;
        break;
      }
    }
    W = JpegDecoder::scaled(h.width, k);
    H = JpegDecoder::scaled(h.height, k);
    const JpegWindow win{k, 0, 0, static_cast<int>(W), static_cast<int>(H)};
    if (!m.jpeg.decode(win, m.pixels, stride, win_x, win_y, r)) return r;
  } else if (format == ImageFormat::kPng) {
    if (!decode_png(encoded, spec.max_pixels, m.pixels, W, H, r)) return r;
    stride = static_cast<int>(W) * 3;
  } else {
    OtherFormat other = OtherFormat::kBmp;
    sniff_other(encoded, other);
    if (!decode_other(other, encoded, spec.max_pixels, m.pixels, W, H, orientation, r)) return r;
    stride = static_cast<int>(W) * 3;
  }
  std::uint32_t rw = 0, rh = 0;
  reduced_size(W, H, max_side, rw, rh);
  m.reduced.resize(static_cast<std::size_t>(rw) * rh * 3);
  if (rw == W && rh == H) {
    for (std::uint32_t y = 0; y < H; ++y) {
      std::memcpy(m.reduced.data() + static_cast<std::size_t>(y) * W * 3,
                  m.pixels.data() + static_cast<std::size_t>(y) * stride,
                  static_cast<std::size_t>(W) * 3);
    }
  } else {
    // PIL's Image.resize(BICUBIC) with its antialiasing support (torchvision's Resize on a
    // PIL image): the whole image onto rw x rh.
    compute_taps(0.0, W, static_cast<int>(rw), 0, static_cast<int>(W), m.xt, ResizeFilter::kBicubic);
    compute_taps(0.0, H, static_cast<int>(rh), 0, static_cast<int>(H), m.yt, ResizeFilter::kBicubic);
    resample_rgb(m.pixels.data(), stride, win_x, win_y, m.xt, m.yt, m.reduced.data(), m.scratch, true);
  }
  out.pixels = m.reduced.data();
  out.width = rw;
  out.height = rh;
  out.orientation = orientation;
  return r;
}

SampleResult SampleProcessor::process_reduced(const ReducedView& image, std::uint64_t seed, std::uint64_t epoch,
                                              std::uint64_t sample_id, void* out) {
  Impl& m = *impl_;
  const PipelineSpec& spec = m.spec;
  SampleResult r;
  const std::uint32_t W = image.width, H = image.height;
  const int orientation = spec.apply_exif_orientation ? image.orientation : 1;
  CounterRng rng(seed, epoch, sample_id, kStreamAugment);
  const bool swap = swaps_axes(orientation);
  const SamplePlan plan = plan_sample(spec, swap ? H : W, swap ? W : H, rng);
  const bool pil_order = spec.filter == ResizeFilter::kBicubic && !swap;
  const int rw = static_cast<int>(swap ? spec.out_height : spec.out_width);
  const int rh = static_cast<int>(swap ? spec.out_width : spec.out_height);
  const SourceBox sbox = to_stored(plan.box, orientation, W, H);
  m.taps_for(sbox, 1.0, 1.0, rw, rh, static_cast<int>(W), static_cast<int>(H), plan, orientation);
  m.resampled.resize(static_cast<std::size_t>(rw) * rh * 3);
  resample_rgb(image.pixels, static_cast<int>(W) * 3, 0, 0, m.xt, m.yt, m.resampled.data(), m.scratch, pil_order);
  m.write_out(rw, rh, orientation, plan, seed, epoch, sample_id, out);
  return r;
}

}  // namespace stoker::image
