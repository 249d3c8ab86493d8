// Unit tier: config validation, the ImageFolder scan and the sampler's maths.
#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <numeric>
#include <set>

#include "config/config.hpp"
#include "sampler/sampler.hpp"
#include "source/dataset.hpp"

namespace fs = std::filesystem;
using stoker::config::ConfigError;
using stoker::config::parse_config;

namespace {

const std::string kDemo = std::string(STOKER_TEST_DATA_DIR) + "/demo";

std::string job(const std::string& body) {
  return "jobs:\n  demo:\n    source: {type: imagefolder, root: \"" + kDemo + "\"}\n" + body;
}

const std::string kPipeline =
    "    pipeline:\n"
    "      - decode: {}\n"
    "      - random_resized_crop: {size: 224}\n"
    "    output: {dtype: uint8, layout: NCHW}\n";

// The message of the ConfigError a YAML text raises ("" when it is accepted).
std::string refusal(const std::string& yaml) {
  try {
    parse_config(yaml, "test.yaml", STOKER_SOURCE_DIR);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("the shipped configs parse", "[config]") {
  for (const char* name : {"demo.yaml", "imagenet-train.yaml", "imagenet-val.yaml"}) {
    const fs::path p = fs::path(STOKER_SOURCE_DIR) / "configs" / name;
    std::ifstream in(p);
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    // The ImageNet configs point at /data/imagenet: aim them at the demo data for the test.
    for (const std::string from : {"/data/imagenet/train", "/data/imagenet/val"}) {
      for (auto pos = text.find(from); pos != std::string::npos; pos = text.find(from)) {
        text.replace(pos, from.size(), kDemo);
      }
    }
    INFO(name);
    const auto cfg = parse_config(text, p.string(), p.parent_path());
    REQUIRE(cfg.jobs.size() >= 1);
    CHECK(cfg.jobs[0].batch_size > 0);
  }
}

TEST_CASE("a good config fills every field", "[config]") {
  const auto cfg = parse_config(
      "server: {workers: 3, log_level: debug}\n" +
          job("    batch_size: 32\n    shuffle: false\n    seed: 9\n    drop_last: true\n"
              "    consumers: 4\n    prefetch: 2\n    on_error: substitute\n"
              "    pipeline:\n      - decode: {exif_orientation: false, strict: true, max_pixels: 1000}\n"
              "      - random_resized_crop: {size: [100, 120], scale: [0.5, 1], ratio: [0.5, 2]}\n"
              "      - horizontal_flip: {p: 0.25}\n"
              "      - normalize: {mean: [0.1, 0.2, 0.3], std: [1, 2, 4]}\n"
              "    output: {dtype: float16, layout: NHWC}\n"),
      "test.yaml", STOKER_SOURCE_DIR);
  CHECK(cfg.server.workers == 3);
  const auto& j = cfg.jobs.at(0);
  CHECK(j.name == "demo");
  CHECK(j.batch_size == 32);
  CHECK_FALSE(j.shuffle);
  CHECK(j.seed == 9);
  CHECK(j.drop_last);
  CHECK(j.consumers == 4);
  CHECK(j.prefetch == 2);
  CHECK(j.on_error == stoker::config::OnError::kSubstitute);
  CHECK_FALSE(j.pipeline.apply_exif_orientation);
  CHECK(j.pipeline.strict);
  CHECK(j.pipeline.max_pixels == 1000);
  CHECK(j.pipeline.geometry == stoker::image::Geometry::kRandomResizedCrop);
  CHECK(j.pipeline.out_height == 100);
  CHECK(j.pipeline.out_width == 120);
  CHECK(j.pipeline.scale[0] == 0.5);
  CHECK(j.pipeline.ratio[1] == 2.0);
  CHECK(j.pipeline.flip_probability == 0.25);
  CHECK(j.pipeline.normalize);
  CHECK(j.pipeline.stddev[2] == 4.0f);
  CHECK(j.pipeline.dtype == stoker::proto::DType::kFloat16);
  CHECK(j.pipeline.layout == stoker::proto::Layout::kNHWC);
}

TEST_CASE("bad configs are refused with file:line:col and the key path", "[config]") {
  struct Case {
    std::string yaml, where, contains;
  };
  const std::vector<Case> cases = {
      {job("    batch_size: 0\n" + kPipeline), "test.yaml:4:17: jobs.demo.batch_size", "between 1"},
      {job("    batch_size: abc\n" + kPipeline), "test.yaml:4:17: jobs.demo.batch_size", "expected an integer, got 'abc'"},
      {job("    batch_size: 8\n    bach: 1\n" + kPipeline), "test.yaml:5:5: jobs.demo.bach", "unknown key"},
      {job(kPipeline), "jobs.demo.batch_size", "required key is missing"},
      {job("    batch_size: 8\n    consumers: 0\n" + kPipeline), "test.yaml:5:16: jobs.demo.consumers", "between 1"},
      {job("    batch_size: 8\n    shuffle: maybe\n" + kPipeline), "test.yaml:5:14: jobs.demo.shuffle", "true or false"},
      {job("    batch_size: 8\n    on_error: ignore\n" + kPipeline), "jobs.demo.on_error", "skip, substitute, fail"},
      {job("    batch_size: 8\n    pipeline:\n      - decode: {}\n      - random_resized_crop: {size: 224, scale: [0.5, 1.5]}\n"
           "    output: {dtype: uint8}\n"),
       "test.yaml:7:49: jobs.demo.pipeline[1].random_resized_crop.scale", "0 < min <= max <= 1"},
      {job("    batch_size: 8\n    pipeline:\n      - decode: {}\n      - random_resized_crop: {size: 224, ratio: [2, 1]}\n"
           "    output: {dtype: uint8}\n"),
       "jobs.demo.pipeline[1].random_resized_crop.ratio", "min <= max"},
      {job("    batch_size: 8\n    pipeline:\n      - random_resized_crop: {size: 224}\n    output: {}\n"),
       "jobs.demo.pipeline[0].random_resized_crop", "first step must be 'decode'"},
      {job("    batch_size: 8\n    pipeline:\n      - decode: {}\n      - horizontal_flip: {p: 2}\n    output: {}\n"),
       "jobs.demo.pipeline[1].horizontal_flip.p", "within [0, 1]"},
      {job("    batch_size: 8\n    pipeline:\n      - decode: {}\n      - resize: {size: 256}\n    output: {}\n"),
       "jobs.demo.pipeline", "center_crop"},
      {job("    batch_size: 8\n    pipeline:\n      - decode: {}\n      - random_resized_crop: {size: 32}\n"
           "      - normalize: {mean: [0, 0, 0], std: [1, 0, 1]}\n    output: {dtype: float32}\n"),
       "jobs.demo.pipeline[2].normalize.std", "> 0"},
      {job("    batch_size: 8\n    pipeline:\n      - decode: {}\n      - random_resized_crop: {size: 32}\n"
           "      - normalize: {mean: [0, 0, 0], std: [1, 1, 1]}\n    output: {dtype: uint8}\n"),
       "jobs.demo.output.dtype", "float16 or float32"},
      {job("    batch_size: 8\n    pipeline:\n      - decode: {}\n      - random_resized_crop: {size: 32}\n"
           "    output: {dtype: int8}\n"),
       "jobs.demo.output.dtype", "uint8, float16, float32"},
      {"jobs:\n  demo:\n    source: {root: /nonexistent/stoker}\n    batch_size: 8\n" + kPipeline,
       "test.yaml:3:20: jobs.demo.source.root", "not an existing directory"},
      {"jobs:\n  bad name!:\n    batch_size: 8\n", "test.yaml:2:3: jobs.bad name!", "job names"},
      {"jobs: [1, 2\n", "test.yaml:", "(yaml)"},
      {"", "test.yaml:1:1", "empty"},
      {"server: {workers: -1}\n" + job("    batch_size: 8\n" + kPipeline), "test.yaml:1:19: server.workers", "between 0"},
      {"server: {handshake_timeout_s: 0}\n" + job("    batch_size: 8\n" + kPipeline),
       "server.handshake_timeout_s", "within (0, 3600]"},
  };
  for (const auto& c : cases) {
    INFO(c.yaml);
    const std::string msg = refusal(c.yaml);
    CHECK_THAT(msg, Catch::Contains(c.where) && Catch::Contains(c.contains));
  }
}

TEST_CASE("a config file that cannot be read names the file", "[config]") {
  try {
    stoker::config::load_config("/nonexistent/stoker.yaml");
    FAIL("accepted");
  } catch (const ConfigError& e) {
    CHECK_THAT(e.what(), Catch::Contains("/nonexistent/stoker.yaml") && Catch::Contains("cannot read"));
  }
}

TEST_CASE("ImageFolder: sorted classes, labels, torchvision file order", "[source]") {
  const fs::path root = fs::temp_directory_path() / ("stoker-src-" + std::to_string(::getpid()));
  fs::remove_all(root);
  for (const char* f : {"b/x.jpg", "b/A.JPG", "b/sub/z.png", "b/sub-2/y.jpeg", "a/1.jpg",
                        "a/notes.txt", "c/readme.md", "a/deep/er/2.webp"}) {
    fs::create_directories((root / f).parent_path());
    std::ofstream(root / f) << "x";
  }
  std::ofstream(root / "loose.jpg") << "x";  // files in root are not samples
  const auto ds = stoker::source::scan_image_folder(root);
  CHECK(ds.classes == std::vector<std::string>{"a", "b", "c"});
  std::vector<std::string> rel;
  std::vector<std::int64_t> labels;
  for (const auto& s : ds.samples) {
    rel.push_back(fs::path(s.path).lexically_relative(root).string());
    labels.push_back(s.label);
  }
  // torchvision: sorted(os.walk(...)) orders directories by path ("b/sub" < "b/sub-2"),
  // files by name within each.
  CHECK(rel == std::vector<std::string>{"a/1.jpg", "a/deep/er/2.webp", "b/A.JPG", "b/x.jpg",
                                         "b/sub/z.png", "b/sub-2/y.jpeg"});
  CHECK(labels == std::vector<std::int64_t>{0, 0, 1, 1, 1, 1});
  fs::remove_all(root);
}

TEST_CASE("ImageFolder refuses a missing root and a root without images", "[source]") {
  CHECK_THROWS_WITH(stoker::source::scan_image_folder("/nonexistent/stoker"),
                    Catch::Contains("/nonexistent/stoker"));
  const fs::path root = fs::temp_directory_path() / ("stoker-empty-" + std::to_string(::getpid()));
  fs::create_directories(root / "cls");
  std::ofstream(root / "cls" / "a.txt") << "x";
  CHECK_THROWS_WITH(stoker::source::scan_image_folder(root), Catch::Contains("holds no images"));
  fs::remove_all(root);
}

TEST_CASE("epoch permutations depend on seed and epoch only", "[sampler]") {
  using stoker::sampler::epoch_permutation;
  const auto a = epoch_permutation(1000, true, 1, 0);
  CHECK(a == epoch_permutation(1000, true, 1, 0));
  CHECK(a != epoch_permutation(1000, true, 1, 1));
  CHECK(a != epoch_permutation(1000, true, 2, 0));
  auto sorted = a;
  std::sort(sorted.begin(), sorted.end());
  std::vector<std::uint32_t> ident(1000);
  std::iota(ident.begin(), ident.end(), 0u);
  CHECK(sorted == ident);
  CHECK(epoch_permutation(1000, false, 1, 5) == ident);
}

TEST_CASE("ranks cover every sample exactly once, padding or dropping the tail", "[sampler]") {
  using namespace stoker::sampler;
  for (std::uint32_t n : {1u, 7u, 64u, 100u, 1001u}) {
    for (std::uint32_t world : {1u, 2u, 3u, 8u}) {
      for (bool drop : {false, true}) {
        INFO("n=" << n << " world=" << world << " drop_last=" << drop);
        const auto perm = epoch_permutation(n, true, 3, 2);
        std::map<std::uint32_t, int> seen;
        std::uint64_t total = 0;
        for (std::uint32_t r = 0; r < world; ++r) {
          const auto mine = rank_samples(perm, world, r, drop);
          CHECK(mine.size() == samples_per_rank(n, world, drop));
          // Rank r takes positions r, r + world, ... of the epoch list.
          for (std::size_t i = 0; i < mine.size(); ++i) CHECK(mine[i] == perm[(r + i * world) % n]);
          for (auto id : mine) seen[id]++;
          total += mine.size();
        }
        if (drop) {
          CHECK(total == n / world * world);
          for (auto& [id, k] : seen) CHECK(k == 1);
        } else {
          CHECK(total == (n + world - 1) / world * world);
          CHECK(seen.size() == n);  // every sample somewhere
        }
      }
    }
  }
  CHECK(batches_per_epoch(22, 5, false) == 5);
  CHECK(batches_per_epoch(22, 5, true) == 4);
  CHECK(batches_per_epoch(20, 5, true) == 4);
}
