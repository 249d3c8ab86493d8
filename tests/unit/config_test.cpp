// Unit tier: the YAML config. Good configs fill every field; each kind of bad config is
// refused with the exact "FILE:LINE:COL: key.path: " prefix that points at the culprit.
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdint>
#include <csignal>
#include <sys/wait.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "config/config.hpp"

namespace fs = std::filesystem;
using Catch::Contains;
using Catch::StartsWith;
using stoker::config::Config;
using stoker::config::ConfigError;
using stoker::config::parse_config;

namespace {

// Jobs below use `root: .`, resolved against this folder (it exists in every checkout).
const fs::path kBase = fs::path(STOKER_TEST_DATA_DIR) / "configs";

Config parse(const std::string& yaml) { return parse_config(yaml, "test.yaml", kBase); }

// The what() of the ConfigError a text raises, or "(accepted)".
std::string refusal(const std::string& yaml) {
  try {
    parse(yaml);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "(accepted)";
}

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  REQUIRE(in);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void replace_all(std::string& text, const std::string& from, const std::string& to) {
  for (auto pos = text.find(from); pos != std::string::npos; pos = text.find(from, pos + to.size())) {
    text.replace(pos, from.size(), to);
  }
}

// A job with everything required; tests splice one bad line into it.
std::string train_job(const std::string& extra_job_lines = "",
                      const std::string& steps = "      - random_resized_crop: {size: 224}\n",
                      const std::string& output = "    output: {dtype: uint8, layout: NCHW}\n") {
  return "jobs:\n"
         "  train:\n"
         "    source: {root: .}\n"
         "    batch_size: 8\n" +
         extra_job_lines +
         "    pipeline:\n"
         "      - decode: {}\n" +
         steps + output;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Good configs

TEST_CASE("config: the shipped configs parse", "[config]") {
  const fs::path dir = fs::path(STOKER_SOURCE_DIR) / "configs";
  // The ImageNet roots do not exist here: aim them at a folder that does, keeping every
  // other line (and so every position) as shipped.
  const std::string stand_in = kBase.string();
  for (const char* name : {"imagenet-train.yaml", "imagenet-val.yaml", "demo.yaml"}) {
    INFO(name);
    std::string text = read_file(dir / name);
    replace_all(text, "/data/imagenet/train", stand_in);
    replace_all(text, "/data/imagenet/val", stand_in);
    if (std::string(name) == "demo.yaml" && !fs::is_directory(fs::path(STOKER_TEST_DATA_DIR) / "demo")) {
      replace_all(text, "../tests/data/demo", stand_in);
    }
    const Config cfg = parse_config(text, (dir / name).string(), dir);
    REQUIRE(cfg.jobs.size() == 1);
    const auto& j = cfg.jobs[0];
    CHECK(j.pipeline.out_height == 224);
    CHECK(j.pipeline.out_width == 224);
    CHECK(j.consumers >= 1);
    if (std::string(name) == "imagenet-train.yaml") {
      CHECK(j.name == "imagenet-train");
      CHECK(j.batch_size == 256);
      CHECK(j.shuffle);
      CHECK(j.pipeline.geometry == stoker::image::Geometry::kRandomResizedCrop);
      CHECK(j.pipeline.flip_probability == 0.5);
      CHECK(j.pipeline.dtype == stoker::proto::DType::kUInt8);
      CHECK(j.pipeline.layout == stoker::proto::Layout::kNCHW);
    } else if (std::string(name) == "imagenet-val.yaml") {
      CHECK_FALSE(j.shuffle);
      CHECK(j.pipeline.geometry == stoker::image::Geometry::kResizeCenterCrop);
      CHECK(j.pipeline.resize_shorter == 256);
      CHECK(j.pipeline.flip_probability == 0.0);
    } else {
      CHECK(j.batch_size == 16);
      CHECK(j.prefetch == 4);
      CHECK(cfg.server.workers == 2);
    }
  }
}

TEST_CASE("config: demo.yaml's relative root is the bundled demo data", "[config]") {
  const fs::path demo = fs::path(STOKER_TEST_DATA_DIR) / "demo";
  if (!fs::is_directory(demo)) {
    WARN("tests/data/demo is missing; skipped");
    return;
  }
  const Config cfg = stoker::config::load_config(fs::path(STOKER_SOURCE_DIR) / "configs" / "demo.yaml");
  CHECK(fs::equivalent(cfg.jobs.at(0).source.root, demo));
  CHECK(cfg.jobs.at(0).source.root.is_absolute());
}

TEST_CASE("config: a full training job fills every field", "[config]") {
  const Config cfg = parse(
      "server: {workers: 3, log_level: debug, socket: /tmp/s.sock, state_dir: state, shm_mode: 0660,\n"
      "         handshake_timeout_s: 2.5}\n"
      "jobs:\n"
      "  train.v2_a-b:\n"
      "    source: {type: imagefolder, root: .}\n"
      "    batch_size: 32\n"
      "    shuffle: false\n"
      "    seed: 18446744073709551615\n"
      "    drop_last: true\n"
      "    consumers: 4\n"
      "    prefetch: 2\n"
      "    on_error: substitute\n"
      "    quarantine: q/train.txt\n"
      "    device: true\n"
      "    pipeline:\n"
      "      - decode: {exif_orientation: false, strict: true, max_pixels: 1000}\n"
      "      - random_resized_crop: {size: [100, 120], scale: [0.5, 1], ratio: [0.5, 2]}\n"
      "      - horizontal_flip: {p: 0.25}\n"
      "      - normalize: {mean: [0.1, 0.2, 0.3], std: [1, 2, 4]}\n"
      "    output: {dtype: float16, layout: NHWC}\n");
  CHECK(cfg.file == "test.yaml");
  CHECK(cfg.server.workers == 3);
  CHECK(cfg.server.log_level == "debug");
  CHECK(cfg.server.socket == "/tmp/s.sock");
  CHECK(cfg.server.state_dir == (kBase / "state").lexically_normal());
  CHECK(cfg.server.shm_mode == 0660);
  CHECK(cfg.server.handshake_timeout_s == 2.5);
  REQUIRE(cfg.jobs.size() == 1);
  const auto& j = cfg.jobs[0];
  CHECK(j.name == "train.v2_a-b");
  CHECK(j.mark.line == 4);
  CHECK(j.mark.column == 3);
  CHECK(j.source.type == "imagefolder");
  CHECK(j.source.root == kBase.lexically_normal());
  CHECK(j.source.root_mark.line == 5);
  CHECK(j.source.root_mark.column == 39);
  CHECK(j.batch_size == 32);
  CHECK_FALSE(j.shuffle);
  CHECK(j.seed == 18446744073709551615ull);
  CHECK(j.drop_last);
  CHECK(j.consumers == 4);
  CHECK(j.prefetch == 2);
  CHECK(j.on_error == stoker::config::OnError::kSubstitute);
  CHECK(j.quarantine == kBase / "q" / "train.txt");
  CHECK(j.device_output);
  const auto& p = j.pipeline;
  CHECK_FALSE(p.apply_exif_orientation);
  CHECK(p.strict);
  CHECK(p.max_pixels == 1000);
  CHECK(p.geometry == stoker::image::Geometry::kRandomResizedCrop);
  CHECK(p.out_height == 100);
  CHECK(p.out_width == 120);
  CHECK(p.scale == std::array<double, 2>{0.5, 1.0});
  CHECK(p.ratio == std::array<double, 2>{0.5, 2.0});
  CHECK(p.flip_probability == 0.25);
  CHECK(p.normalize);
  CHECK(p.mean == std::array<float, 3>{0.1f, 0.2f, 0.3f});
  CHECK(p.stddev == std::array<float, 3>{1.f, 2.f, 4.f});
  CHECK(p.dtype == stoker::proto::DType::kFloat16);
  CHECK(p.layout == stoker::proto::Layout::kNHWC);
  CHECK(p.sample_bytes() == 3u * 100 * 120 * 2);
}

TEST_CASE("config: defaults when optional keys are left out", "[config]") {
  const Config cfg = parse(
      "jobs:\n"
      "  j:\n"
      "    source: {root: .}\n"
      "    batch_size: 1\n"
      "    pipeline: [decode, {random_resized_crop: {size: 64}}]\n");
  CHECK(cfg.server.workers == 0);
  CHECK(cfg.server.socket.empty());
  CHECK(cfg.server.log_level == "info");
  CHECK(cfg.server.shm_mode == 0600);
  const auto& j = cfg.jobs.at(0);
  CHECK(j.source.type == "imagefolder");
  CHECK(j.shuffle);
  CHECK(j.seed == 0);
  CHECK_FALSE(j.augment_seed.has_value());
  CHECK(j.pixel_seed() == j.seed);  // unset: the augmentations follow `seed`
  CHECK_FALSE(j.drop_last);
  CHECK(j.consumers == 1);
  CHECK(j.prefetch == 4);
  CHECK(j.on_error == stoker::config::OnError::kSkip);
  CHECK(j.quarantine.empty());
  CHECK_FALSE(j.device_output);
  const auto& p = j.pipeline;
  CHECK(p.apply_exif_orientation);
  CHECK_FALSE(p.strict);
  CHECK(p.max_pixels == 178956970);
  CHECK(p.scale == std::array<double, 2>{0.08, 1.0});
  CHECK(p.ratio == std::array<double, 2>{3.0 / 4.0, 4.0 / 3.0});
  CHECK(p.flip_probability == 0.0);
  CHECK_FALSE(p.normalize);
  CHECK(p.dtype == stoker::proto::DType::kUInt8);   // `output` left out
  CHECK(p.layout == stoker::proto::Layout::kNCHW);
}

TEST_CASE("config: validation pipelines (resize + center_crop, exact resize)", "[config]") {
  SECTION("shorter side then center crop") {
    const auto j = parse(train_job("", "      - resize: {size: 256}\n      - center_crop: {size: [224, 200]}\n"
                                       "      - normalize: {mean: [0.5, 0.5, 0.5], std: [0.2, 0.2, 0.2]}\n",
                                   "    output: {dtype: float32}\n"))
                       .jobs.at(0);
    CHECK(j.pipeline.geometry == stoker::image::Geometry::kResizeCenterCrop);
    CHECK(j.pipeline.resize_shorter == 256);
    CHECK(j.pipeline.out_height == 224);
    CHECK(j.pipeline.out_width == 200);
    CHECK(j.pipeline.normalize);
    CHECK(j.pipeline.dtype == stoker::proto::DType::kFloat32);
  }
  SECTION("exact size") {
    const auto j = parse(train_job("", "      - resize: {size: [32, 48]}\n      - horizontal_flip\n")).jobs.at(0);
    CHECK(j.pipeline.geometry == stoker::image::Geometry::kResize);
    CHECK(j.pipeline.out_height == 32);
    CHECK(j.pipeline.out_width == 48);
    CHECK(j.pipeline.flip_probability == 0.5);  // a bare step takes its defaults
  }
}

TEST_CASE("config: interpolation of resize and random_resized_crop, refused at file:line", "[config]") {
  using stoker::image::ResizeFilter;
  const auto filter = [](const std::string& steps) { return parse(train_job("", steps)).jobs.at(0).pipeline.filter; };
  CHECK(filter("      - random_resized_crop: {size: 8}\n") == ResizeFilter::kBilinear);  // torchvision's default
  CHECK(filter("      - random_resized_crop: {size: 8, interpolation: bicubic}\n") == ResizeFilter::kBicubic);
  CHECK(filter("      - random_resized_crop: {size: 8, interpolation: nearest}\n") == ResizeFilter::kNearest);
  CHECK(filter("      - resize: {size: [8, 8], interpolation: bilinear}\n") == ResizeFilter::kBilinear);
  CHECK(filter("      - resize: {size: 10, interpolation: bicubic}\n      - center_crop: {size: 8}\n") ==
        ResizeFilter::kBicubic);
  CHECK_THAT(refusal(train_job("", "      - resize: {size: [8, 8], interpolation: lanczos}\n")),
             StartsWith("test.yaml:7:47: jobs.train.pipeline[1].resize.interpolation: ") &&
                 Contains("must be one of bilinear, bicubic, nearest") && Contains("'lanczos'"));
  CHECK_THAT(refusal(train_job("", "      - random_resized_crop: {size: 8, interpolation: 2}\n")),
             StartsWith("test.yaml:7:55: jobs.train.pipeline[1].random_resized_crop.interpolation: "));
  // CenterCrop has no filter: the key belongs to the resize before it.
  CHECK_THAT(refusal(train_job("", "      - resize: {size: 10}\n      - center_crop: {size: 8, interpolation: bicubic}\n")),
             StartsWith("test.yaml:8:32: jobs.train.pipeline[2].center_crop.interpolation: unknown key"));
}

TEST_CASE("config: decode.dct_scale - auto decodes deterministic pipelines at full scale", "[config]") {
  using stoker::image::DctScale;
  const auto spec = [](const std::string& decode, const std::string& steps) {
    std::string t = train_job("", steps);
    replace_all(t, "      - decode: {}\n", "      - decode: " + decode + "\n");
    return parse(t).jobs.at(0).pipeline;
  };
  const std::string val = "      - resize: {size: 10}\n      - center_crop: {size: 8}\n";
  const std::string crop = "      - random_resized_crop: {size: 8}\n";
  CHECK(spec("{}", val).dct_scale == DctScale::kAuto);
  CHECK_FALSE(spec("{}", val).reduced_decode());  // eval: torchvision's pixels
  CHECK_FALSE(spec("{}", "      - resize: {size: [8, 8]}\n").reduced_decode());
  CHECK(spec("{}", crop).reduced_decode());        // random crops: the fast path
  CHECK(spec("{dct_scale: always}", val).reduced_decode());
  CHECK_FALSE(spec("{dct_scale: never}", crop).reduced_decode());
  CHECK_FALSE(spec("{}", "      - random_resized_crop: {size: 8, interpolation: nearest}\n").reduced_decode());
  CHECK(refusal(train_job("", crop)) == "(accepted)");
  std::string t = train_job("", crop);
  replace_all(t, "      - decode: {}\n", "      - decode: {dct_scale: sometimes}\n");
  CHECK_THAT(refusal(t), StartsWith("test.yaml:6:29: jobs.train.pipeline[0].decode.dct_scale: ") &&
                             Contains("must be one of auto, always, never"));
  t = train_job("", "      - random_resized_crop: {size: 8, interpolation: nearest}\n");
  replace_all(t, "      - decode: {}\n", "      - decode: {dct_scale: always}\n");
  CHECK_THAT(refusal(t), StartsWith("test.yaml:6:29: jobs.train.pipeline[0].decode.dct_scale: ") && Contains("nearest"));
}

TEST_CASE("config: several jobs keep their file order - integers are decimal", "[config]") {
  const Config cfg = parse(
      "jobs:\n"
      "  b: {source: {root: .}, batch_size: 010, seed: 007, pipeline: [decode, resize: {size: [8, 8]}]}\n"
      "  a: {source: {root: .}, batch_size: +4, pipeline: [decode, resize: {size: [8, 8]}]}\n");
  REQUIRE(cfg.jobs.size() == 2);
  CHECK(cfg.jobs[0].name == "b");
  CHECK(cfg.jobs[0].batch_size == 10);  // not octal 8, as yaml-cpp's own conversion would read it
  CHECK(cfg.jobs[0].seed == 7);
  CHECK(cfg.jobs[0].pixel_seed() == 7);
  CHECK(cfg.jobs[1].name == "a");
  CHECK(cfg.jobs[1].batch_size == 4);
}

TEST_CASE("config: load_config resolves relative paths against the file's folder", "[config]") {
  const Config cfg = stoker::config::load_config(kBase / "relative-root.yaml");
  CHECK(cfg.file == kBase / "relative-root.yaml");
  CHECK(fs::equivalent(cfg.jobs.at(0).source.root, kBase));
  CHECK(cfg.jobs.at(0).source.root.is_absolute());
  CHECK(cfg.jobs.at(0).quarantine == (fs::absolute(kBase) / "state" / "q.txt").lexically_normal());
}

// ---------------------------------------------------------------------------------------------
// Bad configs: one test per kind, each checking the exact position and key path.

TEST_CASE("config error: unknown keys, with a suggestion when one is close", "[config]") {
  CHECK_THAT(refusal(train_job("    bach_size: 1\n")),
             StartsWith("test.yaml:5:5: jobs.train.bach_size: ") && Contains("did you mean 'batch_size'?"));
  CHECK_THAT(refusal(train_job("    colour: red\n")),
             StartsWith("test.yaml:5:5: jobs.train.colour: ") && Contains("unknown key (allowed: source,"));
  CHECK_THAT(refusal("server: {wrokers: 2}\n" + train_job()),
             StartsWith("test.yaml:1:10: server.wrokers: ") && Contains("did you mean 'workers'?"));
  CHECK_THAT(refusal("servers: {}\n" + train_job()), StartsWith("test.yaml:1:1: servers: ") &&
                                                         Contains("did you mean 'server'?"));
  CHECK_THAT(refusal(train_job("", "      - random_resized_crop: {size: 224, scael: [0.1, 1]}\n")),
             StartsWith("test.yaml:7:42: jobs.train.pipeline[1].random_resized_crop.scael: ") &&
                 Contains("did you mean 'scale'?"));
  CHECK_THAT(refusal(train_job("", "      - random_resized_crop: {size: 224}\n      - horizontal_flop: {}\n")),
             StartsWith("test.yaml:8:9: jobs.train.pipeline[2].horizontal_flop: ") &&
                 Contains("unknown step; did you mean 'horizontal_flip'?"));
  CHECK_THAT(refusal(train_job("", "      - random_resized_crop: {size: 224}\n", "    output: {dtype: uint8, order: NCHW}\n")),
             StartsWith("test.yaml:8:28: jobs.train.output.order: ") && Contains("unknown key"));
}

TEST_CASE("config error: wrong types", "[config]") {
  std::string t = train_job();
  replace_all(t, "batch_size: 8", "batch_size: abc");
  CHECK(refusal(t) == "test.yaml:4:17: jobs.train.batch_size: expected an integer, got 'abc'");
  replace_all(t, "batch_size: abc", "batch_size: 1.5");
  CHECK(refusal(t) == "test.yaml:4:17: jobs.train.batch_size: expected an integer, got '1.5'");
  replace_all(t, "batch_size: 1.5", "batch_size: [8]");
  CHECK(refusal(t) == "test.yaml:4:17: jobs.train.batch_size: expected an integer, got a list");
  CHECK_THAT(refusal(train_job("    shuffle: maybe\n")),
             StartsWith("test.yaml:5:14: jobs.train.shuffle: ") && Contains("expected true or false, got 'maybe'"));
  CHECK_THAT(refusal(train_job("    seed: 99999999999999999999\n")),
             StartsWith("test.yaml:5:11: jobs.train.seed: ") && Contains("must be between 0 and 18446744073709551615"));
  CHECK_THAT(refusal(train_job("    augment_seed: -3\n")),
             StartsWith("test.yaml:5:19: jobs.train.augment_seed: ") && Contains("must be between 0 and"));
  CHECK_THAT(refusal(train_job("", "      - random_resized_crop: {size: 224}\n      - horizontal_flip: {p: half}\n")),
             StartsWith("test.yaml:8:30: jobs.train.pipeline[2].horizontal_flip.p: ") &&
                 Contains("expected a number, got 'half'"));
  CHECK_THAT(refusal(train_job("", "      - random_resized_crop: {size: 224, scale: [0.1, .nan]}\n")),
             StartsWith("test.yaml:7:55: jobs.train.pipeline[1].random_resized_crop.scale[1]: ") &&
                 Contains("expected a number"));
  std::string s = train_job();
  replace_all(s, "source: {root: .}", "source: imagefolder");
  CHECK_THAT(refusal(s), StartsWith("test.yaml:3:13: jobs.train.source: ") &&
                             Contains("expected a mapping of keys, got 'imagefolder'"));
  replace_all(s, "source: imagefolder", "source: {root: [a, b]}");
  CHECK_THAT(refusal(s), StartsWith("test.yaml:3:20: jobs.train.source.root: ") &&
                             Contains("expected a string, got a list"));
}

TEST_CASE("config error: an empty value points at its key", "[config]") {
  std::string t = train_job();
  replace_all(t, "batch_size: 8", "batch_size:");
  CHECK(refusal(t) == "test.yaml:4:5: jobs.train.batch_size: expected an integer, got nothing");
}

TEST_CASE("config error: missing required keys", "[config]") {
  CHECK_THAT(refusal("server: {workers: 1}\n"), StartsWith("test.yaml:1:1: jobs: ") && Contains("required key is missing"));
  CHECK_THAT(refusal("jobs: []\n"), StartsWith("test.yaml:1:7: jobs: ") && Contains("expected a mapping of job names"));
  std::string t = train_job();
  replace_all(t, "    batch_size: 8\n", "");
  CHECK_THAT(refusal(t), StartsWith("test.yaml:3:5: jobs.train.batch_size: ") && Contains("required key is missing"));
  t = train_job();
  replace_all(t, "    source: {root: .}\n", "");
  CHECK_THAT(refusal(t), StartsWith("test.yaml:3:5: jobs.train.source: ") && Contains("required key is missing"));
  t = train_job();
  replace_all(t, "{root: .}", "{type: imagefolder}");
  CHECK_THAT(refusal(t), StartsWith("test.yaml:3:13: jobs.train.source.root: ") && Contains("required key is missing"));
  CHECK_THAT(refusal("jobs:\n  train:\n    source: {root: .}\n    batch_size: 8\n"),
             StartsWith("test.yaml:3:5: jobs.train.pipeline: ") && Contains("required key is missing"));
  CHECK_THAT(refusal(train_job("", "      - random_resized_crop: {scale: [0.5, 1]}\n")),
             StartsWith("test.yaml:7:30: jobs.train.pipeline[1].random_resized_crop.size: ") &&
                 Contains("required key is missing"));
  CHECK_THAT(refusal(train_job("", "      - random_resized_crop: {size: 8}\n      - normalize: {mean: [0, 0, 0]}\n",
                               "    output: {dtype: float32}\n")),
             StartsWith("test.yaml:8:20: jobs.train.pipeline[2].normalize.std: ") && Contains("required key is missing"));
}

TEST_CASE("config error: job-level values out of range", "[config]") {
  struct Case {
    std::string from, to, expected;
  };
  for (const Case& c : {
           Case{"batch_size: 8", "batch_size: 0", "test.yaml:4:17: jobs.train.batch_size: must be between 1 and 65536, got 0"},
           Case{"batch_size: 8", "batch_size: 65537", "test.yaml:4:17: jobs.train.batch_size: must be between 1 and 65536, got 65537"},
           Case{"batch_size: 8", "batch_size: -3", "test.yaml:4:17: jobs.train.batch_size: must be between 1 and 65536, got -3"},
           Case{"batch_size: 8", "batch_size: 8\n    consumers: 0", "test.yaml:5:16: jobs.train.consumers: must be between 1 and 1024, got 0"},
           Case{"batch_size: 8", "batch_size: 8\n    prefetch: 0", "test.yaml:5:15: jobs.train.prefetch: must be between 1 and 64, got 0"},
           Case{"batch_size: 8", "batch_size: 8\n    seed: -1", "test.yaml:5:11: jobs.train.seed: must be between 0 and 18446744073709551615, got -1"},
       }) {
    std::string t = train_job();
    replace_all(t, c.from, c.to);
    INFO(t);
    CHECK(refusal(t) == c.expected);
  }
  CHECK_THAT(refusal("server: {workers: -1}\n" + train_job()), StartsWith("test.yaml:1:19: server.workers: must be between 0"));
  CHECK_THAT(refusal("server: {handshake_timeout_s: 0}\n" + train_job()),
             StartsWith("test.yaml:1:31: server.handshake_timeout_s: ") && Contains("(0, 3600]"));
  CHECK(refusal("server: {shm_mode: 0800}\n" + train_job()) ==
        "test.yaml:1:20: server.shm_mode: expected an octal mode like 0600, got '0800'");
  CHECK_THAT(refusal("server: {shm_mode: 0400}\n" + train_job()),
             StartsWith("test.yaml:1:20: server.shm_mode: ") && Contains("read and write"));
  CHECK_THAT(refusal("server: {socket: /" + std::string(120, 's') + "}\n" + train_job()),
             StartsWith("test.yaml:1:18: server.socket: ") && Contains("at most 107 bytes"));
}

TEST_CASE("config error: geometry values out of range", "[config]") {
  const auto rrc = [](const std::string& args) {
    return refusal(train_job("", "      - random_resized_crop: {" + args + "}\n"));
  };
  const std::string at = "jobs.train.pipeline[1].random_resized_crop.";
  CHECK(rrc("size: 0") == "test.yaml:7:37: " + at + "size: must be between 1 and 16384, got 0");
  CHECK(rrc("size: 16385") == "test.yaml:7:37: " + at + "size: must be between 1 and 16384, got 16385");
  CHECK(rrc("size: [224, 0]") == "test.yaml:7:43: " + at + "size[1]: must be between 1 and 16384, got 0");
  CHECK_THAT(rrc("size: [224]"), StartsWith("test.yaml:7:37: " + at + "size: expected an integer or a list [height, width]"));
  CHECK_THAT(rrc("size: 8, scale: [0.5, 1.5]"), StartsWith("test.yaml:7:47: " + at + "scale: ") && Contains("0 < min <= max <= 1"));
  CHECK_THAT(rrc("size: 8, scale: [0, 1]"), StartsWith("test.yaml:7:47: " + at + "scale: ") && Contains("0 < min"));
  CHECK_THAT(rrc("size: 8, scale: [0.9, 0.5]"), StartsWith("test.yaml:7:47: " + at + "scale: ") && Contains("min <= max"));
  CHECK_THAT(rrc("size: 8, scale: [0.5]"), StartsWith("test.yaml:7:47: " + at + "scale: ") && Contains("a list of 2 numbers"));
  CHECK_THAT(rrc("size: 8, ratio: [0, 1]"), StartsWith("test.yaml:7:47: " + at + "ratio: ") && Contains("0 < min <= max"));
  CHECK_THAT(rrc("size: 8, ratio: [-1, 1]"), StartsWith("test.yaml:7:47: " + at + "ratio: ") && Contains("0 < min <= max"));
  CHECK_THAT(rrc("size: 8, ratio: [2, 1]"), StartsWith("test.yaml:7:47: " + at + "ratio: ") && Contains("min <= max"));
  CHECK_THAT(refusal(train_job("", "      - resize: {size: 0}\n      - center_crop: {size: 1}\n")),
             StartsWith("test.yaml:7:24: jobs.train.pipeline[1].resize.size: must be between 1 and 16384"));
  CHECK_THAT(refusal(train_job("", "      - resize: {size: 256}\n      - center_crop: {size: 300}\n")),
             StartsWith("test.yaml:8:29: jobs.train.pipeline[2].center_crop.size: ") &&
                 Contains("larger than the resized shorter side (256)"));
  std::string huge = train_job("", "      - resize: {size: [16384, 16384]}\n");
  replace_all(huge, "batch_size: 8", "batch_size: 65536");
  CHECK_THAT(refusal(huge), StartsWith("test.yaml:2:3: jobs.train: one batch would take"));
}

TEST_CASE("config error: flip and normalize values", "[config]") {
  const auto steps = [](const std::string& s) {
    return refusal(train_job("", "      - random_resized_crop: {size: 8}\n" + s, "    output: {dtype: float32}\n"));
  };
  CHECK(steps("      - horizontal_flip: {p: 1.5}\n") ==
        "test.yaml:8:30: jobs.train.pipeline[2].horizontal_flip.p: must be within [0, 1]");
  CHECK(steps("      - horizontal_flip: {p: -0.1}\n") ==
        "test.yaml:8:30: jobs.train.pipeline[2].horizontal_flip.p: must be within [0, 1]");
  CHECK(steps("      - normalize: {mean: [0, 0, 0], std: [1, 0, 1]}\n") ==
        "test.yaml:8:47: jobs.train.pipeline[2].normalize.std[1]: every std must be > 0");
  CHECK_THAT(steps("      - normalize: {mean: [0, 0], std: [1, 1, 1]}\n"),
             StartsWith("test.yaml:8:27: jobs.train.pipeline[2].normalize.mean: ") &&
                 Contains("expected a list of 3 numbers, got a list of 2"));
  CHECK_THAT(steps("      - normalize: {mean: [0, 0, 0], std: [1, 1, 1, 1]}\n"),
             StartsWith("test.yaml:8:43: jobs.train.pipeline[2].normalize.std: ") && Contains("3 numbers"));
  CHECK_THAT(steps("      - normalize: {mean: 0.5, std: [1, 1, 1]}\n"),
             StartsWith("test.yaml:8:27: jobs.train.pipeline[2].normalize.mean: ") && Contains("3 numbers"));
}

TEST_CASE("config error: strings outside their choices", "[config]") {
  CHECK(refusal(train_job("", "      - random_resized_crop: {size: 8}\n", "    output: {dtype: int8}\n")) ==
        "test.yaml:8:21: jobs.train.output.dtype: must be one of uint8, float16, float32, got 'int8' "
        "(did you mean 'uint8'?)");
  CHECK_THAT(refusal(train_job("", "      - random_resized_crop: {size: 8}\n", "    output: {layout: CHW}\n")),
             StartsWith("test.yaml:8:22: jobs.train.output.layout: must be one of NCHW, NHWC, got 'CHW' (did you mean 'NCHW'?)"));
  CHECK_THAT(refusal(train_job("    on_error: ignore\n")),
             StartsWith("test.yaml:5:15: jobs.train.on_error: must be one of skip, substitute, fail, got 'ignore'"));
  CHECK_THAT(refusal("server: {log_level: verbose}\n" + train_job()),
             StartsWith("test.yaml:1:21: server.log_level: must be one of trace, debug, info, warn, error"));
  std::string t = train_job();
  replace_all(t, "{root: .}", "{type: webdataset, root: .}");
  CHECK_THAT(refusal(t), StartsWith("test.yaml:3:20: jobs.train.source.type: must be one of imagefolder"));
}

TEST_CASE("config error: pipeline structure", "[config]") {
  const std::string p = "jobs.train.pipeline";
  // decode first, once
  CHECK_THAT(refusal("jobs:\n  train:\n    source: {root: .}\n    batch_size: 8\n    pipeline:\n"
                     "      - random_resized_crop: {size: 8}\n"),
             StartsWith("test.yaml:6:9: " + p + "[0].random_resized_crop: the first step must be 'decode'"));
  CHECK_THAT(refusal(train_job("", "      - decode: {}\n      - random_resized_crop: {size: 8}\n")),
             StartsWith("test.yaml:7:9: " + p + "[1].decode: 'decode' must be the first step"));
  // exactly one geometry
  CHECK_THAT(refusal(train_job("", "      - horizontal_flip: {}\n")),
             StartsWith("test.yaml:7:9: " + p + "[1].horizontal_flip: comes before the geometry step"));
  CHECK_THAT(refusal(train_job("", "")), StartsWith("test.yaml:6:7: " + p + ": needs random_resized_crop or resize"));
  CHECK_THAT(refusal(train_job("", "      - random_resized_crop: {size: 8}\n      - resize: {size: [8, 8]}\n")),
             StartsWith("test.yaml:8:9: " + p + "[2].resize: only one of random_resized_crop / resize"));
  CHECK_THAT(refusal(train_job("", "      - resize: {size: 256}\n")),
             StartsWith("test.yaml:6:7: " + p + ": ") && Contains("add '- center_crop: {size: M}'"));
  CHECK_THAT(refusal(train_job("", "      - random_resized_crop: {size: 8}\n      - center_crop: {size: 8}\n")),
             StartsWith("test.yaml:8:9: " + p + "[2].center_crop: center_crop must directly follow"));
  CHECK_THAT(refusal(train_job("", "      - resize: {size: 9}\n      - center_crop: {size: 8}\n      - center_crop: {size: 8}\n")),
             StartsWith("test.yaml:9:9: " + p + "[3].center_crop: center_crop must directly follow"));
  // flip and normalize at most once, after the geometry
  CHECK_THAT(refusal(train_job("", "      - random_resized_crop: {size: 8}\n      - horizontal_flip: {}\n"
                                   "      - horizontal_flip: {}\n")),
             StartsWith("test.yaml:9:9: " + p + "[3].horizontal_flip: horizontal_flip appears twice"));
  CHECK_THAT(refusal(train_job("", "      - random_resized_crop: {size: 8}\n      - horizontal_flip: {}\n"
                                   "      - random_resized_crop: {size: 8}\n")),
             StartsWith("test.yaml:9:9: " + p + "[3].random_resized_crop: geometry steps come right after decode"));
  const std::string norm = "      - normalize: {mean: [0, 0, 0], std: [1, 1, 1]}\n";
  CHECK_THAT(refusal(train_job("", "      - random_resized_crop: {size: 8}\n" + norm + norm, "    output: {dtype: float32}\n")),
             StartsWith("test.yaml:9:9: " + p + "[3].normalize: normalize appears twice"));
  // normalize cannot be written into uint8
  CHECK_THAT(refusal(train_job("", "      - random_resized_crop: {size: 8}\n" + norm)),
             StartsWith("test.yaml:9:21: jobs.train.output.dtype: normalize needs float16 or float32"));
  CHECK_THAT(refusal(train_job("", "      - random_resized_crop: {size: 8}\n" + norm, "")),
             StartsWith("test.yaml:3:5: jobs.train.output.dtype: normalize needs float16 or float32"));
  // shapes of the list itself
  CHECK_THAT(refusal("jobs:\n  train:\n    source: {root: .}\n    batch_size: 8\n    pipeline: []\n"),
             StartsWith("test.yaml:5:15: " + p + ": expected a non-empty list of steps"));
  CHECK_THAT(refusal(train_job("", "      - {random_resized_crop: {size: 8}, horizontal_flip: {}}\n")),
             StartsWith("test.yaml:7:9: " + p + "[1]: each step is a mapping with one key"));
}

TEST_CASE("config error: job names", "[config]") {
  CHECK_THAT(refusal("jobs:\n  bad name!:\n    batch_size: 8\n"),
             StartsWith("test.yaml:2:3: jobs.bad name!: job names are 1..48 characters"));
  const std::string long_name(49, 'x');
  CHECK_THAT(refusal("jobs:\n  " + long_name + ":\n    batch_size: 8\n"),
             StartsWith("test.yaml:2:3: jobs." + long_name + ": job names"));
  CHECK(refusal("jobs:\n  " + std::string(48, 'x') + ": {source: {root: .}, batch_size: 1, pipeline: [decode, resize: {size: [2, 2]}]}\n") ==
        "(accepted)");
  CHECK_THAT(refusal("jobs:\n  ? [a, b]\n  : {}\n"), StartsWith("test.yaml:2:5: jobs: job names must be plain words"));
}

TEST_CASE("config error: a repeated job name or key", "[config]") {
  const std::string body = ": {source: {root: .}, batch_size: 1, pipeline: [decode, resize: {size: [2, 2]}]}\n";
  CHECK(refusal("jobs:\n  a" + body + "  b" + body + "  a" + body) == "test.yaml:4:3: jobs.a: duplicate job name");
  CHECK(refusal(train_job("    shuffle: true\n    shuffle: false\n")) == "test.yaml:6:5: jobs.train.shuffle: duplicate key");
}

TEST_CASE("config error: the source root must be an existing directory", "[config]") {
  std::string t = train_job();
  replace_all(t, "{root: .}", "{root: no-such-folder}");
  CHECK(refusal(t) == "test.yaml:3:20: jobs.train.source.root: " + (kBase / "no-such-folder").lexically_normal().string() +
                          " is not an existing directory");
  t = train_job();
  replace_all(t, "{root: .}", "{root: relative-root.yaml}");  // a file, not a folder
  CHECK_THAT(refusal(t), StartsWith("test.yaml:3:20: jobs.train.source.root: ") && Contains("is not an existing directory"));
  t = train_job();
  replace_all(t, "{root: .}", "{root: ''}");
  CHECK(refusal(t) == "test.yaml:3:20: jobs.train.source.root: must not be empty");
}

TEST_CASE("config error: YAML that does not parse, or is not one mapping", "[config]") {
  // An unclosed flow is reported where it opened (yaml-cpp marks the line after its end).
  CHECK(refusal("jobs:\n  train: {batch_size: 8\n") ==
        "test.yaml:2:10: (yaml): end of map flow not found: the bracket here is never closed");
  CHECK_THAT(refusal("jobs:\n  a: 1\n   b: 2\n"), StartsWith("test.yaml:3:5: (yaml): illegal map value"));
  CHECK_THAT(refusal("jobs: *nowhere\n"), StartsWith("test.yaml:1:7: (yaml): ") && Contains("anchor is not defined"));
  CHECK(refusal("") == "test.yaml:1:1: (top): the config is empty");
  CHECK(refusal("# only a comment\n") == "test.yaml:1:1: (top): the config is empty");
  CHECK_THAT(refusal("- a\n- b\n"), StartsWith("test.yaml:1:1: (top): expected a mapping"));
  CHECK_THAT(refusal(train_job() + "---\n" + train_job()), StartsWith("test.yaml:9:1: (top): one YAML document expected, found a second one here"));
  CHECK(refusal(",a") == "test.yaml:1:1: (top): expected a mapping with 'jobs' (and optionally 'server'); this line does not start one");
  CHECK(refusal("---\njobs: {}\n") == "(accepted)");  // a leading marker is one document
}

TEST_CASE("config error: a flow left open points at its bracket, not at the line after", "[config]") {
  // The `[` of line 4 is never closed; yaml-cpp's mark is past the end of the document.
  const std::string seq = "jobs:\n  train:\n    source: {type: imagefolder, root: .}\n    batch_size: 8\n"
                          "    pipeline: [{decode: {}}, {resize: {size: 8}}\n";
  CHECK(refusal(seq) == "test.yaml:5:15: (yaml): end of sequence flow not found: the bracket here is never closed");
  // Brackets in comments and quoted strings, and flows closed earlier, are not the one left open.
  const std::string noise = "# [ a comment with a bracket\njobs:\n  train:\n    source: {type: imagefolder, root: '[.'}\n"
                            "    batch_size: {a: [1, 2]\n";
  CHECK(refusal(noise) == "test.yaml:5:17: (yaml): end of map flow not found: the bracket here is never closed");
  // Other parse errors keep yaml-cpp's own mark.
  CHECK_THAT(refusal("jobs:\n  a: 1\n   b: 2\n"), StartsWith("test.yaml:3:5: (yaml): illegal map value"));
}

TEST_CASE("config error: a file that cannot be read, at line 0", "[config]") {
  const auto what = [](const fs::path& p) -> std::string {
    try {
      stoker::config::load_config(p);
    } catch (const ConfigError& e) {
      CHECK(e.mark().line == 0);
      CHECK(e.key_path() == "(file)");
      return e.what();
    }
    return "(accepted)";
  };
  CHECK(what("/nonexistent/stoker.yaml") ==
        "/nonexistent/stoker.yaml:0:0: (file): cannot read the config: No such file or directory");
  CHECK(what(kBase) == kBase.string() + ":0:0: (file): cannot read the config: it is a directory");
  if (::geteuid() != 0) {  // root reads anything
    const fs::path unreadable = fs::temp_directory_path() / ("stoker-cfg-" + std::to_string(::getpid()) + ".yaml");
    std::ofstream(unreadable) << "jobs: {}\n";
    fs::permissions(unreadable, fs::perms::none);
    CHECK(what(unreadable) == unreadable.string() + ":0:0: (file): cannot read the config: Permission denied");
    fs::remove(unreadable);
  }
}

TEST_CASE("config error: from a file, the message names that file", "[config]") {
  try {
    stoker::config::load_config(kBase / "bad-scale.yaml");
    FAIL("accepted");
  } catch (const ConfigError& e) {
    CHECK(std::string(e.what()) == (kBase / "bad-scale.yaml").string() +
                                       ":9:49: jobs.imagenet-train.pipeline[1].random_resized_crop.scale: "
                                       "must be [min, max] with 0 < min <= max <= 1");
    CHECK(e.file() == (kBase / "bad-scale.yaml").string());
    CHECK(e.mark().line == 9);
    CHECK(e.mark().column == 49);
    CHECK(e.key_path() == "jobs.imagenet-train.pipeline[1].random_resized_crop.scale");
  }
}

// ---------------------------------------------------------------------------------------------
// Multi-node jobs and ${VAR}

TEST_CASE("config: a job's world and the ranks this daemon serves", "[config][multinode]") {
  auto job = [](const std::string& lines) { return parse(train_job(lines)).jobs.at(0); };
  auto j = job("");
  CHECK((j.world_size == 1 && j.first_rank == 0 && j.consumers == 1));
  j = job("    consumers: 4\n");
  CHECK((j.world_size == 4 && j.first_rank == 0 && j.consumers == 4));
  j = job("    world_size: 64\n    ranks: 8-15\n");
  CHECK((j.world_size == 64 && j.first_rank == 8 && j.consumers == 8));
  j = job("    world_size: 64\n    ranks: 63\n");
  CHECK((j.world_size == 64 && j.first_rank == 63 && j.consumers == 1));
  j = job("    world_size: 16\n    node_rank: 1\n    local_world_size: 8\n");
  CHECK((j.world_size == 16 && j.first_rank == 8 && j.consumers == 8));
  j = job("    world_size: 16\n    ranks: 8-15\n    consumers: 8\n");  // consistent: accepted
  CHECK(j.consumers == 8);
  j = job("    world_size: 8\n");  // a single node of the whole world
  CHECK((j.first_rank == 0 && j.consumers == 8));
}

TEST_CASE("config: ${VAR} and ${VAR:-default} come from the environment", "[config][multinode]") {
  ::setenv("STOKER_TEST_WORLD", "32", 1);
  ::setenv("STOKER_TEST_NODE", "3", 1);
  ::unsetenv("STOKER_TEST_UNSET");
  auto j = parse(train_job("    world_size: ${STOKER_TEST_WORLD}\n    node_rank: ${STOKER_TEST_NODE}\n"
                           "    local_world_size: ${STOKER_TEST_UNSET:-8}\n    seed: 1${STOKER_TEST_NODE}\n"))
               .jobs.at(0);
  CHECK((j.world_size == 32 && j.first_rank == 24 && j.consumers == 8 && j.seed == 13));
  CHECK(refusal(train_job("    world_size: ${STOKER_TEST_UNSET}\n")) ==
        "test.yaml:5:17: jobs.train.world_size: environment variable STOKER_TEST_UNSET is not set (the value "
        "is '${STOKER_TEST_UNSET}'; set it, or write ${STOKER_TEST_UNSET:-default})");
  CHECK_THAT(refusal(train_job("    world_size: ${STOKER_TEST_WORLD\n")), Contains("unterminated ${"));
  CHECK_THAT(refusal(train_job("    world_size: ${A B}\n")), Contains("is not ${NAME} or ${NAME:-default}"));
  ::unsetenv("STOKER_TEST_WORLD");
  ::unsetenv("STOKER_TEST_NODE");
}

TEST_CASE("config error: impossible worlds and rank ranges", "[config][multinode]") {
  CHECK(refusal(train_job("    ranks: 0-3\n")) == "test.yaml:5:12: jobs.train.ranks: needs world_size beside it (the global number of ranks)");
  CHECK(refusal(train_job("    world_size: 8\n    ranks: 8-15\n")) == "test.yaml:6:12: jobs.train.ranks: must be between 0 and 7, got 8");
  CHECK(refusal(train_job("    world_size: 8\n    ranks: 5-2\n")) == "test.yaml:6:12: jobs.train.ranks: the range 5-2 is empty (A-B needs A <= B)");
  CHECK_THAT(refusal(train_job("    world_size: 8\n    ranks: 1-2-3\n")), Contains("expected A-B (global ranks, inclusive)"));
  CHECK_THAT(refusal(train_job("    world_size: 8\n    ranks: a-b\n")), Contains("expected an integer, got 'a'"));
  CHECK_THAT(refusal(train_job("    world_size: 8\n    node_rank: 1\n")), Contains("node_rank and local_world_size go together"));
  CHECK_THAT(refusal(train_job("    world_size: 12\n    node_rank: 1\n    local_world_size: 8\n")),
             Contains("node 1 with 8 rank(s) per node needs ranks 8..15, beyond world_size 12"));
  CHECK_THAT(refusal(train_job("    world_size: 8\n    ranks: 0-3\n    consumers: 8\n")),
             Contains("consumers: 8 disagrees with the 4 rank(s) this daemon serves (0..3); leave consumers out"));
  CHECK_THAT(refusal(train_job("    world_size: 8\n    ranks: 0-3\n    node_rank: 0\n")), Contains("not both"));
}

TEST_CASE("malformed configs: each is refused within a second with an error naming the file", "[config]") {
  const fs::path dir = fs::path(STOKER_TEST_DATA_DIR) / "configs-malformed";
  int seen = 0;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.path().extension() != ".yaml") continue;
    ++seen;
    INFO(e.path().string());
    // In a child process, so that a parser that never returns fails this test instead of
    // hanging it (yaml-cpp 0.7's LoadAll did on two of these files).
    int pipefd[2];
    REQUIRE(::pipe(pipefd) == 0);
    const pid_t pid = ::fork();
    if (pid == 0) {
      std::string what = "(accepted)";
      try {
        stoker::config::load_config(e.path());
      } catch (const ConfigError& err) {
        what = err.what();
      }
      [[maybe_unused]] ssize_t n = ::write(pipefd[1], what.data(), what.size());
      ::_exit(0);
    }
    ::close(pipefd[1]);
    const auto t0 = std::chrono::steady_clock::now();
    int status = 0;
    while (::waitpid(pid, &status, WNOHANG) == 0 && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(1)) {
      ::usleep(2000);
    }
    const bool ended = ::waitpid(pid, &status, WNOHANG) == pid || WIFEXITED(status);
    if (!ended) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
    }
    CHECK(ended);
    char buf[1024] = {};
    const ssize_t n = ::read(pipefd[0], buf, sizeof buf - 1);
    ::close(pipefd[0]);
    const std::string what(buf, n > 0 ? static_cast<std::size_t>(n) : 0);
    CHECK_THAT(what, StartsWith(e.path().string() + ":"));
  }
  CHECK(seen >= 10);
}

