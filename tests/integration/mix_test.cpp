// Integration tier: MixUp/CutMix end to end. A real stokerd serves the same dataset with the
// same seed twice, once plain and once mixed; since per-sample randomness depends only on
// (seed, epoch, sample id), the plain job's batch is the x that the mixed job's batch must be
// λ·x + (1-λ)·x.roll(1) of (CutMix: x with the previous sample's box). λ is read back from
// the soft labels, so pixels and labels are checked against each other.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>

#include "batch_copy.hpp"
#include "daemon_fixture.hpp"
#include "stoker/stoker.hpp"

using namespace stoker::test;

namespace {

constexpr int kClasses = 4;  // tests/data/demo: 4 classes x 16 photos, label = id / 16

struct MixedBatch {
  std::uint64_t epoch, index;
  std::vector<std::int64_t> ids;
  std::vector<std::uint8_t> bytes;  // images
  std::vector<std::uint8_t> soft;   // label rows, raw
  bool last;
};

MixedBatch take_mixed(stoker::Client& c) {
  stoker::Batch b = c.next(30000);
  const auto& info = c.info();
  const std::uint64_t row = std::uint64_t{info.label_width} * (info.label_dtype == STOKER_FLOAT16 ? 2 : 4);
  MixedBatch m{b.epoch(), b.index(), {}, {}, {}, b.last_in_epoch()};
  m.ids.assign(b.ids(), b.ids() + b.count());
  m.bytes.assign(b.images(), b.images() + info.image_bytes * b.count());
  const auto* soft = b.soft_labels<std::uint8_t>();
  m.soft.assign(soft, soft + row * b.count());
  CHECK(b.labels() == nullptr);  // no int64 view of soft labels
  const auto shape = b.label_shape();
  CHECK(shape[0] == b.count());
  CHECK(shape[1] == info.label_width);
  return m;
}

std::vector<MixedBatch> take_mixed_epochs(stoker::Client& c, int epochs) {
  std::vector<MixedBatch> out;
  for (int e = 0; e < epochs; ++e) {
    do {
      out.push_back(take_mixed(c));
    } while (!out.back().last);
  }
  return out;
}

float soft_value(const MixedBatch& m, std::uint32_t i, std::uint32_t k) {
  float f;
  std::memcpy(&f, m.soft.data() + 4 * (i * kClasses + k), 4);
  return f;
}

float pixel(const std::vector<std::uint8_t>& bytes, bool f32, std::uint64_t k) {
  if (!f32) return bytes[k];
  float f;
  std::memcpy(&f, bytes.data() + 4 * k, 4);
  return f;
}

// λ of a batch from its soft rows (float32): the weight of a sample's own class wherever it
// differs from its partner's; every such row must give the same λ (one λ per batch), and
// every row must be exactly λ·onehot(own) + (1-λ)·onehot(previous). -1: no such row.
double lambda_of(const MixedBatch& m) {
  const std::uint32_t n = static_cast<std::uint32_t>(m.ids.size());
  double lambda = -1;
  for (std::uint32_t i = 0; i < n; ++i) {
    const std::int64_t own = m.ids[i] / 16, partner = m.ids[(i + n - 1) % n] / 16;
    double sum = 0;
    for (std::uint32_t k = 0; k < kClasses; ++k) {
      const float v = soft_value(m, i, k);
      sum += v;
      if (k != own && k != partner) REQUIRE(v == 0.0f);
    }
    REQUIRE(sum == Approx(1.0).margin(1e-6));
    if (own == partner) {
      REQUIRE(soft_value(m, i, static_cast<std::uint32_t>(own)) == 1.0f);
      continue;
    }
    const double l = soft_value(m, i, static_cast<std::uint32_t>(own));
    REQUIRE(soft_value(m, i, static_cast<std::uint32_t>(partner)) == Approx(1 - l).margin(1e-6));
    if (lambda < 0) lambda = l;
    REQUIRE(l == Approx(lambda).margin(1e-7));
  }
  return lambda;
}

}  // namespace

