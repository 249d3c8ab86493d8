// stoker_bench_formats DIR [SECONDS] [ROUNDS]: the decoders of each image format on one core,
// files in memory. DIR holds one folder per format (scripts/bench-formats.py writes them from
// the same real photos); every folder is measured as
//   decode       the whole image to RGB (what PIL's open + convert("RGB") does)
//   train_uint8  the daemon's per-sample work: RandomResizedCrop 224 + flip, uint8
// and a WebP folder also as
//   train_uint8_whole  the same with WebP region-and-scale decoding off (the whole image
//                      decoded, then cropped), to show what the window and rescaler save.
// Prints "<format> <measurement> <images/s>", images/s being images per second of this
// thread's CPU time (one core's cost, unmoved by other processes on a shared machine: there
// wall-clock rates moved 2.5x with the neighbours' load), the median of ROUNDS rounds
// interleaved across every format and measurement.
#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <ctime>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "bench/bench_common.hpp"
#include "image/jpeg_decoder.hpp"
#include "image/other_decoders.hpp"
#include "image/png_decoder.hpp"
#include "image/sample_processor.hpp"

namespace fs = std::filesystem;
using namespace stoker::image;

namespace {

using stoker::bench::Files;

// Whole-image decode to packed RGB by whichever decoder the content picks. False: refused.
struct WholeDecoder {
  JpegDecoder jpeg;
  std::vector<std::uint8_t> rgb;
  bool operator()(const std::vector<std::uint8_t>& f) {
    SampleResult r;
    std::uint32_t w = 0, h = 0;
    if (f.size() >= 3 && f[0] == 0xff && f[1] == 0xd8) {
      JpegHeader hd;
      if (!jpeg.read_header(f, false, hd, r)) return false;
      int stride = 0, x = 0, y = 0;
      return jpeg.decode(JpegWindow{8, 0, 0, static_cast<int>(hd.width), static_cast<int>(hd.height)}, rgb, stride, x,
                         y, r);
    }
    if (f.size() >= 8 && f[0] == 0x89 && f[1] == 'P') return decode_png(f, 1u << 30, rgb, w, h, r);
    OtherFormat o;
    int orientation = 1;
    return sniff_other(f, o) && decode_other(o, f, 1u << 30, rgb, w, h, orientation, r);
  }
};

// One timed round: at least `seconds` of CPU time and at least one pass over the files.
double rate(const Files& files, double seconds, const std::function<bool(const std::vector<std::uint8_t>&)>& one,
            std::size_t& failed) {
  return stoker::bench::timed_round(
      files, seconds, [&](const auto& f, std::size_t) { failed += one(f) ? 0 : 1; }, &stoker::bench::thread_cpu_s);
}

struct Measurement {
  std::string format, name;
  const Files* files;
  std::function<bool(const std::vector<std::uint8_t>&)> one;
  std::vector<double> rates;
  std::size_t failed = 0;
  double median() const { return stoker::bench::median(rates); }
};

std::function<bool(const std::vector<std::uint8_t>&)> pipeline(const PipelineSpec& spec) {
  auto p = std::make_shared<SampleProcessor>(spec);
  auto out = std::make_shared<std::vector<std::uint8_t>>(spec.sample_bytes());
  auto id = std::make_shared<std::uint64_t>(0);
  return [p, out, id](const std::vector<std::uint8_t>& f) { return p->process(f, 1, 0, (*id)++, out->data()).ok(); };
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: stoker_bench_formats DIR [SECONDS] [ROUNDS]\n");
    return 2;
  }
  const double seconds = argc > 2 ? std::atof(argv[2]) : 2.0;  // per measurement, all rounds
  const int rounds = argc > 3 ? std::max(1, std::atoi(argv[3])) : 5;
  std::vector<std::pair<std::string, Files>> sets;
  std::vector<fs::path> dirs;
  for (const auto& e : fs::directory_iterator(argv[1])) {
    if (e.is_directory()) dirs.push_back(e.path());
  }
  std::sort(dirs.begin(), dirs.end());
  for (const auto& d : dirs) {
    Files f = stoker::bench::read_files(stoker::bench::list_files(d, stoker::bench::Walk::kTop, false));
    if (!f.empty()) sets.emplace_back(d.filename().string(), std::move(f));
  }
  if (sets.empty()) {
    std::fprintf(stderr, "no format folders under %s\n", argv[1]);
    return 1;
  }
  PipelineSpec train;
  train.geometry = Geometry::kRandomResizedCrop;
  train.flip_probability = 0.5;
  PipelineSpec train_whole = train;
  train_whole.webp_region_decode = false;

  std::vector<Measurement> ms;
  for (const auto& [format, files] : sets) {
    const std::size_t bytes = stoker::bench::total_bytes(files);
    std::printf("%s files %zu mean_kib %.1f\n", format.c_str(), files.size(), bytes / 1024.0 / files.size());
    auto whole = std::make_shared<WholeDecoder>();
    ms.push_back({format, "decode", &files, [whole](const auto& f) { return (*whole)(f); }, {}});
    ms.push_back({format, "train_uint8", &files, pipeline(train), {}});
    if (format.find("webp") != std::string::npos) {
      ms.push_back({format, "train_uint8_whole", &files, pipeline(train_whole), {}});
    }
  }
  for (int r = 0; r < rounds; ++r) {
    for (auto& m : ms) m.rates.push_back(rate(*m.files, seconds / rounds, m.one, m.failed));
  }
  for (const auto& m : ms) {
    std::printf("%s %s %.1f%s\n", m.format.c_str(), m.name.c_str(), m.median(),
                m.failed ? (" failed=" + std::to_string(m.failed)).c_str() : "");
  }
  return 0;
}