TEST_CASE("config: colour steps, their torchvision defaults and their errors", "[config][augment]") {
  auto job = [](const std::string& steps) {
    return parse(train_job("", "      - random_resized_crop: {size: 224}\n" + steps)).jobs.at(0);
  };
  const auto j = job("      - color_jitter: {brightness: 0.4, contrast: [0.5, 1.5]}\n      - random_grayscale\n"
                     "      - random_solarize: {threshold: 128}\n");
  REQUIRE(j.pipeline.augment.size() == 3);
  CHECK(j.pipeline.augment[0].brightness == std::array<double, 2>{0.6, 1.4});
  CHECK(j.pipeline.augment[0].contrast == std::array<double, 2>{0.5, 1.5});
  CHECK(j.pipeline.augment[0].saturation == std::array<double, 2>{1, 1});
  CHECK(j.pipeline.augment[1].p == 0.1);   // RandomGrayscale's default
  CHECK(j.pipeline.augment[2].p == 0.5);   // RandomSolarize's default
  CHECK(j.pipeline.augment[2].threshold == 128);
  CHECK(job("      - color_jitter: {hue: 0.1}\n").pipeline.augment[0].hue == std::array<double, 2>{-0.1, 0.1});
  CHECK_THAT(refusal(train_job("", "      - random_resized_crop: {size: 8}\n      - random_posterize: {p: 1}\n")),
             Contains("random_posterize.bits: required key is missing"));
  CHECK_THAT(refusal(train_job("", "      - random_resized_crop: {size: 8}\n      - normalize: {mean: [0,0,0], std: [1,1,1]}\n"
                                   "      - random_grayscale\n", "    output: {dtype: float32}\n")),
             Contains("put them before normalize"));
  CHECK_THAT(refusal(train_job("", "      - color_jiter: {}\n")), Contains("did you mean 'color_jitter'?"));
}

