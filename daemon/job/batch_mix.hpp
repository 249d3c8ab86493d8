// MixUp and CutMix on a finished batch, torchvision's convention (v2 and the classification
// references' RandomMixup/RandomCutmix): one λ ~ Beta(α, α) per batch, each sample i mixed
// with sample i-1 of the same batch (sample 0 with the last: the batch rolled by one), and
// targets one-hot float soft labels  λ·onehot(y_i) + (1-λ)·onehot(y_{i-1}).
//   MixUp:  x_i <- λ·x_i + (1-λ)·x_{i-1}
//   CutMix: one box per batch, centre uniform over the image, half sides int(r·W), int(r·H)
//           with r = sqrt(1-λ)/2, clamped to the image; x_i's box <- x_{i-1}'s box; λ is then
//           recomputed as 1 - box area / image area (so labels match the pasted pixels).
//
// Determinism: the draw is a pure function of (seed, epoch, batch index, global rank), never
// of which worker finished the batch, so batches are identical for any worker count and exact
// on resume. Pixels: uint8 rounds to nearest (λ in 1/65536 steps); float16 mixes in float32
// and rounds once; float32 is exact float arithmetic. Layout (NCHW/NHWC) only matters to the
// CutMix box.
#pragma once

#include <cstdint>

#include "config/config.hpp"
#include "core/rng.hpp"
#include "stoker/proto/layout.hpp"

namespace stoker::job {

enum class MixKind : std::uint8_t { kNone, kMixUp, kCutMix };

// One batch's draw.
struct MixDraw {
  MixKind kind = MixKind::kNone;
  double lambda = 1;  // weight of the sample itself (CutMix: after the box correction)
  // CutMix box, half-open [x1, x2) x [y1, y2) in output pixels (may be empty).
  std::uint32_t x1 = 0, y1 = 0, x2 = 0, y2 = 0;
};

// A Beta(a, b) variate (a, b > 0) from two Gamma variates, computed in log space so that
// very small alphas (λ close to 0 or 1) never give 0/0.
double sample_beta(CounterRng& rng, double a, double b);

// The draw of batch `batch_index` of `epoch` for global rank `rank`: MixUp or CutMix (with
// `switch_prob` for CutMix when both are on), λ, and the box for an image of `height` x `width`.
MixDraw draw_mix(const config::MixConfig& mix, std::uint64_t seed, std::uint64_t epoch,
                 std::uint64_t batch_index, std::uint32_t rank, std::uint32_t height, std::uint32_t width);

// A finished batch in its slot: `count` samples of `geometry` at `images`, their class indices
// (`labels`, count of them) and the soft-label rows to write (`soft`, count x num_classes of
// `label_dtype`, float16 or float32).
struct MixBatch {
  void* images = nullptr;
  std::uint32_t count = 0;
  proto::BatchGeometry geometry{};
  const std::int64_t* labels = nullptr;
  void* soft = nullptr;
  std::uint32_t num_classes = 0;
  proto::DType label_dtype = proto::DType::kFloat32;
};

// Mixes the images in place and writes the soft labels. kNone (or count 0) writes one-hot
// rows and leaves the pixels; a batch of one is mixed with itself (pixels unchanged, its row
// one-hot). A label outside [0, num_classes) contributes nothing to its rows.
void apply_mix(const MixDraw& draw, const MixBatch& batch);

// The soft-label dtype a mixing job uses for images of `image_dtype`: float16 for float16
// images, float32 otherwise (uint8 included).
constexpr proto::DType soft_label_dtype(proto::DType image_dtype) {
  return image_dtype == proto::DType::kFloat16 ? proto::DType::kFloat16 : proto::DType::kFloat32;
}

}  // namespace stoker::job
