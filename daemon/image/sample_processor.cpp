// Glue of the engine: sniff -> header -> plan (crop window from the header alone) -> decode
// only the window at the largest DCT reduction that keeps the output resolution -> one
// resample -> one write into the slot.
#include "image/sample_processor.hpp"

#include <chrono>
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

const char* to_string(SampleErrorKind k) {
  switch (k) {
    case SampleErrorKind::kNone: return "ok";
    case SampleErrorKind::kIo: return "io";
    case SampleErrorKind::kUnsupported: return "unsupported";
    case SampleErrorKind::kCorrupt: return "corrupt";
    case SampleErrorKind::kTruncated: return "truncated";
    case SampleErrorKind::kTooLarge: return "too_large";
  }
  return "unknown";
}

namespace {

enum class Format { kJpeg, kPng, kWebpTiffBmpPnm, kOther };

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

Format sniff(std::span<const std::uint8_t> d) {
  if (d.size() >= 3 && d[0] == 0xff && d[1] == 0xd8 && d[2] == 0xff) return Format::kJpeg;
  static const std::uint8_t kPng[8] = {0x89, 'P', 'N', 'G', 0x0d, 0x0a, 0x1a, 0x0a};
  if (d.size() >= 8 && std::memcmp(d.data(), kPng, 8) == 0) return Format::kPng;
  OtherFormat other;
  if (sniff_other(d, other)) return Format::kWebpTiffBmpPnm;
  return Format::kOther;
}

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point& t) {
  const auto now = Clock::now();
  const double s = std::chrono::duration<double>(now - t).count();
  t = now;
  return s;
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
  ResampleScratch scratch;
  AxisTaps xt, yt;

  // Taps for a stored-orientation box at a decode scale (fx, fy) of a scaled_w x scaled_h image.
  void taps_for(const SourceBox& b, double fx, double fy, int rw, int rh, int scaled_w, int scaled_h) {
    const int cx0 = std::max(0, static_cast<int>(std::floor(b.clip_x0 * fx + 1e-6)));
    const int cx1 = std::min(scaled_w, static_cast<int>(std::ceil(b.clip_x1 * fx - 1e-6)));
    const int cy0 = std::max(0, static_cast<int>(std::floor(b.clip_y0 * fy + 1e-6)));
    const int cy1 = std::min(scaled_h, static_cast<int>(std::ceil(b.clip_y1 * fy - 1e-6)));
    compute_taps(b.x0 * fx, b.x1 * fx, rw, cx0, std::max(cx1, cx0 + 1), xt);
    compute_taps(b.y0 * fy, b.y1 * fy, rh, cy0, std::max(cy1, cy0 + 1), yt);
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
  if (encoded.empty()) {
    r.error = SampleErrorKind::kUnsupported;
    r.reason = "empty file (0 bytes)";
    return r;
  }
  Clock::time_point t = Clock::now();
  const Format format = sniff(encoded);
  if (format == Format::kOther) {
    r.error = SampleErrorKind::kUnsupported;
    r.reason = describe_unknown(encoded);
    return r;
  }

  CounterRng rng(seed, epoch, sample_id, kStreamAugment);
  std::uint32_t W = 0, H = 0;
  int orientation = 1;
  int rw = 0, rh = 0;  // resampled size, stored orientation
  SamplePlan plan{};

  if (format == Format::kJpeg) {
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
    const bool swap = swaps_axes(orientation);
    plan = plan_sample(spec, swap ? H : W, swap ? W : H, rng);
    const SourceBox sbox = to_stored(plan.box, orientation, W, H);
    rw = static_cast<int>(swap ? spec.out_height : spec.out_width);
    rh = static_cast<int>(swap ? spec.out_width : spec.out_height);

    // Largest DCT reduction (1/8, 1/4, 1/2) that still leaves at least the output
    // resolution across the box; libjpeg-turbo has fast IDCTs for exactly these.
    int k = 8;
    for (int cand : {1, 2, 4}) {
      if ((sbox.x1 - sbox.x0) * cand / 8.0 >= rw && (sbox.y1 - sbox.y0) * cand / 8.0 >= rh) {
        k = cand;
        break;
      }
    }
    const int sw = static_cast<int>(JpegDecoder::scaled(W, k));
    const int sh = static_cast<int>(JpegDecoder::scaled(H, k));
    m.taps_for(sbox, static_cast<double>(sw) / W, static_cast<double>(sh) / H, rw, rh, sw, sh);
    if (breakdown) breakdown->header_s += seconds_since(t);

    JpegWindow win{k, m.xt.lo(), m.yt.lo(), m.xt.hi(), h.ends_with_eoi ? m.yt.hi() : sh};
    int stride = 0, win_x = 0, win_y = 0;
    if (!m.jpeg.decode(win, m.pixels, stride, win_x, win_y, r)) return r;
    if (breakdown) breakdown->decode_s += seconds_since(t);
    m.resampled.resize(static_cast<std::size_t>(rw) * rh * 3);
    resample_rgb(m.pixels.data(), stride, win_x, win_y, m.xt, m.yt, m.resampled.data(), m.scratch);
  } else if (format == Format::kPng) {
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
    if (breakdown) breakdown->decode_s += seconds_since(t);
  }
  if (format == Format::kWebpTiffBmpPnm) {
    // Whole-image decoders (other_decoders.hpp), then the same path as PNG.
    OtherFormat other = OtherFormat::kBmp;
    sniff_other(encoded, other);
    if (!decode_other(other, encoded, spec.max_pixels, m.pixels, W, H, r)) return r;
    if (breakdown) breakdown->decode_s += seconds_since(t);
  }
  if (format != Format::kJpeg) {
    plan = plan_sample(spec, W, H, rng);
    rw = static_cast<int>(spec.out_width);
    rh = static_cast<int>(spec.out_height);
    m.taps_for(plan.box, 1.0, 1.0, rw, rh, static_cast<int>(W), static_cast<int>(H));
    m.resampled.resize(static_cast<std::size_t>(rw) * rh * 3);
    resample_rgb(m.pixels.data(), static_cast<int>(W) * 3, 0, 0, m.xt, m.yt, m.resampled.data(), m.scratch);
  }
  if (breakdown) breakdown->resize_s += seconds_since(t);
  if (spec.augment.empty()) {
    m.writer.write(m.resampled.data(), rw, rh, orientation, plan.flip, out);
  } else {
    // Colour steps work on the upright image: orient and flip into HWC uint8 first, apply
    // them, then write that with nothing left to orient. Their randomness has its own stream,
    // so adding a colour step does not change the crops.
    m.upright.resize(static_cast<std::size_t>(spec.out_width) * spec.out_height * 3);
    m.upright_writer.write(m.resampled.data(), rw, rh, orientation, plan.flip, m.upright.data());
    CounterRng color_rng(seed, epoch, sample_id, kStreamColor);
    apply_augment(spec.augment, m.upright.data(), static_cast<int>(spec.out_width), static_cast<int>(spec.out_height),
                  color_rng);
    m.writer.write(m.upright.data(), static_cast<int>(spec.out_width), static_cast<int>(spec.out_height), 1, false, out);
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
  if (breakdown) {
    breakdown->write_s += seconds_since(t);
    breakdown->samples++;
  }
  return r;
}

}  // namespace stoker::image