TEST_CASE("config: decode.max_memory_mb sets each worker's libjpeg budget and out of range is refused at its "
          "file:line", "[config]") {
  CHECK(parse(train_job()).jobs.at(0).pipeline.max_memory_bytes == std::uint64_t{256} << 20);  // default
  std::string yaml = train_job();
  replace_all(yaml, "decode: {}", "decode: {max_memory_mb: 48}");
  CHECK(parse(yaml).jobs.at(0).pipeline.max_memory_bytes == std::uint64_t{48} << 20);
  for (const char* bad : {"0", "15", "1048577", "-1"}) {
    INFO(bad);
    std::string y = train_job();
    replace_all(y, "decode: {}", std::string("decode: {max_memory_mb: ") + bad + "}");
    CHECK(refusal(y) == std::string("test.yaml:6:33: jobs.train.pipeline[0].decode.max_memory_mb: must be "
                                     "between 16 and 1048576, got ") + bad);
  }
  replace_all(yaml, "max_memory_mb: 48", "max_memory_mb: lots");
  CHECK(refusal(yaml) == "test.yaml:6:33: jobs.train.pipeline[0].decode.max_memory_mb: expected an integer, got 'lots'");
}

TEST_CASE("config: readers (fan-out) defaults to 1 and is refused out of range at its file:line", "[config]") {
  CHECK(parse(train_job()).jobs.at(0).readers == 1);
  CHECK(parse(train_job("    readers: 4\n")).jobs.at(0).readers == 4);
  CHECK(refusal(train_job("    readers: 0\n")) == "test.yaml:5:14: jobs.train.readers: must be between 1 and 64, got 0");
  CHECK(refusal(train_job("    readers: 65\n")) == "test.yaml:5:14: jobs.train.readers: must be between 1 and 64, got 65");
  CHECK(refusal(train_job("    readers: two\n")) == "test.yaml:5:14: jobs.train.readers: expected an integer, got 'two'");
}

