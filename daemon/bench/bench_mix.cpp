// Benchmark (not a test): what MixUp/CutMix cost per batch, on one core, for the output
// dtypes, as the last worker of a batch runs it (outside the ring's lock). Prints one line per
// case: dtype, kind, batch, microseconds per batch and per sample.
//   build/bin/stoker_bench_mix [batch=256] [size=224] [reps=20]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "job/batch_mix.hpp"

using namespace stoker;

int main(int argc, char** argv) {
  const std::uint32_t batch = argc > 1 ? std::atoi(argv[1]) : 256;
  const std::uint32_t size = argc > 2 ? std::atoi(argv[2]) : 224;
  const int reps = argc > 3 ? std::atoi(argv[3]) : 20;
  const std::uint32_t classes = 1000;
  for (const auto dtype : {proto::DType::kUInt8, proto::DType::kFloat16, proto::DType::kFloat32}) {
    proto::BatchGeometry g{batch, 3, size, size, dtype, proto::Layout::kNCHW,
                           std::uint64_t{3} * size * size * proto::dtype_size(dtype)};
    std::vector<std::uint8_t> images(g.image_bytes * batch, 0);
    for (std::size_t k = 0; k < images.size(); ++k) images[k] = static_cast<std::uint8_t>(k * 2654435761u >> 7);
    if (dtype == proto::DType::kFloat16) {  // finite halves: clear the top exponent bit
      for (std::size_t k = 1; k < images.size(); k += 2) images[k] &= 0x3f;
    }
    if (dtype == proto::DType::kFloat32) {
      for (std::size_t k = 3; k < images.size(); k += 4) images[k] = 0x3f;
    }
    std::vector<std::int64_t> labels(batch);
    for (std::uint32_t i = 0; i < batch; ++i) labels[i] = (i * 37) % classes;
    const auto ldt = job::soft_label_dtype(dtype);
    std::vector<std::uint8_t> soft(std::uint64_t{batch} * classes * proto::dtype_size(ldt));
    for (const auto kind : {job::MixKind::kMixUp, job::MixKind::kCutMix}) {
      config::MixConfig mix;
      (kind == job::MixKind::kMixUp ? mix.mixup_alpha : mix.cutmix_alpha) = 1.0;
      double total = 0;
      for (int r = 0; r < reps; ++r) {
        const auto d = job::draw_mix(mix, 1, 0, r, 0, size, size);
        const auto t0 = std::chrono::steady_clock::now();
        job::apply_mix(d, {images.data(), batch, g, labels.data(), soft.data(), classes, ldt});
        total += std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
      }
      const double per_batch = total / reps;
      std::printf("dtype=%s kind=%s batch=%u size=%u classes=%u us_per_batch=%.0f us_per_sample=%.2f\n",
                  dtype == proto::DType::kUInt8 ? "uint8" : dtype == proto::DType::kFloat16 ? "float16" : "float32",
                  kind == job::MixKind::kMixUp ? "mixup" : "cutmix", batch, size, classes, per_batch,
                  per_batch / batch);
    }
  }
  return 0;
}
