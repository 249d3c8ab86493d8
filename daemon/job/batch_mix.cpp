#include "job/batch_mix.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/half.hpp"

namespace stoker::job {

namespace {

// Standard normal by Box-Muller (one of the pair; the draw count per batch is tiny).
double normal(CounterRng& rng) {
  const double u1 = 1.0 - rng.uniform();  // (0, 1]
  const double u2 = rng.uniform();
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
}

// log of a Gamma(shape, 1) variate: Marsaglia and Tsang for shape >= 1; below 1 the boost
// Gamma(shape) = Gamma(shape + 1) * U^(1/shape), kept in logs (U^(1/shape) underflows for tiny
// shapes, which is exactly when λ must come out close to 0 or 1 rather than NaN).
double log_gamma_variate(CounterRng& rng, double shape) {
  if (shape < 1.0) {
    const double u = 1.0 - rng.uniform();  // (0, 1]
    return log_gamma_variate(rng, shape + 1.0) + std::log(u) / shape;
  }
  const double d = shape - 1.0 / 3.0, c = 1.0 / std::sqrt(9.0 * d);
  for (;;) {
    double x, v;
    do {
      x = normal(rng);
      v = 1.0 + c * x;
    } while (v <= 0.0);
    v = v * v * v;
    const double u = rng.uniform();
    if (u < 1.0 - 0.0331 * x * x * x * x || (u > 0 && std::log(u) < 0.5 * x * x + d * (1.0 - v + std::log(v)))) {
      return std::log(d * v);
    }
  }
}

// dst <- λ·dst + (1-λ)·src over n values of one dtype.
void blend(void* dst, const void* src, std::uint64_t n, proto::DType dtype, double lambda) {
  switch (dtype) {
    case proto::DType::kUInt8: {
      // Fixed point: weights in 1/65536, round half up; fits u32 (255 * 65536 + 32768).
      const std::uint32_t w = static_cast<std::uint32_t>(std::lround(lambda * 65536.0));
      const std::uint32_t v = 65536u - w;
      auto* d = static_cast<std::uint8_t*>(dst);
      const auto* s = static_cast<const std::uint8_t*>(src);
      for (std::uint64_t k = 0; k < n; ++k) d[k] = static_cast<std::uint8_t>((d[k] * w + s[k] * v + 32768u) >> 16);
      break;
    }
    case proto::DType::kFloat32: {
      const float l = static_cast<float>(lambda), m = static_cast<float>(1.0 - lambda);
      auto* d = static_cast<float*>(dst);
      const auto* s = static_cast<const float*>(src);
      for (std::uint64_t k = 0; k < n; ++k) d[k] = l * d[k] + m * s[k];
      break;
    }
    case proto::DType::kFloat16: {
      // Every half decoded by one table lookup (256 KiB, built once); the one rounding back
      // is the daemon's float_to_half, as every other float16 write.
      static const std::vector<float> kHalf = [] {
        std::vector<float> t(65536);
        for (std::uint32_t h = 0; h < 65536; ++h) t[h] = half_to_float(static_cast<std::uint16_t>(h));
        return t;
      }();
      const float* table = kHalf.data();
      const float l = static_cast<float>(lambda), m = static_cast<float>(1.0 - lambda);
      auto* d = static_cast<std::uint16_t*>(dst);
      const auto* s = static_cast<const std::uint16_t*>(src);
      for (std::uint64_t k = 0; k < n; ++k) d[k] = float_to_half(l * table[d[k]] + m * table[s[k]]);
      break;
    }
  }
}

// dst's box <- src's box (one sample each).
void paste_box(std::uint8_t* dst, const std::uint8_t* src, const proto::BatchGeometry& g, const MixDraw& b) {
  if (b.x2 <= b.x1 || b.y2 <= b.y1) return;
  const std::uint64_t es = proto::dtype_size(g.dtype), W = g.width, H = g.height, C = g.channels;
  if (g.layout == proto::Layout::kNHWC) {
    const std::uint64_t run = (b.x2 - b.x1) * C * es;
    for (std::uint64_t y = b.y1; y < b.y2; ++y) {
      const std::uint64_t off = (y * W + b.x1) * C * es;
      std::memcpy(dst + off, src + off, run);
    }
    return;
  }
  const std::uint64_t run = (b.x2 - b.x1) * es;
  for (std::uint64_t c = 0; c < C; ++c) {
    for (std::uint64_t y = b.y1; y < b.y2; ++y) {
      const std::uint64_t off = ((c * H + y) * W + b.x1) * es;
      std::memcpy(dst + off, src + off, run);
    }
  }
}

void write_label(void* row, std::uint32_t k, proto::DType dtype, double value) {
  if (dtype == proto::DType::kFloat16) {
    static_cast<std::uint16_t*>(row)[k] = float_to_half(static_cast<float>(value));
  } else {
    static_cast<float*>(row)[k] = static_cast<float>(value);
  }
}

}  // namespace

double sample_beta(CounterRng& rng, double a, double b) {
  const double lx = log_gamma_variate(rng, a), ly = log_gamma_variate(rng, b);
  // X / (X + Y) = 1 / (1 + exp(ly - lx)); saturates cleanly to 0 or 1.
  return 1.0 / (1.0 + std::exp(ly - lx));
}

MixDraw draw_mix(const config::MixConfig& mix, std::uint64_t seed, std::uint64_t epoch,
                 std::uint64_t batch_index, std::uint32_t rank, std::uint32_t height, std::uint32_t width) {
  MixDraw d;
  if (!mix.enabled()) return d;
  CounterRng rng(seed, epoch, batch_index, kStreamBatchMix ^ (std::uint64_t{rank} << 32));
  bool cutmix = mix.cutmix_alpha > 0;
  if (mix.mixup_alpha > 0 && mix.cutmix_alpha > 0) cutmix = rng.uniform() < mix.switch_prob;
  const double alpha = cutmix ? mix.cutmix_alpha : mix.mixup_alpha;
  d.lambda = sample_beta(rng, alpha, alpha);
  if (!cutmix) {
    d.kind = MixKind::kMixUp;
    return d;
  }
  // torchvision: r_x ~ U{0..W-1}, r_y ~ U{0..H-1}, half sides int(r*W), int(r*H), clamped.
  d.kind = MixKind::kCutMix;
  const auto rx = static_cast<std::int64_t>(rng.below(width));
  const auto ry = static_cast<std::int64_t>(rng.below(height));
  const double r = 0.5 * std::sqrt(1.0 - d.lambda);
  const auto hw = static_cast<std::int64_t>(r * width), hh = static_cast<std::int64_t>(r * height);
  d.x1 = static_cast<std::uint32_t>(std::max<std::int64_t>(rx - hw, 0));
  d.y1 = static_cast<std::uint32_t>(std::max<std::int64_t>(ry - hh, 0));
  d.x2 = static_cast<std::uint32_t>(std::min<std::int64_t>(rx + hw, width));
  d.y2 = static_cast<std::uint32_t>(std::min<std::int64_t>(ry + hh, height));
  const double area = static_cast<double>(d.x2 - d.x1) * (d.y2 - d.y1);
  d.lambda = 1.0 - area / (static_cast<double>(width) * height);
  return d;
}

void apply_mix(const MixDraw& draw, const MixBatch& batch) {
  const std::uint32_t n = batch.count, C = batch.num_classes;
  if (n == 0) return;
  const std::uint64_t row_bytes = std::uint64_t{C} * proto::dtype_size(batch.label_dtype);
  auto* soft = static_cast<std::uint8_t*>(batch.soft);
  std::memset(soft, 0, row_bytes * n);
  const double lambda = draw.kind == MixKind::kNone ? 1.0 : draw.lambda;
  for (std::uint32_t i = 0; i < n; ++i) {
    const std::int64_t own = batch.labels[i], partner = batch.labels[(i + n - 1) % n];
    void* row = soft + row_bytes * i;
    // Summed in double before the one rounding, so equal classes give exactly 1.
    if (own >= 0 && own < C) write_label(row, static_cast<std::uint32_t>(own), batch.label_dtype, own == partner ? 1.0 : lambda);
    if (partner >= 0 && partner < C && partner != own) {
      write_label(row, static_cast<std::uint32_t>(partner), batch.label_dtype, 1.0 - lambda);
    }
  }
  if (draw.kind == MixKind::kNone || n == 1) return;

  // Rolled by one, in place: from the last sample down, sample i-1 is still original when
  // sample i takes from it; sample 0's partner (the last) was saved before it changed.
  const proto::BatchGeometry& g = batch.geometry;
  const std::uint64_t bytes = g.image_bytes;
  auto* images = static_cast<std::uint8_t*>(batch.images);
  thread_local std::vector<std::uint8_t> last;
  last.assign(images + bytes * (n - 1), images + bytes * n);
  const std::uint64_t values = bytes / proto::dtype_size(g.dtype);
  for (std::uint32_t i = n; i-- > 0;) {
    const std::uint8_t* src = i == 0 ? last.data() : images + bytes * (i - 1);
    if (draw.kind == MixKind::kMixUp) {
      blend(images + bytes * i, src, values, g.dtype, draw.lambda);
    } else {
      paste_box(images + bytes * i, src, g, draw);
    }
  }
}

}  // namespace stoker::job