TEST_CASE("config: cache takes a size with a binary unit, only for a deterministic pipeline", "[config]") {
  const std::string val = "      - resize: {size: 256}\n      - center_crop: {size: 224}\n";
  CHECK(parse(train_job("", val)).jobs.at(0).cache_bytes == 0);
  CHECK(parse(train_job("    cache: {bytes: 8GiB}\n", val)).jobs.at(0).cache_bytes == std::uint64_t{8} << 30);
  CHECK(parse(train_job("    cache: {bytes: 512 MiB}\n", val)).jobs.at(0).cache_bytes == std::uint64_t{512} << 20);
  CHECK(parse(train_job("    cache: {bytes: 4096}\n", val)).jobs.at(0).cache_bytes == 4096);
  CHECK(refusal(train_job("    cache: {bytes: 8GB}\n", val)) ==
        "test.yaml:5:20: jobs.train.cache.bytes: expected a size in bytes: an integer, or one with KiB, MiB, GiB or "
        "TiB (e.g. 8GiB), got '8GB'");
  CHECK(refusal(train_job("    cache: {size: 8GiB}\n", val)) ==
        "test.yaml:5:13: jobs.train.cache.size: unknown key (allowed: bytes)");
  CHECK_THAT(refusal(train_job("    cache: {bytes: 1GiB}\n")),
             StartsWith("test.yaml:5:12: jobs.train.cache: only for deterministic pipelines") &&
                 Contains("random_resized_crop"));
  CHECK_THAT(refusal(train_job("    cache: {bytes: 1GiB}\n", val + "      - horizontal_flip: {p: 0.5}\n")), Contains("has horizontal_flip"));
}

