// stoker_bench_decode DIR [SECONDS] [ROUNDS]: the engine on one core, no daemon, files in
// memory. Prints one line per measurement: "<name> <images/s> x_full_decode=<ratio>
// [breakdown]", images/s being the median of ROUNDS interleaved rounds. The reference ceiling is
// libjpeg-turbo's plain full decode of the same files (RGB, all rows, no scaling).
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <jpeglib.h>

#include "bench/bench_common.hpp"
#include "image/sample_processor.hpp"

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

// Plain libjpeg-turbo full decode (what a loader without window decoding pays at least).
void full_decode(const std::vector<std::uint8_t>& f, std::vector<std::uint8_t>& out) {
  jpeg_decompress_struct c;
  jpeg_error_mgr err;
  c.err = jpeg_std_error(&err);
  jpeg_create_decompress(&c);
  jpeg_mem_src(&c, f.data(), f.size());
  jpeg_read_header(&c, TRUE);
  c.out_color_space = JCS_RGB;
  jpeg_start_decompress(&c);
  out.resize(static_cast<std::size_t>(c.output_width) * c.output_height * 3);
  while (c.output_scanline < c.output_height) {
    JSAMPROW row = out.data() + static_cast<std::size_t>(c.output_scanline) * c.output_width * 3;
    jpeg_read_scanlines(&c, &row, 1);
  }
  jpeg_finish_decompress(&c);
  jpeg_destroy_decompress(&c);
}

// A measurement taken as rounds interleaved with the others, so that a neighbour's load on a
// shared machine slows all of them alike; the median round is reported.
struct Measurement {
  std::string name;
  std::function<double(double)> round;  // runs one round, returns images/s
  std::function<std::string()> detail;
  std::vector<double> rates;
  double median() const { return stoker::bench::median(rates); }
};

struct Engine {
  explicit Engine(const stoker::image::PipelineSpec& spec) : processor(spec), out(spec.sample_bytes()) {}
  stoker::image::SampleProcessor processor;
  std::vector<std::uint8_t> out;
  stoker::image::Breakdown bd;
  std::size_t bad = 0, next_id = 0;
};

Measurement engine(const char* name, const stoker::image::PipelineSpec& spec,
                   const std::vector<std::vector<std::uint8_t>>& files) {
  auto e = std::make_shared<Engine>(spec);
  Measurement m;
  m.name = name;
  m.round = [e, &files](double seconds) {
    return stoker::bench::timed_round(files, seconds, [&](const auto& f, std::size_t) {
      e->bad += e->processor.process(f, 1, 0, e->next_id++, e->out.data(), &e->bd).ok() ? 0 : 1;
    });
  };
  m.detail = [e] {
    const double ms = 1000.0 / static_cast<double>(e->bd.samples);
    char buf[160];
    std::snprintf(buf, sizeof buf, " header_ms=%.3f decode_ms=%.3f resize_ms=%.3f write_ms=%.3f failed=%zu",
                  e->bd.header_s * ms, e->bd.decode_s * ms, e->bd.resize_s * ms, e->bd.write_s * ms, e->bad);
    return std::string(buf);
  };
  return m;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: stoker_bench_decode DIR [SECONDS] [ROUNDS]\n");
    return 2;
  }
  const double seconds = argc > 2 ? std::atof(argv[2]) : 5.0;  // per measurement, all rounds
  const int rounds = argc > 3 ? std::max(1, std::atoi(argv[3])) : 5;
  namespace bench = stoker::bench;
  auto load = [dir = fs::path(argv[1])] { return bench::read_files(bench::list_files(dir, bench::Walk::kRecursive, true)); };
  load();  // once to warm the page cache, then timed: the daemon reads the same way
  const auto t_read = Clock::now();
  const auto files = load();
  const double read_s = std::chrono::duration<double>(Clock::now() - t_read).count();
  if (files.empty()) {
    std::fprintf(stderr, "no JPEGs under %s\n", argv[1]);
    return 1;
  }
  const std::size_t bytes = stoker::bench::total_bytes(files);
  std::printf("files %zu mean_kib %.1f read_ms %.3f (page cache, per file)\n", files.size(),
              bytes / 1024.0 / files.size(), read_s * 1000.0 / files.size());

  std::vector<std::uint8_t> scratch;
  std::vector<Measurement> ms;
  ms.push_back({"full_decode",
                [&](double sec) { return stoker::bench::timed_round(files, sec, [&](const auto& f, std::size_t) { full_decode(f, scratch); }); },
                [] { return std::string(); }, {}});
  stoker::image::PipelineSpec train;
  train.geometry = stoker::image::Geometry::kRandomResizedCrop;
  train.flip_probability = 0.5;
  ms.push_back(engine("train_uint8", train, files));
  auto train_f32 = train;
  train_f32.dtype = stoker::proto::DType::kFloat32;
  train_f32.normalize = true;
  train_f32.mean = {0.485f, 0.456f, 0.406f};
  train_f32.stddev = {0.229f, 0.224f, 0.225f};
  ms.push_back(engine("train_float32", train_f32, files));
  stoker::image::PipelineSpec val;  // Resize 256 + CenterCrop 224
  ms.push_back(engine("val_uint8", val, files));  // decode.dct_scale auto: full-scale decode
  // The two decode paths side by side (decode.dct_scale): reduced-scale val, full-scale train.
  auto val_dct = val;
  val_dct.dct_scale = stoker::image::DctScale::kAlways;
  ms.push_back(engine("val_uint8_dct_always", val_dct, files));
  auto train_full = train;
  train_full.dct_scale = stoker::image::DctScale::kNever;
  ms.push_back(engine("train_uint8_dct_never", train_full, files));

  for (int r = 0; r < rounds; ++r) {
    for (auto& m : ms) m.rates.push_back(m.round(seconds / rounds));
  }
  const double ceiling = ms[0].median();
  for (const auto& m : ms) {
    std::printf("%s %.1f x_full_decode=%.2f%s\n", m.name.c_str(), m.median(), m.median() / ceiling,
                m.detail().c_str());
  }
  return 0;
}