TEST_CASE("mixup: pixels are lambda x + (1 - lambda) x.roll(1) of the unmixed batch, labels agree", "[integration][mix]") {
  TempDir dir;
  const auto socket = (dir.path() / "s.sock").string();
  JobSpec plain;
  plain.name = "plain";
  JobSpec mixed = plain;
  mixed.name = "mixed";
  mixed.extra = "    mixup: {alpha: 0.4}\n";
  Daemon d(write_config(dir.path(), {plain, mixed}, 2), socket);

  stoker::ClientOptions o;
  o.socket_path = socket;
  stoker::Client cp("plain", 0, o), cm("mixed", 0, o);
  CHECK(cp.info().label_dtype == STOKER_INT64);
  CHECK(cp.info().label_width == 1);
  REQUIRE(cm.info().label_dtype == STOKER_FLOAT32);  // uint8 images: float32 soft labels
  REQUIRE(cm.info().label_width == kClasses);

  const std::uint64_t per = cm.info().image_bytes;
  std::set<double> lambdas;
  int checked = 0;
  for (int epoch = 0; epoch < 2; ++epoch) {
    const auto xs = take_epoch(cp);
    const auto ys = take_mixed_epochs(cm, 1);
    REQUIRE(xs.size() == ys.size());
    for (std::size_t b = 0; b < xs.size(); ++b) {
      const auto& x = xs[b];
      const auto& y = ys[b];
      REQUIRE(x.ids == y.ids);
      const double lambda = lambda_of(y);
      if (lambda < 0) continue;  // every neighbour of the same class: λ not observable
      lambdas.insert(lambda);
      const std::uint32_t n = static_cast<std::uint32_t>(x.ids.size());
      for (std::uint32_t i = 0; i < n; ++i) {
        const std::uint32_t p = (i + n - 1) % n;
        for (std::uint64_t k = 0; k < per; ++k) {
          const double want = lambda * x.bytes[i * per + k] + (1 - lambda) * x.bytes[p * per + k];
          // uint8 rounds to nearest (λ in 1/65536 steps).
          REQUIRE(std::abs(y.bytes[i * per + k] - want) <= 0.51);
        }
      }
      ++checked;
    }
  }
  CHECK(checked >= 12);
  CHECK(lambdas.size() >= 10);  // λ varies between batches
}

TEST_CASE("cutmix: the previous sample's box replaces the sample's, its area gives lambda (float32 NHWC)", "[integration][mix]") {
  TempDir dir;
  const auto socket = (dir.path() / "s.sock").string();
  JobSpec plain;
  plain.name = "plain";
  plain.pipeline_yaml =
      "    pipeline:\n"
      "      - decode: {}\n"
      "      - random_resized_crop: {size: 24}\n"
      "      - horizontal_flip: {p: 0.5}\n"
      "      - normalize: {mean: [0.485, 0.456, 0.406], std: [0.229, 0.224, 0.225]}\n"
      "    output: {dtype: float32, layout: NHWC}\n";
  JobSpec mixed = plain;
  mixed.name = "mixed";
  mixed.extra = "    cutmix: {alpha: 1.0}\n";
  Daemon d(write_config(dir.path(), {plain, mixed}, 2), socket);

  stoker::ClientOptions o;
  o.socket_path = socket;
  stoker::Client cp("plain", 0, o), cm("mixed", 0, o);
  REQUIRE(cm.info().label_dtype == STOKER_FLOAT32);
  const std::uint32_t H = 24, W = 24, C = 3;
  const auto xs = take_epoch(cp);
  const auto ys = take_mixed_epochs(cm, 1);
  REQUIRE(xs.size() == ys.size());
  int boxes = 0;
  for (std::size_t b = 0; b < xs.size(); ++b) {
    const auto& x = xs[b];
    const auto& y = ys[b];
    REQUIRE(x.ids == y.ids);
    const std::uint32_t n = static_cast<std::uint32_t>(x.ids.size());
    const std::uint64_t per = std::uint64_t{H} * W * C;
    // Per pixel: taken from the partner in every sample, or kept in every sample.
    std::uint32_t x1 = W, y1 = H, x2 = 0, y2 = 0;
    std::vector<int> from_partner(H * W);
    for (std::uint32_t py = 0; py < H; ++py) {
      for (std::uint32_t px = 0; px < W; ++px) {
        bool all_own = true, all_partner = true;
        for (std::uint32_t i = 0; i < n; ++i) {
          const std::uint32_t p = (i + n - 1) % n;
          for (std::uint32_t c = 0; c < C; ++c) {
            const std::uint64_t k = (std::uint64_t{py} * W + px) * C + c;
            const float v = pixel(y.bytes, true, i * per + k);
            all_own = all_own && v == pixel(x.bytes, true, i * per + k);
            all_partner = all_partner && v == pixel(x.bytes, true, p * per + k);
          }
        }
        INFO("batch " << b << " pixel " << px << "," << py);
        REQUIRE((all_own || all_partner));
        if (all_partner && !all_own) {
          from_partner[py * W + px] = 1;
          x1 = std::min(x1, px), y1 = std::min(y1, py), x2 = std::max(x2, px + 1), y2 = std::max(y2, py + 1);
        }
      }
    }
    // The pasted pixels form one rectangle (the box), and λ = 1 - its area / the image's.
    const double area = x2 > x1 ? double(x2 - x1) * (y2 - y1) : 0.0;
    for (std::uint32_t py = y1; py < y2; ++py) {
      for (std::uint32_t px = x1; px < x2; ++px) REQUIRE(from_partner[py * W + px] == 1);
    }
    const double lambda = lambda_of(y);
    if (lambda >= 0) REQUIRE(lambda == Approx(1.0 - area / (H * W)).margin(1e-6));
    boxes += area > 0 ? 1 : 0;
  }
  CHECK(boxes >= 4);
}

