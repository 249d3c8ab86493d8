#include "augment/geometric.hpp"

#include <cmath>
#include <cstring>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "augment/linspace.hpp"
#include "augment/pixel_math.hpp"
#include "augment/simd_level.hpp"
#include "augment/warp_avx2.hpp"

namespace stoker::augment {
namespace {

inline std::uint8_t round_u8(float v) { return round_to_u8(v); }

#if defined(__SSE2__)
// The 3 channels of the pixel at `p` (and a 4th byte, which must be readable) as floats.
inline __m128 load_px(const std::uint8_t* p) {
  std::int32_t word;
  std::memcpy(&word, p, 4);
  const __m128i zero = _mm_setzero_si128();
  const __m128i b = _mm_unpacklo_epi8(_mm_cvtsi32_si128(word), zero);
  return _mm_cvtepi32_ps(_mm_unpacklo_epi16(b, zero));
}

// round_to_u8 lane by lane; the 3 low lanes stored at `out`.
inline void store_px(std::uint8_t* out, __m128 v) {
  const __m128 magic = _mm_set1_ps(12582912.0f);  // as round_half_even
  v = _mm_sub_ps(_mm_add_ps(v, magic), magic);
  v = _mm_min_ps(_mm_set1_ps(255.0f), _mm_max_ps(_mm_setzero_ps(), v));
  const __m128i i = _mm_cvttps_epi32(v);
  const __m128i b = _mm_packus_epi16(_mm_packs_epi32(i, i), _mm_setzero_si128());
  const std::int32_t word = _mm_cvtsi128_si32(b);
  std::memcpy(out, &word, 3);
}
#endif

}  // namespace

std::array<double, 6> inverse_affine_matrix(const AffineParams& p) {
  // Term by term as torchvision writes it (RSS = R(a) S(s) SHy(sy) SHx(sx), inverted).
  const double rot = p.angle * M_PI / 180.0;
  const double sx = p.shear[0] * M_PI / 180.0, sy = p.shear[1] * M_PI / 180.0;
  const double cx = p.center[0], cy = p.center[1], tx = p.translate[0], ty = p.translate[1];
  const double a = std::cos(rot - sy) / std::cos(sy);
  const double b = -std::cos(rot - sy) * std::tan(sx) / std::cos(sy) - std::sin(rot);
  const double c = std::sin(rot - sy) / std::cos(sy);
  const double d = -std::sin(rot - sy) * std::tan(sx) / std::cos(sy) + std::cos(rot);
  std::array<double, 6> m{d, -b, 0.0, -c, a, 0.0};
  for (double& v : m) v /= p.scale;
  m[2] += m[0] * (-cx - tx) + m[1] * (-cy - ty);
  m[5] += m[3] * (-cx - tx) + m[4] * (-cy - ty);
  m[2] += cx;
  m[5] += cy;
  return m;
}

void warp_affine(std::uint8_t* rgb, int width, int height, const std::array<double, 6>& m, Interpolation mode,
                 const std::array<float, 3>* fill, std::vector<std::uint8_t>& scratch) {
  // theta in float32; rescaled_theta = theta^T / [0.5 w, 0.5 h] (one float32 division each).
  const float hw = 0.5f * static_cast<float>(width), hh = 0.5f * static_cast<float>(height);
  const float r00 = static_cast<float>(m[0]) / hw, r01 = static_cast<float>(m[1]) / hw,
              r02 = static_cast<float>(m[2]) / hw;
  const float r10 = static_cast<float>(m[3]) / hh, r11 = static_cast<float>(m[4]) / hh,
              r12 = static_cast<float>(m[5]) / hh;
  // One byte of padding: the SIMD path reads 4 bytes for a pixel's 3.
  scratch.resize(static_cast<std::size_t>(width) * height * 3 + 1);
  std::memcpy(scratch.data(), rgb, static_cast<std::size_t>(width) * height * 3);
  scratch.back() = 0;
  const std::uint8_t* src = scratch.data();
  const float fw = static_cast<float>(width), fh = static_cast<float>(height);
  const float f0 = fill ? (*fill)[0] : 0.0f, f1 = fill ? (*fill)[1] : 0.0f, f2 = fill ? (*fill)[2] : 0.0f;
  // The base grid's x of each column, computed once (it is the same on every row).
  thread_local std::vector<float> xs;
  xs.resize(static_cast<std::size_t>(width));
  for (int j = 0; j < width; ++j) xs[j] = linspace_at(-fw * 0.5f + 0.5f, fw * 0.5f + 0.5f - 1.0f, width, j);
  const std::size_t row = static_cast<std::size_t>(width) * 3;
  // Per row, two phases: the source coordinates of every pixel (float arithmetic with no
  // branches, which the compiler vectorises), then the sampling (scalar gathers). Each value
  // is the same expression as torch's, in the same order, whichever phase computes it.
  thread_local std::vector<float> ixs, iys;
  ixs.resize(static_cast<std::size_t>(width));
  iys.resize(static_cast<std::size_t>(width));
  const float half_w = fw / 2.0f, half_h = fh / 2.0f;
  // The AVX2 bilinear rows address the source with int32 offsets (warp_avx2.hpp).
  const bool wide_bilinear = use_avx2() && scratch.size() < (std::size_t{1} << 31);
  const int full_blocks = width / 8;
  thread_local std::vector<std::uint8_t> done;
  done.resize(static_cast<std::size_t>(full_blocks) + 1);
  for (int i = 0; i < height; ++i) {
    const float y = linspace_at(-fh * 0.5f + 0.5f, fh * 0.5f + 0.5f - 1.0f, height, i);
    const float y01 = y * r01, y11 = y * r11;
    float* __restrict ix_row = ixs.data();
    float* __restrict iy_row = iys.data();
    const float* __restrict x_row = xs.data();
    for (int j = 0; j < width; ++j) {
      // base_grid (x, y, 1) . rescaled_theta, then grid_sample's unnormalize
      // (align_corners=False): (g + 1) * size/2 - 0.5
      const float gx = x_row[j] * r00 + y01 + r02;
      const float gy = x_row[j] * r10 + y11 + r12;
      ix_row[j] = (gx + 1.0f) * half_w - 0.5f;
      iy_row[j] = (gy + 1.0f) * half_h - 0.5f;
    }
    std::uint8_t* const out_row = rgb + row * i;
    // AVX2 first, for the blocks of 8 pixels that lie wholly inside; the scalar loop below
    // does the rest (done[j / 8] == 0, and the row's tail).
    const bool wide = wide_bilinear && mode == Interpolation::kBilinear;
    if (wide) bilinear_row_avx2(src, width, height, ix_row, iy_row, width, fill, out_row, done.data());
    for (int j = 0; j < width; ++j) {
      // j is a block's first pixel whenever its block is done: the loop enters block b either
      // by the jump out of a done block b - 1 or by finishing b - 1 pixel by pixel.
      if (wide && (j >> 3) < full_blocks && done[static_cast<std::size_t>(j >> 3)]) {
        j += 7;
        continue;
      }
      std::uint8_t* const out = out_row + 3 * static_cast<std::size_t>(j);
      const float ix = ix_row[j], iy = iy_row[j];
      if (mode == Interpolation::kNearest) {
        const float rx = round_half_even(ix), ry = round_half_even(iy);
        if (rx >= 0 && rx < fw && ry >= 0 && ry < fh) {
          std::memcpy(out, src + static_cast<std::size_t>(ry) * row + static_cast<std::size_t>(rx) * 3, 3);
        } else {
          out[0] = round_u8(f0), out[1] = round_u8(f1), out[2] = round_u8(f2);
        }
        continue;
      }
      if (!(ix >= -1.0f && ix < fw && iy >= -1.0f && iy < fh)) {  // all four neighbours outside (or NaN)
        if (fill) {
          out[0] = round_u8(f0), out[1] = round_u8(f1), out[2] = round_u8(f2);
        } else {
          out[0] = out[1] = out[2] = 0;
        }
        continue;
      }
      // Weights as the CPU kernel forms them: fractions e (east) and s (south) of the floor.
      const float x0 = floor_small(ix), y0 = floor_small(iy);
      const float fe = ix - x0, fs = iy - y0, fwst = 1.0f - fe, fnth = 1.0f - fs;
      const float w_nw = fnth * fwst, w_ne = fnth * fe, w_sw = fs * fwst, w_se = fs * fe;
      const int xi = static_cast<int>(x0), yi = static_cast<int>(y0);
      // Offset of the nw neighbour (may lie outside; only in-image neighbours are read).
      const std::ptrdiff_t o = static_cast<std::ptrdiff_t>(yi) * static_cast<std::ptrdiff_t>(row) + xi * 3;
      const std::ptrdiff_t r = static_cast<std::ptrdiff_t>(row);
      float v[3];   // grid_sample's order: nw, ne, sw, se, from 0
      float mask;   // the all-ones channel sampled the same way: the in-image weight
      if (xi >= 0 && xi + 1 < width && yi >= 0 && yi + 1 < height) {  // the common case: all inside
        const std::uint8_t* p = src + o;
#if defined(__SSE2__)
        // The same per-channel expression, the channels side by side in one register.
        __m128 acc = _mm_mul_ps(load_px(p), _mm_set1_ps(w_nw));
        acc = _mm_add_ps(acc, _mm_mul_ps(load_px(p + 3), _mm_set1_ps(w_ne)));
        acc = _mm_add_ps(acc, _mm_mul_ps(load_px(p + r), _mm_set1_ps(w_sw)));
        acc = _mm_add_ps(acc, _mm_mul_ps(load_px(p + r + 3), _mm_set1_ps(w_se)));
        if (fill) {
          const float m = w_nw + w_ne + w_sw + w_se;
          acc = _mm_add_ps(_mm_mul_ps(acc, _mm_set1_ps(m)), _mm_mul_ps(_mm_set1_ps(1.0f - m), _mm_setr_ps(f0, f1, f2, 0)));
        }
        store_px(out, acc);
        continue;
#endif
        for (int c = 0; c < 3; ++c) {
          v[c] = static_cast<float>(p[c]) * w_nw + static_cast<float>(p[3 + c]) * w_ne +
                 static_cast<float>(p[r + c]) * w_sw + static_cast<float>(p[r + 3 + c]) * w_se;
        }
        mask = w_nw + w_ne + w_sw + w_se;
      } else {
        const bool in_x0 = xi >= 0, in_x1 = xi + 1 < width;
        const bool in_y0 = yi >= 0, in_y1 = yi + 1 < height;
        v[0] = v[1] = v[2] = 0;
        mask = 0;
        if (in_x0 && in_y0) {
          for (int c = 0; c < 3; ++c) v[c] += static_cast<float>(src[o + c]) * w_nw;
          mask += w_nw;
        }
        if (in_x1 && in_y0) {
          for (int c = 0; c < 3; ++c) v[c] += static_cast<float>(src[o + 3 + c]) * w_ne;
          mask += w_ne;
        }
        if (in_x0 && in_y1) {
          for (int c = 0; c < 3; ++c) v[c] += static_cast<float>(src[o + r + c]) * w_sw;
          mask += w_sw;
        }
        if (in_x1 && in_y1) {
          for (int c = 0; c < 3; ++c) v[c] += static_cast<float>(src[o + r + 3 + c]) * w_se;
          mask += w_se;
        }
      }
      if (fill) {
        out[0] = round_u8(v[0] * mask + (1.0f - mask) * f0);
        out[1] = round_u8(v[1] * mask + (1.0f - mask) * f1);
        out[2] = round_u8(v[2] * mask + (1.0f - mask) * f2);
      } else {
        out[0] = round_u8(v[0]), out[1] = round_u8(v[1]), out[2] = round_u8(v[2]);
      }
    }
  }
}

void affine(std::uint8_t* rgb, int width, int height, const AffineParams& a, Interpolation mode,
            const std::array<float, 3>* fill, std::vector<std::uint8_t>& scratch) {
  warp_affine(rgb, width, height, inverse_affine_matrix(a), mode, fill, scratch);
}

void rotate(std::uint8_t* rgb, int width, int height, double degrees, Interpolation mode,
            const std::array<float, 3>* fill, std::vector<std::uint8_t>& scratch) {
  AffineParams a;
  a.angle = -degrees;  // functional.rotate passes -angle to _get_inverse_affine_matrix
  affine(rgb, width, height, a, mode, fill, scratch);
}

AffineParams draw_random_affine(const RandomAffineParams& r, int width, int height, CounterRng& rng) {
  AffineParams a;
  a.angle = rng.uniform(r.degrees[0], r.degrees[1]);
  if (r.has_translate) {
    const double max_dx = r.translate[0] * width, max_dy = r.translate[1] * height;
    a.translate[0] = std::nearbyint(rng.uniform(-max_dx, max_dx));
    a.translate[1] = std::nearbyint(rng.uniform(-max_dy, max_dy));
  }
  if (r.has_scale) a.scale = rng.uniform(r.scale[0], r.scale[1]);
  if (r.shear_ranges >= 1) a.shear[0] = rng.uniform(r.shear[0], r.shear[1]);
  if (r.shear_ranges == 2) a.shear[1] = rng.uniform(r.shear[2], r.shear[3]);
  return a;
}

}  // namespace stoker::augment