TEST_CASE("config: decoded_store takes max_side, path and bytes, bad values refused at file:line (#26)",
          "[config][decoded_store]") {
  const auto off = parse(train_job()).jobs.at(0);
  CHECK(off.store_max_side == 0);
  CHECK(off.pipeline.store_max_side == 0);
  const auto on = parse(train_job("    decoded_store: {max_side: 320, path: store, bytes: 200GiB}\n")).jobs.at(0);
  CHECK(on.store_max_side == 320);
  CHECK(on.pipeline.store_max_side == 320);  // the reduction is part of the pipeline
  CHECK(on.store_bytes == std::uint64_t{200} << 30);
  CHECK(on.store_path == std::filesystem::path(kBase) / "store");
  CHECK(parse(train_job("    decoded_store: {max_side: 256, path: /s, bytes: 512MiB}\n")).jobs.at(0).store_bytes ==
        std::uint64_t{512} << 20);
  CHECK(refusal(train_job("    decoded_store: {max_side: 320, path: /s, bytes: 2GB}\n")) ==
        "test.yaml:5:53: jobs.train.decoded_store.bytes: expected a size in bytes: an integer, or one with KiB, MiB, "
        "GiB or TiB (e.g. 8GiB), got '2GB'");
  CHECK_THAT(refusal(train_job("    decoded_store: {max_side: 8, path: /s, bytes: 1GiB}\n")),
             StartsWith("test.yaml:5:31: jobs.train.decoded_store.max_side:"));
  CHECK_THAT(refusal(train_job("    decoded_store: {max_side: 200, path: /s, bytes: 1GiB}\n")),
             StartsWith("test.yaml:5:31: jobs.train.decoded_store.max_side: max_side 200 is below the output's 224"));
  CHECK_THAT(refusal(train_job("    decoded_store: {max_side: 320, bytes: 1GiB}\n")),
             StartsWith("test.yaml:5:20: jobs.train.decoded_store") && Contains("path"));
  CHECK_THAT(refusal(train_job("    decoded_store: {max_side: 320, path: \"\", bytes: 1GiB}\n")),
             StartsWith("test.yaml:5:42: jobs.train.decoded_store.path: must name a folder"));
  CHECK_THAT(refusal(train_job("    decoded_store: {max_side: 320, path: /s, bytes: 1KiB}\n")),
             StartsWith("test.yaml:5:53: jobs.train.decoded_store.bytes: must be between 1048576"));
  CHECK_THAT(refusal(train_job("    decoded_store: {max_side: 320, path: /s, bytes: 1GiB, mode: raw}\n")),
             Contains("jobs.train.decoded_store.mode: unknown key (allowed: max_side, path, bytes)"));
}

TEST_CASE("config: read_ahead takes bytes and requests (on by default), false or a 0 turns it off, bad values "
          "refused at file:line", "[config][read_ahead]") {
  const auto plain = parse(train_job()).jobs.at(0);
  CHECK(plain.read_ahead_bytes == std::uint64_t{64} << 20);
  CHECK(plain.read_ahead_requests == 16u);
  const auto big = parse(train_job("    read_ahead: {bytes: 256MiB, requests: 64}\n")).jobs.at(0);
  CHECK(big.read_ahead_bytes == std::uint64_t{256} << 20);
  CHECK(big.read_ahead_requests == 64u);
  const auto off = parse(train_job("    read_ahead: false\n")).jobs.at(0);
  CHECK((off.read_ahead_bytes == 0 && off.read_ahead_requests == 0));
  CHECK(parse(train_job("    read_ahead: {requests: 0}\n")).jobs.at(0).read_ahead_requests == 0u);
  CHECK(parse(train_job("    read_ahead: true\n")).jobs.at(0).read_ahead_requests == 16u);
  CHECK(refusal(train_job("    read_ahead: {bytes: 1GB}\n")) ==
        "test.yaml:5:25: jobs.train.read_ahead.bytes: expected a size in bytes: an integer, or one with KiB, MiB, "
        "GiB or TiB (e.g. 8GiB), got '1GB'");
  CHECK(refusal(train_job("    read_ahead: {requests: 257}\n")) ==
        "test.yaml:5:28: jobs.train.read_ahead.requests: must be between 0 and 256, got 257");
  CHECK(refusal(train_job("    read_ahead: {depth: 8}\n")) ==
        "test.yaml:5:18: jobs.train.read_ahead.depth: unknown key (allowed: bytes, requests)");
  CHECK_THAT(refusal(train_job("    read_ahead: lots\n")), StartsWith("test.yaml:5:17: jobs.train.read_ahead: expected true or false"));
}

TEST_CASE("config: weight and workers share the worker pool between jobs, refused out of range at file:line",
          "[config]") {
  const auto plain = parse(train_job()).jobs.at(0);
  CHECK(plain.weight == 1.0);      // default: equal shares
  CHECK(plain.max_workers == 0u);  // default: no cap
  const auto set = parse(train_job("    weight: 2.5\n    workers: 3\n")).jobs.at(0);
  CHECK(set.weight == 2.5);
  CHECK(set.max_workers == 3u);
  CHECK(parse(train_job("    weight: 1000\n    workers: 1024\n")).jobs.at(0).weight == 1000.0);
  CHECK(parse(train_job("    weight: 0.01\n    workers: 1\n")).jobs.at(0).max_workers == 1u);
  for (const char* bad : {"0", "-1", "1000.5"}) {
    INFO(bad);
    CHECK(refusal(train_job(std::string("    weight: ") + bad + "\n")) ==
          "test.yaml:5:13: jobs.train.weight: must be within (0, 1000]");
  }
  CHECK(refusal(train_job("    weight: heavy\n")) == "test.yaml:5:13: jobs.train.weight: expected a number, got 'heavy'");
  CHECK(refusal(train_job("    weight: [1, 2]\n")) == "test.yaml:5:13: jobs.train.weight: expected a number, got a list");
  for (const char* bad : {"0", "1025", "-2"}) {
    INFO(bad);
    CHECK(refusal(train_job(std::string("    workers: ") + bad + "\n")) ==
          std::string("test.yaml:5:14: jobs.train.workers: must be between 1 and 1024, got ") + bad);
  }
  CHECK(refusal(train_job("    workers: 1.5\n")) == "test.yaml:5:14: jobs.train.workers: expected an integer, got '1.5'");
  CHECK(refusal(train_job("    workers: all\n")) == "test.yaml:5:14: jobs.train.workers: expected an integer, got 'all'");
  CHECK_THAT(refusal(train_job("    weigth: 2\n")), StartsWith("test.yaml:5:5: jobs.train.weigth: ") &&
                                                      Contains("did you mean 'weight'?"));
}

TEST_CASE("config: a file list is 'list' ('file' still accepted) - both at once are refused at file:line", "[config]") {
  // relative-root.yaml exists in the configs folder: any regular file will do as the list.
  std::string t = train_job();
  replace_all(t, "{root: .}", "{type: filelist, list: relative-root.yaml, root: .}");
  auto c = parse(t);
  CHECK(c.jobs[0].source.file == (kBase / "relative-root.yaml").lexically_normal());
  CHECK(c.jobs[0].source.root_key == "list");
  t = train_job();
  replace_all(t, "{root: .}", "{type: filelist, file: relative-root.yaml}");
  c = parse(t);
  CHECK(c.jobs[0].source.file == (kBase / "relative-root.yaml").lexically_normal());
  CHECK(c.jobs[0].source.root == kBase.lexically_normal());
  CHECK(c.jobs[0].source.root_key == "file");
  t = train_job();
  replace_all(t, "{root: .}", "{type: filelist, list: relative-root.yaml, file: relative-root.yaml}");
  CHECK_THAT(refusal(t), StartsWith("test.yaml:3:") &&
                             Contains("jobs.train.source.file: give the file list as 'list' only ('file' is its older name)"));
  t = train_job();
  replace_all(t, "{root: .}", "{type: filelist}");
  CHECK_THAT(refusal(t), Contains("jobs.train.source.list: required key is missing"));
  t = train_job();
  replace_all(t, "{root: .}", "{root: ., list: relative-root.yaml}");
  CHECK_THAT(refusal(t), StartsWith("test.yaml:3:") && Contains("jobs.train.source.list: only for type: filelist"));
}

TEST_CASE("config: tar shards are one pattern or a list, relative to the config's folder", "[config][tar]") {
  std::string t = train_job();
  replace_all(t, "{root: .}", "{type: tar, shards: \"train-{000..002}.tar\"}");
  auto c = parse(t);
  CHECK(c.jobs[0].source.type == "tar");
  CHECK(c.jobs[0].source.shards == std::vector<std::string>{(kBase / "train-{000..002}.tar").string()});
  CHECK(c.jobs[0].source.root_key == "shards");
  t = train_job();
  replace_all(t, "{root: .}", "{type: tar, shards: [a.tar, \"/data/b-{0..1}.tar\"]}");
  c = parse(t);
  CHECK(c.jobs[0].source.shards == std::vector<std::string>{(kBase / "a.tar").string(), "/data/b-{0..1}.tar"});
  t = train_job();
  replace_all(t, "{root: .}", "{type: tar}");
  CHECK_THAT(refusal(t), Contains("jobs.train.source.shards: required key is missing"));
  t = train_job();
  replace_all(t, "{root: .}", "{type: tar, shards: []}");
  CHECK_THAT(refusal(t), StartsWith("test.yaml:3:") && Contains("jobs.train.source.shards: expected at least one shard pattern"));
  t = train_job();
  replace_all(t, "{root: .}", "{type: tar, shards: a.tar, root: .}");
  CHECK_THAT(refusal(t), StartsWith("test.yaml:3:") && Contains("jobs.train.source.root: not a key of type: tar"));
  t = train_job();
  replace_all(t, "{root: .}", "{root: ., shards: a.tar}");
  CHECK_THAT(refusal(t), StartsWith("test.yaml:3:") && Contains("jobs.train.source.shards: only for type: tar"));
}