TEST_CASE("mixed batches are identical for 1 and 2 workers and on resume (mixup + cutmix, float16)", "[integration][mix]") {
  JobSpec job;
  job.name = "mixed";
  job.dtype = "float16";
  job.pipeline_yaml =
      "    pipeline:\n"
      "      - decode: {}\n"
      "      - random_resized_crop: {size: 16}\n"
      "      - normalize: {mean: [0.5, 0.5, 0.5], std: [0.25, 0.25, 0.25]}\n"
      "    output: {dtype: float16, layout: NCHW}\n";
  job.extra = "    mixup: {alpha: 0.2}\n    cutmix: {alpha: 1.0}\n    mix_switch_prob: 0.5\n";
  TempDir d1, d2;
  const auto s1 = (d1.path() / "s.sock").string(), s2 = (d2.path() / "s.sock").string();
  Daemon one(write_config(d1.path(), {job}, 1), s1);
  Daemon two(write_config(d2.path(), {job}, 2), s2);
  stoker::ClientOptions o1, o2;
  o1.socket_path = s1;
  o2.socket_path = s2;
  std::vector<MixedBatch> a, b;
  {
    stoker::Client c1("mixed", 0, o1), c2("mixed", 0, o2);
    REQUIRE(c1.info().label_dtype == STOKER_FLOAT16);  // float16 images: float16 soft labels
    a = take_mixed_epochs(c1, 2);
    b = take_mixed_epochs(c2, 2);
  }
  REQUIRE(a.size() == b.size());
  std::set<std::vector<std::uint8_t>> distinct_rows;
  for (std::size_t i = 0; i < a.size(); ++i) {
    CHECK(a[i].ids == b[i].ids);
    CHECK(a[i].bytes == b[i].bytes);
    CHECK(a[i].soft == b[i].soft);
    distinct_rows.insert(a[i].soft);
  }
  CHECK(distinct_rows.size() == a.size());

  // Resume at epoch 1, batch 3: the same batch as the uninterrupted run's.
  stoker::ClientOptions r = o2;
  r.start_epoch = 1;
  r.start_batch = 3;
  stoker::Client c("mixed", 0, r);
  const auto resumed = take_mixed(c);
  const auto& want = a[8 + 3];
  REQUIRE(resumed.epoch == 1);
  REQUIRE(resumed.index == 3);
  CHECK(resumed.ids == want.ids);
  CHECK(resumed.bytes == want.bytes);
  CHECK(resumed.soft == want.soft);
}

TEST_CASE("stokerctl consume --dump writes soft labels as float [n, classes]", "[integration][mix]") {
  TempDir dir;
  const auto socket = (dir.path() / "s.sock").string();
  JobSpec mixed;
  mixed.name = "mixed";
  mixed.extra = "    mixup: {alpha: 1.0}\n";
  Daemon d(write_config(dir.path(), {mixed}, 2), socket);
  const auto dump = dir.path() / "dump";
  std::filesystem::create_directories(dump);
  std::string out;
  REQUIRE(run_program({std::string(STOKER_BIN_DIR) + "/stokerctl", "consume", "--job", "mixed", "--socket", socket,
                       "--batches", "2", "--ids", "--dump", dump.string()},
                      out) == 0);
  INFO(out);
  CHECK(out.find("\"labels\":[[[") != std::string::npos);  // [[class, weight], ...] per sample
  std::ifstream f(dump / "e0_b0.labels.npy", std::ios::binary);
  REQUIRE(f);
  const std::string npy((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  CHECK(npy.find("'descr': '<f4'") != std::string::npos);
  CHECK(npy.find("'shape': (8, 4)") != std::string::npos);
  const std::size_t header = 10 + (static_cast<unsigned char>(npy[8]) | static_cast<unsigned char>(npy[9]) << 8);
  REQUIRE(npy.size() == header + 8 * 4 * 4);
  for (int i = 0; i < 8; ++i) {
    float sum = 0;
    for (int k = 0; k < 4; ++k) {
      float v;
      std::memcpy(&v, npy.data() + header + 4 * (i * 4 + k), 4);
      sum += v;
    }
    CHECK(sum == Approx(1.0f).margin(1e-6));
  }
}