TEST_CASE("config: color_jitter hue, gaussian_blur and random_erasing as torchvision checks them, refused at "
          "file:line", "[config][augment]") {
  using Kind = stoker::augment::AugmentStep::Kind;
  auto steps = [](const std::string& more) { return "      - random_resized_crop: {size: 224}\n" + more; };
  auto job = [&](const std::string& more, const std::string& output = "    output: {dtype: uint8, layout: NCHW}\n") {
    return parse(train_job("", steps(more), output)).jobs.at(0);
  };
  const std::string f32 = "    output: {dtype: float32}\n";
  const std::string norm = "      - normalize: {mean: [0.5, 0.5, 0.5], std: [0.25, 0.25, 0.25]}\n";

  // hue: a number h in [0, 0.5] is [-h, h]; a pair within [-0.5, 0.5]; 0 leaves it out.
  CHECK(job("      - color_jitter: {hue: 0.5}\n").pipeline.augment[0].hue == std::array<double, 2>{-0.5, 0.5});
  CHECK(job("      - color_jitter: {hue: [-0.2, 0.1]}\n").pipeline.augment[0].hue == std::array<double, 2>{-0.2, 0.1});
  CHECK(job("      - color_jitter: {hue: 0}\n").pipeline.augment[0].hue == std::array<double, 2>{0, 0});
  CHECK(refusal(train_job("", steps("      - color_jitter: {hue: 0.6}\n"))) ==
        "test.yaml:8:29: jobs.train.pipeline[2].color_jitter.hue: must be within [0, 0.5] (the shift is drawn in "
        "[-hue, hue])");
  CHECK_THAT(refusal(train_job("", steps("      - color_jitter: {hue: -0.1}\n"))), Contains("must be within [0, 0.5]"));
  CHECK(refusal(train_job("", steps("      - color_jitter: {hue: [-0.6, 0.1]}\n"))) ==
        "test.yaml:8:29: jobs.train.pipeline[2].color_jitter.hue: must be [min, max] with -0.5 <= min <= max <= 0.5");
  CHECK_THAT(refusal(train_job("", steps("      - color_jitter: {hue: [0.2, 0.1]}\n"))), Contains("min <= max"));

  // gaussian_blur
  const auto b = job("      - gaussian_blur: {kernel_size: 23}\n").pipeline.augment.at(0);
  CHECK(b.kind == Kind::kGaussianBlur);
  CHECK(b.kernel == std::array<int, 2>{23, 23});
  CHECK(b.sigma == std::array<double, 2>{0.1, 2.0});  // GaussianBlur's default
  const auto b2 = job("      - gaussian_blur: {kernel_size: [3, 5], sigma: 1.5}\n").pipeline.augment.at(0);
  CHECK(b2.kernel == std::array<int, 2>{3, 5});
  CHECK(b2.sigma == std::array<double, 2>{1.5, 1.5});
  CHECK(job("      - gaussian_blur: {kernel_size: 9, sigma: [0.5, 1]}\n").pipeline.augment.at(0).sigma ==
        std::array<double, 2>{0.5, 1.0});
  CHECK(refusal(train_job("", steps("      - gaussian_blur: {kernel_size: 4}\n"))) ==
        "test.yaml:8:38: jobs.train.pipeline[2].gaussian_blur.kernel_size: must be odd (the kernel is centred on the "
        "pixel), got 4");
  CHECK_THAT(refusal(train_job("", steps("      - gaussian_blur: {kernel_size: [3, 6]}\n"))),
             StartsWith("test.yaml:8:42: jobs.train.pipeline[2].gaussian_blur.kernel_size[1]: must be odd"));
  CHECK_THAT(refusal(train_job("", steps("      - gaussian_blur: {kernel_size: 0}\n"))), Contains("must be between 1 and"));
  CHECK_THAT(refusal(train_job("", steps("      - gaussian_blur: {sigma: 1}\n"))),
             Contains("gaussian_blur.kernel_size: required key is missing"));
  CHECK_THAT(refusal(train_job("", steps("      - gaussian_blur: {kernel_size: 3, sigma: 0}\n"))),
             StartsWith("test.yaml:8:48: jobs.train.pipeline[2].gaussian_blur.sigma: must be > 0"));
  CHECK_THAT(refusal(train_job("", steps("      - gaussian_blur: {kernel_size: 3, sigma: [2, 1]}\n"))),
             Contains("sigma: must be [min, max] with 0 < min <= max"));
  CHECK_THAT(refusal(train_job("", "      - random_resized_crop: {size: [8, 16]}\n      - gaussian_blur: {kernel_size: [17, 17]}\n")),
             StartsWith("test.yaml:8:38: jobs.train.pipeline[2].gaussian_blur.kernel_size: a 17x17 kernel needs an "
                        "output of at least 9x9"));
  CHECK_THAT(refusal(train_job("", steps(norm + "      - gaussian_blur: {kernel_size: 3}\n"), f32)),
             Contains("put it before normalize"));

  // random_erasing before normalize: pixel units
  const auto e = job("      - random_erasing: {value: [1, 2, 3]}\n").pipeline;
  REQUIRE(e.augment.size() == 1);
  CHECK(e.erase_output.empty());
  CHECK(e.augment[0].kind == Kind::kErasing);
  CHECK(e.augment[0].erasing.p == 0.5);  // RandomErasing's defaults
  CHECK(e.augment[0].erasing.scale == std::array<double, 2>{0.02, 0.33});
  CHECK(e.augment[0].erasing.ratio == std::array<double, 2>{0.3, 3.3});
  CHECK(e.augment[0].erasing.value == std::array<float, 3>{1, 2, 3});
  CHECK(job("      - random_erasing\n").pipeline.augment.at(0).erasing.value == std::array<float, 3>{0, 0, 0});
  CHECK(job("      - random_erasing: {value: 255, p: 1}\n").pipeline.augment.at(0).erasing.value ==
        std::array<float, 3>{255, 255, 255});
  CHECK(refusal(train_job("", steps("      - random_erasing: {value: 256}\n"))) ==
        "test.yaml:8:33: jobs.train.pipeline[2].random_erasing.value: before normalize the value is in pixel units: "
        "an integer 0..255 (after normalize it is in normalized units)");
  CHECK_THAT(refusal(train_job("", steps("      - random_erasing: {value: [0, 0.5, 0]}\n"))),
             StartsWith("test.yaml:8:37: jobs.train.pipeline[2].random_erasing.value[1]: before normalize"));
  CHECK_THAT(refusal(train_job("", steps("      - random_erasing: {value: random}\n"))),
             StartsWith("test.yaml:8:33: jobs.train.pipeline[2].random_erasing.value: 'random' draws standard normal"));
  CHECK_THAT(refusal(train_job("", steps("      - random_erasing: {value: [1, 2]}\n"))),
             Contains("expected a number, a list of 3 (R, G, B) or 'random'"));
  CHECK_THAT(refusal(train_job("", steps("      - random_erasing: {p: 1.5}\n"))),
             StartsWith("test.yaml:8:29: jobs.train.pipeline[2].random_erasing.p: must be within [0, 1]"));
  CHECK_THAT(refusal(train_job("", steps("      - random_erasing: {scale: [0.1, 1.2]}\n"))),
             Contains("scale: must be [min, max] with 0 <= min <= max <= 1"));
  CHECK_THAT(refusal(train_job("", steps("      - random_erasing: {ratio: [0, 1]}\n"))),
             Contains("ratio: must be [min, max] with 0 < min <= max"));
  CHECK_THAT(refusal(train_job("", steps("      - random_erasing: {valu: 1}\n"))), Contains("did you mean 'value'?"));
  CHECK_THAT(refusal(train_job("", steps("      - random_erasing\n      - horizontal_flip\n"))),
             StartsWith("test.yaml:9:9: jobs.train.pipeline[3].horizontal_flip: horizontal_flip must come before "
                        "random_erasing"));
  CHECK_THAT(refusal(train_job("", "      - random_erasing\n      - random_resized_crop: {size: 8}\n")),
             Contains("random_erasing comes after the geometry step"));

  // random_erasing after normalize: normalized units, on the float output
  const auto n = job(norm + "      - random_erasing: {value: -2.5}\n      - random_erasing: {value: random, p: 1}\n", f32)
                     .pipeline;
  CHECK(n.augment.empty());
  REQUIRE(n.erase_output.size() == 2);
  CHECK(n.erase_output[0].value == std::array<float, 3>{-2.5f, -2.5f, -2.5f});
  CHECK(n.erase_output[1].random);
  CHECK(n.erase_output[1].p == 1);
  CHECK_THAT(refusal(train_job("    device_normalize: true\n", steps(norm + "      - random_erasing\n"), f32)),
             StartsWith("test.yaml:5:23: jobs.train.device_normalize: random_erasing after normalize"));
  CHECK(parse(train_job("    device_normalize: true\n", steps("      - random_erasing\n" + norm), f32))
            .jobs.at(0).device_normalize);
  CHECK_THAT(refusal(train_job("", "      - resize: {size: [8, 8]}\n" + norm + "      - random_erasing\n", f32 + "    cache: {bytes: 1MiB}\n")),
             Contains("has random_erasing"));
}

TEST_CASE("config: random_rotation as RandomRotation checks it and refused at file:line", "[config][augment]") {
  auto steps = [](const std::string& more) { return "      - random_resized_crop: {size: 224}\n" + more; };
  const auto a = parse(train_job("", steps("      - random_rotation: {degrees: 15}\n"))).jobs.at(0).pipeline.augment.at(0);
  CHECK(a.kind == stoker::augment::AugmentStep::Kind::kRotation);
  CHECK(a.degrees == std::array<double, 2>{-15, 15});
  CHECK(a.interpolation == stoker::augment::Interpolation::kNearest);
  CHECK(a.fill == std::array<float, 3>{0, 0, 0});
  const auto b = parse(train_job("", steps("      - random_rotation: {degrees: [-5, 30], interpolation: bilinear, "
                                           "fill: [1, 2, 255]}\n")))
                     .jobs.at(0)
                     .pipeline.augment.at(0);
  CHECK(b.degrees == std::array<double, 2>{-5, 30});
  CHECK(b.interpolation == stoker::augment::Interpolation::kBilinear);
  CHECK(b.fill == std::array<float, 3>{1, 2, 255});
  CHECK(refusal(train_job("", steps("      - random_rotation: {degrees: -3}\n"))) ==
        "test.yaml:8:36: jobs.train.pipeline[2].random_rotation.degrees: must be >= 0 (the angle is drawn in "
        "[-degrees, degrees])");
  CHECK_THAT(refusal(train_job("", steps("      - random_rotation: {degrees: [10, 5]}\n"))),
             Contains("degrees: must be [min, max] with min <= max"));
  CHECK_THAT(refusal(train_job("", steps("      - random_rotation: {}\n"))),
             Contains("random_rotation.degrees: required key is missing"));
  CHECK_THAT(refusal(train_job("", steps("      - random_rotation: {degrees: 5, interpolation: bicubic}\n"))),
             Contains("must be one of nearest, bilinear, got 'bicubic'"));
  CHECK_THAT(refusal(train_job("", steps("      - random_rotation: {degrees: 5, fill: 300}\n"))),
             Contains("random_rotation.fill: must be a pixel value within [0, 255]"));
  CHECK_THAT(refusal(train_job("", steps("      - random_rotation: {degrees: 5}\n      - horizontal_flip\n"))),
             Contains("horizontal_flip must come before random_rotation"));
  CHECK(parse(train_job("", steps("      - horizontal_flip\n      - random_rotation: {degrees: 5}\n"))).jobs.size() == 1);
  CHECK_THAT(refusal(train_job("", steps("      - normalize: {mean: [0, 0, 0], std: [1, 1, 1]}\n"
                                         "      - random_rotation: {degrees: 5}\n"),
                               "    output: {dtype: float32}\n")),
             Contains("random_rotation works on uint8 pixels: put it before normalize"));
}

TEST_CASE("config: random_affine as RandomAffine, checked and refused at file:line", "[config][augment]") {
  auto steps = [](const std::string& more) { return "      - random_resized_crop: {size: 224}\n" + more; };
  auto step = [&](const std::string& line) { return parse(train_job("", steps(line))).jobs.at(0).pipeline.augment.at(0); };
  const auto a = step("      - random_affine: {degrees: 10}\n");
  CHECK(a.kind == stoker::augment::AugmentStep::Kind::kAffine);
  CHECK(a.affine.degrees == std::array<double, 2>{-10, 10});
  CHECK_FALSE(a.affine.has_translate);
  CHECK_FALSE(a.affine.has_scale);
  CHECK(a.affine.shear_ranges == 0);
  const auto b = step("      - random_affine: {degrees: [0, 5], translate: [0.1, 0.2], scale: [0.9, 1.1], shear: 7, "
                      "interpolation: bilinear, fill: 9}\n");
  CHECK(b.affine.translate == std::array<double, 2>{0.1, 0.2});
  CHECK(b.affine.scale == std::array<double, 2>{0.9, 1.1});
  CHECK(b.affine.shear_ranges == 1);
  CHECK(b.affine.shear == std::array<double, 4>{-7, 7, 0, 0});
  CHECK(b.interpolation == stoker::augment::Interpolation::kBilinear);
  CHECK(b.fill == std::array<float, 3>{9, 9, 9});
  CHECK(step("      - random_affine: {degrees: 0, shear: [-1, 2, -3, 4]}\n").affine.shear_ranges == 2);
  CHECK(refusal(train_job("", steps("      - random_affine: {degrees: 0, translate: [0.1, 1.5]}\n"))) ==
        "test.yaml:8:54: jobs.train.pipeline[2].random_affine.translate[1]: must be a fraction of the side within [0, 1]");
  CHECK_THAT(refusal(train_job("", steps("      - random_affine: {degrees: 0, scale: [0, 1]}\n"))),
             Contains("random_affine.scale: must be [min, max] with 0 < min <= max"));
  CHECK_THAT(refusal(train_job("", steps("      - random_affine: {degrees: 0, shear: [1, 2, 3]}\n"))),
             Contains("random_affine.shear: expected a number s (x shear in [-s, s]), [min, max] (x) or [xmin, xmax, ymin, ymax]"));
  CHECK_THAT(refusal(train_job("", steps("      - random_affine: {translate: [0.1, 0.1]}\n"))),
             Contains("random_affine.degrees: required key is missing"));
  CHECK_THAT(refusal(train_job("", steps("      - random_affine: {degrees: 3, center: [0, 0]}\n"))),
             Contains("random_affine.center"));
  CHECK_THAT(refusal(train_job("", steps("      - random_affine: {degrees: 5}\n      - horizontal_flip\n"))),
             Contains("horizontal_flip must come before random_affine"));
}

TEST_CASE("config: trivial_augment_wide, rand_augment, auto_augment with torchvision's defaults and refusals",
          "[config][augment]") {
  using stoker::augment::PolicyKind;
  auto steps = [](const std::string& more) { return "      - random_resized_crop: {size: 224}\n" + more; };
  auto step = [&](const std::string& line) { return parse(train_job("", steps(line))).jobs.at(0).pipeline.augment.at(0); };
  const auto ta = step("      - trivial_augment_wide\n");
  CHECK(ta.kind == stoker::augment::AugmentStep::Kind::kPolicy);
  CHECK(ta.policy.kind == PolicyKind::kTrivialAugmentWide);
  CHECK(ta.policy.num_magnitude_bins == 31);
  CHECK(ta.policy.interpolation == stoker::augment::Interpolation::kNearest);
  CHECK(step("      - trivial_augment_wide: {num_magnitude_bins: 11, interpolation: bilinear}\n").policy.num_magnitude_bins == 11);
  const auto ra = step("      - rand_augment: {}\n");
  CHECK(ra.policy.kind == PolicyKind::kRandAugment);
  CHECK((ra.policy.num_ops == 2 && ra.policy.magnitude == 9 && ra.policy.num_magnitude_bins == 31));
  const auto ra2 = step("      - rand_augment: {num_ops: 3, magnitude: 4, num_magnitude_bins: 5}\n");
  CHECK((ra2.policy.num_ops == 3 && ra2.policy.magnitude == 4 && ra2.policy.num_magnitude_bins == 5));
  CHECK(step("      - auto_augment: {policy: imagenet}\n").policy.kind == PolicyKind::kAutoAugmentImagenet);
  CHECK(step("      - auto_augment\n").policy.kind == PolicyKind::kAutoAugmentImagenet);
  CHECK(refusal(train_job("", steps("      - auto_augment: {policy: cifar10}\n"))) ==
        "test.yaml:8:32: jobs.train.pipeline[2].auto_augment.policy: must be one of imagenet, got 'cifar10'");
  CHECK_THAT(refusal(train_job("", steps("      - rand_augment: {num_magnitude_bins: 5}\n"))),
             Contains("magnitude 9 is a bin index: must be below num_magnitude_bins (5)"));
  CHECK_THAT(refusal(train_job("", steps("      - rand_augment: {num_ops: 17}\n"))),
             Contains("rand_augment.num_ops: must be between 0 and 16, got 17"));
  CHECK_THAT(refusal(train_job("", steps("      - trivial_augment_wide: {num_magnitude_bins: 1}\n"))),
             Contains("trivial_augment_wide.num_magnitude_bins: must be between 2 and 1024, got 1"));
  CHECK_THAT(refusal(train_job("", steps("      - trivial_augment_wide: {num_ops: 2}\n"))),
             Contains("trivial_augment_wide.num_ops"));
  CHECK_THAT(refusal(train_job("", steps("      - trivial_augment_wide: {interpolation: bicubic}\n"))),
             Contains("must be one of nearest, bilinear, got 'bicubic'"));
  CHECK_THAT(refusal(train_job("", steps("      - trivial_agument_wide\n"))), Contains("did you mean 'trivial_augment_wide'?"));
  CHECK_THAT(refusal(train_job("", steps("      - trivial_augment_wide\n      - horizontal_flip\n"))),
             Contains("horizontal_flip must come before trivial_augment_wide"));
  CHECK_THAT(refusal(train_job("", steps("      - normalize: {mean: [0, 0, 0], std: [1, 1, 1]}\n      - rand_augment\n"),
                               "    output: {dtype: float32}\n")),
             Contains("rand_augment works on uint8 pixels: put it before normalize"));
}

TEST_CASE("config: the two drop_lasts and pad_shards", "[config]") {
  using stoker::sampler::Shards;
  const auto plain = parse(train_job()).jobs.at(0);
  CHECK(plain.shards() == Shards::kPad);
  CHECK_FALSE(plain.drop_last);
  // drop_last alone keeps its old meaning: both.
  const auto both = parse(train_job("    drop_last: true\n")).jobs.at(0);
  CHECK(both.drop_last);
  CHECK(both.shards() == Shards::kDrop);
  const auto batch_only = parse(train_job("    drop_last: true\n    sampler_drop_last: false\n")).jobs.at(0);
  CHECK(batch_only.drop_last);
  CHECK(batch_only.shards() == Shards::kPad);
  const auto val = parse(train_job("    pad_shards: false\n")).jobs.at(0);
  CHECK(val.shards() == Shards::kUneven);
  CHECK_THAT(refusal(train_job("    sampler_drop_last: true\n    pad_shards: false\n")),
             Catch::StartsWith("test.yaml:6:17: jobs.train.pad_shards: ") && Catch::Contains("choose one"));
}

TEST_CASE("config: server keys for jobs that come and go", "[config]") {
  const auto cfg = parse("server: {client_jobs: false, client_job_linger_s: 5, drain_timeout_s: 9}\n" + train_job());
  CHECK_FALSE(cfg.server.client_jobs);
  CHECK(cfg.server.client_job_linger_s == 5);
  CHECK(cfg.server.drain_timeout_s == 9);
  CHECK_THAT(refusal("server: {drain_timeout_s: 0}\n" + train_job()),
             Catch::Contains("server.drain_timeout_s") && Catch::Contains("(0, 86400]"));
}

TEST_CASE("config: jobs: {} is a daemon for client-defined jobs only, refused when clients may not define jobs",
          "[config]") {
  const auto cfg = parse("jobs: {}\n");
  CHECK(cfg.jobs.empty());
  CHECK(cfg.server.client_jobs);
  // The shipped example of that config.
  CHECK(stoker::config::load_config(fs::path(STOKER_SOURCE_DIR) / "configs" / "client-jobs.yaml").jobs.empty());
  CHECK_THAT(refusal("server:\n  client_jobs: false\njobs: {}\n"),
             StartsWith("test.yaml:3:7: jobs: ") && Contains("server.client_jobs: false") && Contains("serve nothing"));
}

TEST_CASE("config: a client-defined job is one job, no server keys, absolute paths", "[config]") {
  const std::string job = "jobs:\n  mine:\n    source: {root: \"" + std::string(STOKER_SOURCE_DIR) +
                          "/tests/data/demo\"}\n    batch_size: 4\n    pipeline: [{decode: {}}, {resize: {size: [8, 8]}}]\n";
  const auto jc = stoker::config::parse_client_job(job, "<client>");
  CHECK(jc.name == "mine");
  CHECK_FALSE(jc.definition.empty());
  auto refused = [](const std::string& text) {
    try {
      stoker::config::parse_client_job(text, "<client>");
    } catch (const stoker::config::ConfigError& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  CHECK_THAT(refused("server: {workers: 1}\n" + job), Catch::StartsWith("<client>:1:") && Catch::Contains("server"));
  CHECK_THAT(refused(job + "  second:\n    source: {root: /}\n    batch_size: 1\n    pipeline: [{decode: {}}, {resize: {size: [8, 8]}}]\n"),
             Catch::Contains("exactly one job"));
  CHECK_THAT(refused("jobs:\n  r:\n    source: {root: relative/dir}\n    batch_size: 4\n    pipeline: [{decode: {}}]\n"),
             Catch::StartsWith("<client>:3:") && Catch::Contains("must be absolute"));
}

TEST_CASE("config: augment_seed seeds the augmentations apart from the order", "[config]") {
  const auto j = parse(train_job("    seed: 5\n    augment_seed: 18446744073709551615\n")).jobs.at(0);
  CHECK(j.seed == 5);  // the permutation's
  CHECK(j.pixel_seed() == 18446744073709551615ull);  // crops, flips, colour, erasing, mixes
}

// ---------------------------------------------------------------------------------------------
// Mixtures of sources (`sources:`, issue #25)

namespace {

// A job reading `sources_yaml` in place of `source:` (both roots are this test folder).
std::string mixture_job(const std::string& sources_yaml) {
  std::string y = train_job();
  replace_all(y, "    source: {root: .}\n", sources_yaml);
  return y;
}

}  // namespace

TEST_CASE("config: sources: a weighted mixture with epoch_size and labels", "[config][mixture]") {
  const Config cfg = parse(mixture_job("    sources:\n"
                                       "      - {root: ., weight: 3}\n"
                                       "      - {type: filelist, list: ../demo/../configs/bad-scale.yaml, weight: 0.5, name: extra}\n"
                                       "    epoch_size: 1000\n"
                                       "    labels: shared\n"
                                       "    allow_missing_classes: true\n"));
  const auto& j = cfg.jobs.at(0);
  REQUIRE(j.mixture());
  REQUIRE(j.sources.size() == 2);
  CHECK(j.sources[0].weight == 3);
  CHECK(j.sources[0].name == "configs");  // the folder's name by default
  CHECK(j.sources[1].name == "extra");
  CHECK(j.sources[1].source.type == "filelist");
  CHECK(j.epoch_size == 1000);
  CHECK(j.labels == stoker::config::MixtureLabels::kShared);
  CHECK(j.allow_missing_classes);
  // Defaults: epoch_size 0 (the sum of the sizes), per_source labels; equal default names unique.
  const auto d = parse(mixture_job("    sources:\n      - {root: ., weight: 1}\n      - {root: ., weight: 1}\n")).jobs.at(0);
  CHECK(d.epoch_size == 0);
  CHECK(d.labels == stoker::config::MixtureLabels::kPerSource);
  CHECK(d.sources[0].name == "configs");
  CHECK(d.sources[1].name == "configs_1");
  // One `source:` is unchanged: no mixture.
  CHECK_FALSE(parse(train_job()).jobs.at(0).mixture());
}

TEST_CASE("config: bad sources, weights, epoch_size and labels are refused with file:line and the key",
          "[config][mixture]") {
  CHECK_THAT(refusal(mixture_job("    sources:\n      - {root: .}\n")),
             StartsWith("test.yaml:4:9: jobs.train.sources[0].weight: required key is missing"));
  CHECK_THAT(refusal(mixture_job("    sources:\n      - {root: ., weight: 0}\n")),
             StartsWith("test.yaml:4:27: jobs.train.sources[0].weight: ") && Contains("(0, 1000000]"));
  CHECK_THAT(refusal(mixture_job("    sources:\n      - {root: ., weight: -1}\n")),
             StartsWith("test.yaml:4:27: jobs.train.sources[0].weight: "));
  CHECK_THAT(refusal(mixture_job("    sources:\n      - {root: ./nope, weight: 1}\n")),
             StartsWith("test.yaml:4:16: jobs.train.sources[0].root: ") && Contains("not an existing directory"));
  CHECK_THAT(refusal(mixture_job("    sources: []\n")), StartsWith("test.yaml:3:14: jobs.train.sources: "));
  CHECK_THAT(refusal(mixture_job("    sources:\n      - {root: ., weight: 1, colour: red}\n")),
             StartsWith("test.yaml:4:") && Contains("jobs.train.sources[0]") && Contains("colour"));
  CHECK_THAT(refusal(mixture_job("    source: {root: .}\n    sources:\n      - {root: ., weight: 1}\n")),
             StartsWith("test.yaml:3:") && Contains("jobs.train.source") && Contains("not both"));
  CHECK_THAT(refusal(mixture_job("    sources:\n      - {root: ., weight: 1}\n    epoch_size: 0\n")),
             StartsWith("test.yaml:5:17: jobs.train.epoch_size: "));
  CHECK_THAT(refusal(mixture_job("    sources:\n      - {root: ., weight: 1}\n    labels: mixed\n")),
             StartsWith("test.yaml:5:13: jobs.train.labels: ") && Contains("per_source"));
  CHECK_THAT(refusal(mixture_job("    sources:\n      - {root: ., weight: 1}\n    allow_missing_classes: true\n")),
             StartsWith("test.yaml:5:28: jobs.train.allow_missing_classes: ") && Contains("labels: shared"));
  CHECK_THAT(refusal(mixture_job("    sources:\n      - {root: ., weight: 1, name: a}\n      - {root: ., weight: 1, name: a}\n")),
             StartsWith("test.yaml:5:") && Contains("jobs.train.sources[1].name") && Contains("earlier source"));
  CHECK_THAT(refusal(train_job("    epoch_size: 10\n")),
             StartsWith("test.yaml:") && Contains("jobs.train.epoch_size") && Contains("sources:"));
  CHECK_THAT(refusal(train_job("    labels: shared\n")), Contains("jobs.train.labels") && Contains("sources:"));
}

namespace {

// Pins config::job_memory_budget() for one test, so its refusals do not depend on the machine.
struct PinnedJobBudget {
  explicit PinnedJobBudget(std::uint64_t bytes) { stoker::config::set_job_memory_budget_for_testing(bytes); }
  ~PinnedJobBudget() { stoker::config::set_job_memory_budget_for_testing(0); }
};

}  // namespace

TEST_CASE("config: a size past what the machine can hold is refused at its line with the bound (issue #34 C1)",
          "[config][bounds]") {
  // Before: epoch_size up to 4294967295 was accepted and the order's ~26 GB ended in bad_alloc.
  const std::string epoch = mixture_job("    sources:\n      - {root: ., weight: 1}\n    epoch_size: 4294967295\n");
  if (stoker::config::job_memory_budget() / stoker::config::kBytesPerEpochPosition < 4294967295u) {
    CHECK_THAT(refusal(epoch), StartsWith("test.yaml:5:17: jobs.train.epoch_size: must be at most ") &&
                                   Contains("on this machine, got 4294967295") &&
                                   Contains("quarter of this machine's memory"));
  }
  PinnedJobBudget pinned(std::uint64_t{1} << 30);  // 1 GiB: 107374182 positions of 10 bytes
  CHECK(refusal(epoch) ==
        "test.yaml:5:17: jobs.train.epoch_size: must be at most 107374182 on this machine, got 4294967295 (an epoch's "
        "order takes 10 bytes a position; the bound is 1024 MiB, a quarter of this machine's memory: what one job may "
        "take when it starts)");
  std::string fits = epoch;
  replace_all(fits, "4294967295", "107374182");
  CHECK(parse(fits).jobs.at(0).epoch_size == 107374182);

  // Batches: 64 of 4096x4096 RGB (48 MiB each) fit one slot (3 GiB) but not 4 of them in 1 GiB.
  std::string batch = train_job("", "      - resize: {size: [4096, 4096]}\n");
  replace_all(batch, "batch_size: 8", "batch_size: 64");
  CHECK_THAT(refusal(batch), StartsWith("test.yaml:4:17: jobs.train.batch_size: the rings would take 12288 MiB (1 "
                                        "rank(s) x prefetch 4 x batch_size 64 x 50331648 bytes a sample)") &&
                                 Contains("bound of 1024 MiB") &&
                                 Contains("reduce prefetch, batch_size, the output size"));
  // prefetch named where it is what was raised.
  std::string prefetch = train_job("    prefetch: 64\n", "      - resize: {size: [1024, 1024]}\n");
  CHECK_THAT(refusal(prefetch), StartsWith("test.yaml:5:15: jobs.train.prefetch: the rings would take 1536 MiB") &&
                                    Contains("bound of 1024 MiB"));
  // What is allocated while the job runs: the cache (up to the machine's memory, 4 GiB here),
  // read-ahead and one decode (up to the job's quarter).
  CHECK_THAT(
      refusal(train_job("    cache: {bytes: 8GiB}\n", "      - resize: {size: 8}\n      - center_crop: {size: 8}\n")),
      StartsWith("test.yaml:5:20: jobs.train.cache.bytes: must be at most 4096 MiB, this machine's memory, got "
                 "8192 MiB"));
  CHECK(parse(train_job("    cache: {bytes: 4GiB}\n", "      - resize: {size: 8}\n      - center_crop: {size: 8}\n"))
            .jobs.at(0)
            .cache_bytes == std::uint64_t{4} << 30);
  CHECK_THAT(refusal(train_job("    read_ahead: {bytes: 2GiB}\n")),
             StartsWith("test.yaml:5:25: jobs.train.read_ahead.bytes: must be at most the bound of 1024 MiB"));
  std::string decode = train_job();
  replace_all(decode, "decode: {}", "decode: {max_memory_mb: 2048}");
  CHECK_THAT(refusal(decode), Contains("jobs.train.pipeline[0].decode.max_memory_mb: must be at most 1024 (the bound "
                                       "of 1024 MiB") &&
                                  Contains("got 2048"));
  replace_all(decode, "max_memory_mb: 2048", "max_pixels: 300000000");
  CHECK_THAT(refusal(decode), Contains("jobs.train.pipeline[0].decode.max_pixels: must be at most 268435456 (4 bytes "
                                       "a decoded pixel") &&
                                  Contains("got 300000000"));
  std::string ranks = train_job("    consumers: 1024\n", "      - resize: {size: [256, 256]}\n");
  CHECK_THAT(refusal(ranks),
             StartsWith("test.yaml:4:17: jobs.train.batch_size: the rings would take ") && Contains("1024 rank(s)"));
}

// ---------------------------------------------------------------------------------------------
// Object storage (issue #35)

TEST_CASE("config: tar shards may be s3:// or https:// URLs, kept as written, with an endpoint", "[config]") {
  std::string j = train_job();
  replace_all(j, "source: {root: .}",
              "source: {type: tar, shards: [\"s3://bucket/train-{00..03}.tar\", \"https://host:8443/x/v.tar\"], "
              "endpoint: \"http://127.0.0.1:9000\"}");
  const auto cfg = parse(j);
  REQUIRE(cfg.jobs[0].source.shards.size() == 2);
  CHECK(cfg.jobs[0].source.shards[0] == "s3://bucket/train-{00..03}.tar");
  CHECK(cfg.jobs[0].source.shards[1] == "https://host:8443/x/v.tar");
  CHECK(cfg.jobs[0].source.endpoint == "http://127.0.0.1:9000");
  CHECK(cfg.jobs[0].source.addressing.empty());  // chosen by the endpoint when the job loads
  j = train_job();
  replace_all(j, "source: {root: .}", "source: {type: tar, shards: \"s3://bucket/t.tar\", addressing: virtual}");
  CHECK(parse(j).jobs[0].source.addressing == "virtual");
}

TEST_CASE("config: an ImageFolder root may be an s3:// prefix, kept without its trailing '/'", "[config]") {
  std::string j = train_job();
  replace_all(j, "source: {root: .}", "source: {root: \"s3://bucket/imagenet/train/\"}");
  const auto cfg = parse(j);
  CHECK(cfg.jobs[0].source.root.string() == "s3://bucket/imagenet/train");
  CHECK(cfg.jobs[0].source.type == "imagefolder");
}

TEST_CASE("config: a file list in object storage, its root the list's folder unless given", "[config]") {
  std::string j = train_job();
  replace_all(j, "source: {root: .}", "source: {type: filelist, list: \"s3://bucket/lists/train.txt\"}");
  auto cfg = parse(j);
  CHECK(cfg.jobs[0].source.file.string() == "s3://bucket/lists/train.txt");
  CHECK(cfg.jobs[0].source.root.string() == "s3://bucket/lists");
  j = train_job();
  replace_all(j, "source: {root: .}",
              "source: {type: filelist, list: \"https://h/lists/train.txt\", root: \"https://h/images/\"}");
  cfg = parse(j);
  CHECK(cfg.jobs[0].source.root.string() == "https://h/images");
}

TEST_CASE("config: a malformed URL, an endpoint without a URL source, or a URL root is refused with file:line and "
          "the key",
          "[config]") {
  const auto with = [](const std::string& source) {
    std::string j = train_job();
    replace_all(j, "source: {root: .}", "source: " + source);
    return refusal(j);
  };
  CHECK_THAT(with("{type: tar, shards: \"s3:///train.tar\"}"), Contains("test.yaml:3") && Contains("no bucket"));
  CHECK_THAT(with("{type: tar, shards: \"https://me:pw@host/x.tar\"}"),
             Contains("credentials in a URL are refused") && !Contains("pw@"));
  CHECK_THAT(with("{type: tar, shards: \"/data/a.tar\", endpoint: \"http://127.0.0.1:9000\"}"),
             Contains("endpoint") && Contains("only for a source in object storage"));
  CHECK_THAT(with("{type: tar, shards: \"s3://b/a.tar\", endpoint: \"127.0.0.1:9000\"}"),
             Contains("expected an http:// or https:// URL"));
  CHECK_THAT(with("{type: tar, shards: \"s3://b/a.tar\", addressing: sideways}"),
             Contains("test.yaml:3") && Contains("addressing") && Contains("expected path") && Contains("sideways"));
  CHECK_THAT(with("{type: tar, shards: \"/data/a.tar\", addressing: path}"),
             Contains("addressing") && Contains("only for a source in object storage"));
  CHECK_THAT(with("{type: imagefolder, root: \"https://host/train/\"}"),
             Contains("root") && Contains("an ImageFolder root in object storage must be an s3:// URL"));
  CHECK_THAT(with("{type: filelist, list: \"lists/x.txt\", root: \"s3://b/train\"}"), Contains("test.yaml:3"));
  CHECK_THAT(with("{type: filelist, list: \"s3://b/lists/train.txt\", root: /data}"),
             Contains("root") && Contains("must be a URL"));
}

TEST_CASE("config: remote workers serve a source in object storage, sent its URLs and endpoint, never credentials",
          "[config]") {
  std::string j = train_job("    remote:\n      workers: [\"10.0.0.1:7000\"]\n");
  replace_all(j, "source: {root: .}",
              "source: {type: tar, shards: \"s3://bucket/train.tar\", endpoint: \"http://127.0.0.1:9000\"}");
  const Config cfg = parse(j);
  const std::string& sent = cfg.jobs.at(0).remote.worker_yaml;
  CHECK_THAT(sent, Contains("s3://bucket/train.tar") && Contains("http://127.0.0.1:9000"));
  CHECK_THAT(sent, !Contains("AWS_") && !Contains("secret") && !Contains("credentials"));
}

TEST_CASE("config: a client-defined job reads only the buckets server.client_job_buckets names, never https://, "
          "and sets no endpoint or cache",
          "[config]") {
  auto job = [](const std::string& source) {
    return "jobs:\n  mine:\n    source: " + source + "\n    batch_size: 8\n    pipeline:\n      - decode: {}\n"
           "      - random_resized_crop: {size: 32}\n    output: {dtype: uint8, layout: NCHW}\n";
  };
  auto refusal = [](const std::string& text, const std::vector<std::string>& buckets) -> std::string {
    try {
      (void)stoker::config::parse_client_job(text, "<client>", buckets);
    } catch (const ConfigError& e) {
      return e.what();
    }
    return "accepted";
  };
  const std::string tar = job("{type: tar, shards: \"s3://datasets/train-{0..3}.tar\"}");
  // No bucket allowed (the default): refused at the source's line, naming the key to set.
  CHECK_THAT(refusal(tar, {}), Contains("<client>:3") && Contains("server.client_job_buckets") &&
                                   Contains("bucket 'datasets' is not one"));
  CHECK_THAT(refusal(tar, {"other"}), Contains("bucket 'datasets' is not one"));
  // Allowed: the job parses, its shards are the URL as given.
  CHECK(refusal(tar, {"other", "datasets"}) == "accepted");
  const stoker::config::JobConfig jc = stoker::config::parse_client_job(tar, "<client>", {"datasets"});
  REQUIRE(jc.source.shards.size() == 1);
  CHECK(jc.source.shards[0] == "s3://datasets/train-{0..3}.tar");
  // An ImageFolder under an allowed bucket's prefix too.
  CHECK(refusal(job("{type: imagefolder, root: \"s3://datasets/imagenet/train/\"}"), {"datasets"}) == "accepted");
  // https:// never: stokerd would fetch any address a user gives it.
  CHECK_THAT(refusal(job("{type: tar, shards: \"https://datasets/train.tar\"}"), {"datasets"}),
             Contains("<client>:3") && Contains("cannot read from http(s):// URLs"));
  // No endpoint of the client's choosing for stokerd's credentials, no cache (stokerd would write there).
  CHECK_THAT(refusal(job("{type: tar, shards: \"s3://datasets/t.tar\", endpoint: \"http://10.0.0.9:9000\"}"),
                     {"datasets"}),
             Contains("<client>:3") && Contains("stokerd's own endpoint"));
  CHECK_THAT(refusal(job("{type: tar, shards: \"s3://datasets/t.tar\", cache: {path: /tmp/c, bytes: 1GiB}}"),
                     {"datasets"}),
             Contains("<client>:3") && Contains("cannot choose where stokerd writes"));
}

TEST_CASE("config: server.client_job_buckets takes a list of bucket names, refused at file:line otherwise",
          "[config]") {
  const std::string jobs = "jobs: {}\n";
  const auto cfg = stoker::config::parse_config("server:\n  client_job_buckets: [datasets, imagenet.public-1]\n" + jobs,
                                                "s.yaml", "/");
  CHECK(cfg.server.client_job_buckets == std::vector<std::string>{"datasets", "imagenet.public-1"});
  for (const auto& [value, why] : std::vector<std::pair<std::string, std::string>>{
           {"datasets", "expected a list of bucket names"},
           {"[s3://datasets]", "expected a bucket's name"},
           {"[Datasets]", "expected a bucket's name"},
           {"[ab]", "expected a bucket's name"}}) {
    INFO(value);
    try {
      (void)stoker::config::parse_config("server:\n  client_job_buckets: " + value + "\n" + jobs, "s.yaml", "/");
      FAIL("accepted");
    } catch (const ConfigError& e) {
      CHECK_THAT(e.what(), Contains("s.yaml:2") && Contains("client_job_buckets") && Contains(why));
    }
  }
}

// ---------------------------------------------------------------------------------------------
// shuffle: {window_shards: N} (issue #35): a tar source's shards visited N at a time

namespace {

std::string tar_job(const std::string& shuffle_lines) {
  std::string j = train_job(shuffle_lines);
  replace_all(j, "source: {root: .}", "source: {type: tar, shards: \"/data/train-{0..9}.tar\"}");
  return j;
}

}  // namespace

TEST_CASE("config: shuffle takes a bool or {window_shards: N} for a tar source", "[config]") {
  auto j = parse(tar_job("    shuffle: {window_shards: 4}\n")).jobs.at(0);
  CHECK(j.shuffle);
  CHECK(j.window_shards == 4);
  j = parse(tar_job("    shuffle:\n      window_shards: 1\n")).jobs.at(0);
  CHECK(j.window_shards == 1);
  // The bool forms are unchanged, and leave the windows off.
  j = parse(tar_job("    shuffle: false\n")).jobs.at(0);
  CHECK_FALSE(j.shuffle);
  CHECK(j.window_shards == 0);
  j = parse(tar_job("")).jobs.at(0);
  CHECK(j.shuffle);
  CHECK(j.window_shards == 0);
}

TEST_CASE("config: a bad window_shards is refused with file:line and the key", "[config]") {
  CHECK_THAT(refusal(tar_job("    shuffle: {window_shards: 0}\n")),
             StartsWith("test.yaml:5:30: jobs.train.shuffle.window_shards: "));
  CHECK_THAT(refusal(tar_job("    shuffle: {window_shards: two}\n")),
             StartsWith("test.yaml:5:30: jobs.train.shuffle.window_shards: "));
  CHECK_THAT(refusal(tar_job("    shuffle:\n      window_shards: 2\n      seed: 3\n")),
             StartsWith("test.yaml:7:") && Contains("jobs.train.shuffle.seed: unknown key"));
  CHECK_THAT(refusal(tar_job("    shuffle: {window_shard: 2}\n")),
             StartsWith("test.yaml:5:") && Contains("jobs.train.shuffle.window_shard: unknown key; did you mean "
                                                     "'window_shards'?"));
  CHECK_THAT(refusal(tar_job("    shuffle: {}\n")),
             StartsWith("test.yaml:5:") && Contains("jobs.train.shuffle.window_shards: required key is missing"));
  CHECK_THAT(refusal(tar_job("    shuffle: [4]\n")),
             StartsWith("test.yaml:5:14: jobs.train.shuffle: expected true, false or {window_shards: N}, got a list"));
  CHECK_THAT(refusal(tar_job("    shuffle: sometimes\n")),
             StartsWith("test.yaml:5:14: jobs.train.shuffle: ") && Contains("'sometimes'"));
  // Sources without shards: an ImageFolder, a file list.
  CHECK_THAT(refusal(train_job("    shuffle: {window_shards: 2}\n")),
             StartsWith("test.yaml:5:30: jobs.train.shuffle.window_shards: ") &&
                 Contains("only for a source of type: tar (type: imagefolder has no shards"));
  std::string list = train_job("    shuffle: {window_shards: 2}\n");
  replace_all(list, "source: {root: .}", "source: {type: filelist, list: ../demo/../configs/bad-scale.yaml}");
  CHECK_THAT(refusal(list), StartsWith("test.yaml:5:30: jobs.train.shuffle.window_shards: ") &&
                                Contains("only for a source of type: tar"));
  // A mixture interleaves its sources: no window would hold.
  std::string mixed = train_job("    shuffle: {window_shards: 2}\n");
  replace_all(mixed, "    source: {root: .}\n",
              "    sources:\n      - {type: tar, shards: /data/a.tar, weight: 1}\n"
              "      - {type: tar, shards: /data/b.tar, weight: 1}\n");
  CHECK_THAT(refusal(mixed), StartsWith("test.yaml:7:30: jobs.train.shuffle.window_shards: ") &&
                                 Contains("not with a mixture (sources:)"));
}
