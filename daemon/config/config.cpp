// YAML -> Config, refusing anything unknown, mistyped, missing or impossible, with the
// position and key path of the offending node.
#include "config/config.hpp"

#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>

#include <yaml-cpp/yaml.h>

namespace stoker::config {
namespace {

Mark mark_of(const YAML::Node& n) {
  const YAML::Mark m = n.Mark();
  if (m.is_null()) return Mark{0, 0};
  return Mark{m.line + 1, m.column + 1};
}

class Reader {
 public:
  explicit Reader(std::string file) : file_(std::move(file)) {}

  [[noreturn]] void fail(const YAML::Node& at, const std::string& path, const std::string& msg) const {
    throw ConfigError(file_, mark_of(at), path, msg);
  }

  // Every key of `map` must be in `allowed`; duplicates are refused too.
  void check_map(const YAML::Node& map, const std::string& path,
                 std::initializer_list<const char*> allowed) const {
    if (!map.IsMap()) fail(map, path, "expected a mapping of keys");
    std::set<std::string> seen;
    for (const auto& kv : map) {
      const std::string key = kv.first.as<std::string>();
      bool ok = false;
      for (const char* a : allowed) ok = ok || key == a;
      if (!ok) {
        std::string list;
        for (const char* a : allowed) list += (list.empty() ? "" : ", ") + std::string(a);
        fail(kv.first, join(path, key), "unknown key (allowed: " + list + ")");
      }
      if (!seen.insert(key).second) fail(kv.first, join(path, key), "duplicate key");
    }
  }

  static std::string join(const std::string& path, const std::string& key) {
    return path.empty() ? key : path + "." + key;
  }

  // The node of `key`, which must exist.
  YAML::Node need(const YAML::Node& map, const std::string& path, const char* key) const {
    const YAML::Node n = map[key];
    if (!n) fail(map, join(path, key), "required key is missing");
    return n;
  }

  std::string scalar_text(const YAML::Node& n) const {
    if (n.IsScalar()) return "'" + n.Scalar() + "'";
    if (n.IsSequence()) return "a list";
    if (n.IsMap()) return "a mapping";
    return "nothing";
  }

  std::int64_t integer(const YAML::Node& n, const std::string& path, std::int64_t lo,
                       std::int64_t hi) const {
    std::int64_t v = 0;
    if (!n.IsScalar() || !YAML::convert<std::int64_t>::decode(n, v)) {
      fail(n, path, "expected an integer, got " + scalar_text(n));
    }
    if (v < lo || v > hi) {
      fail(n, path, "must be between " + std::to_string(lo) + " and " + std::to_string(hi) +
                        ", got " + std::to_string(v));
    }
    return v;
  }

  double number(const YAML::Node& n, const std::string& path) const {
    double v = 0;
    if (!n.IsScalar() || !YAML::convert<double>::decode(n, v) || !std::isfinite(v)) {
      fail(n, path, "expected a number, got " + scalar_text(n));
    }
    return v;
  }

  bool boolean(const YAML::Node& n, const std::string& path) const {
    bool v = false;
    if (!n.IsScalar() || !YAML::convert<bool>::decode(n, v)) {
      fail(n, path, "expected true or false, got " + scalar_text(n));
    }
    return v;
  }

  std::string string(const YAML::Node& n, const std::string& path) const {
    if (!n.IsScalar()) fail(n, path, "expected a string, got " + scalar_text(n));
    return n.Scalar();
  }

  std::string choice(const YAML::Node& n, const std::string& path,
                     std::initializer_list<const char*> options) const {
    const std::string s = string(n, path);
    std::string list;
    for (const char* o : options) {
      if (s == o) return s;
      list += (list.empty() ? "" : ", ") + std::string(o);
    }
    fail(n, path, "must be one of " + list + ", got '" + s + "'");
  }

  std::vector<double> numbers(const YAML::Node& n, const std::string& path, std::size_t count) const {
    if (!n.IsSequence() || n.size() != count) {
      fail(n, path, "expected a list of " + std::to_string(count) + " numbers");
    }
    std::vector<double> v;
    for (std::size_t i = 0; i < count; ++i) v.push_back(number(n[i], path + "[" + std::to_string(i) + "]"));
    return v;
  }

  // `size: 224` or `size: [h, w]`.
  std::pair<std::uint32_t, std::uint32_t> size(const YAML::Node& n, const std::string& path) const {
    if (n.IsSequence()) {
      if (n.size() != 2) fail(n, path, "expected an integer or a list [height, width]");
      return {static_cast<std::uint32_t>(integer(n[0], path + "[0]", 1, 16384)),
              static_cast<std::uint32_t>(integer(n[1], path + "[1]", 1, 16384))};
    }
    const auto s = static_cast<std::uint32_t>(integer(n, path, 1, 16384));
    return {s, s};
  }

  const std::string& file() const { return file_; }

 private:
  std::string file_;
};

void parse_pipeline(const Reader& r, const YAML::Node& seq, const std::string& path,
                    image::PipelineSpec& spec) {
  if (!seq.IsSequence() || seq.size() == 0) r.fail(seq, path, "expected a non-empty list of steps");
  bool geometry = false, resized = false, flip = false, normalize = false;
  for (std::size_t i = 0; i < seq.size(); ++i) {
    const YAML::Node step = seq[i];
    const std::string at = path + "[" + std::to_string(i) + "]";
    if (!step.IsMap() || step.size() != 1) {
      r.fail(step, at, "each step is a mapping with one key, e.g. '- decode: {}'");
    }
    const std::string name = step.begin()->first.as<std::string>();
    const YAML::Node args = step.begin()->second;
    const std::string p = at + "." + name;
    const YAML::Node body = args.IsNull() ? YAML::Node(YAML::NodeType::Map) : args;
    if ((i == 0) != (name == "decode")) {
      r.fail(step.begin()->first, p, i == 0 ? "the first step must be 'decode'"
                                            : "'decode' must be the first step and appear once");
    }
    if (name == "decode") {
      r.check_map(body, p, {"exif_orientation", "strict", "max_pixels"});
      if (body["exif_orientation"]) spec.apply_exif_orientation = r.boolean(body["exif_orientation"], p + ".exif_orientation");
      if (body["strict"]) spec.strict = r.boolean(body["strict"], p + ".strict");
      if (body["max_pixels"]) {
        spec.max_pixels = static_cast<std::uint64_t>(r.integer(body["max_pixels"], p + ".max_pixels", 1, 1ll << 40));
      }
    } else if (name == "random_resized_crop") {
      if (geometry) r.fail(step.begin()->first, p, "only one of random_resized_crop / resize may be used");
      geometry = true;
      r.check_map(body, p, {"size", "scale", "ratio"});
      std::tie(spec.out_height, spec.out_width) = r.size(r.need(body, p, "size"), p + ".size");
      spec.geometry = image::Geometry::kRandomResizedCrop;
      if (body["scale"]) {
        const auto s = r.numbers(body["scale"], p + ".scale", 2);
        if (!(s[0] > 0 && s[0] <= 1 && s[1] > 0 && s[1] <= 1 && s[0] <= s[1])) {
          r.fail(body["scale"], p + ".scale", "must be [min, max] with 0 < min <= max <= 1");
        }
        spec.scale = {s[0], s[1]};
      }
      if (body["ratio"]) {
        const auto q = r.numbers(body["ratio"], p + ".ratio", 2);
        if (!(q[0] > 0 && q[0] <= q[1])) {
          r.fail(body["ratio"], p + ".ratio", "must be [min, max] with 0 < min <= max");
        }
        spec.ratio = {q[0], q[1]};
      }
    } else if (name == "resize") {
      if (geometry) r.fail(step.begin()->first, p, "only one of random_resized_crop / resize may be used");
      geometry = resized = true;
      r.check_map(body, p, {"size"});
      const YAML::Node size = r.need(body, p, "size");
      if (size.IsSequence()) {
        std::tie(spec.out_height, spec.out_width) = r.size(size, p + ".size");
        spec.geometry = image::Geometry::kResize;
      } else {
        spec.resize_shorter = static_cast<std::uint32_t>(r.integer(size, p + ".size", 1, 16384));
        spec.geometry = image::Geometry::kResizeCenterCrop;
        spec.out_height = spec.out_width = 0;  // set by center_crop, required below
      }
    } else if (name == "center_crop") {
      if (!resized || spec.geometry != image::Geometry::kResizeCenterCrop || spec.out_height != 0) {
        r.fail(step.begin()->first, p, "center_crop must follow 'resize: {size: N}' (shorter side), once");
      }
      r.check_map(body, p, {"size"});
      std::tie(spec.out_height, spec.out_width) = r.size(r.need(body, p, "size"), p + ".size");
      if (spec.out_height > spec.resize_shorter || spec.out_width > spec.resize_shorter) {
        r.fail(body["size"], p + ".size", "crop larger than the resized shorter side (" +
                                              std::to_string(spec.resize_shorter) + ")");
      }
    } else if (name == "horizontal_flip") {
      if (flip) r.fail(step.begin()->first, p, "horizontal_flip appears twice");
      flip = true;
      r.check_map(body, p, {"p"});
      spec.flip_probability = 0.5;
      if (body["p"]) {
        spec.flip_probability = r.number(body["p"], p + ".p");
        if (spec.flip_probability < 0 || spec.flip_probability > 1) r.fail(body["p"], p + ".p", "must be within [0, 1]");
      }
    } else if (name == "normalize") {
      if (normalize) r.fail(step.begin()->first, p, "normalize appears twice");
      normalize = true;
      r.check_map(body, p, {"mean", "std"});
      const auto m = r.numbers(r.need(body, p, "mean"), p + ".mean", 3);
      const auto s = r.numbers(r.need(body, p, "std"), p + ".std", 3);
      for (int c = 0; c < 3; ++c) {
        if (!(s[c] > 0)) r.fail(body["std"], p + ".std", "every std must be > 0");
        spec.mean[c] = static_cast<float>(m[c]);
        spec.stddev[c] = static_cast<float>(s[c]);
      }
      spec.normalize = true;
    } else {
      r.fail(step.begin()->first, p,
             "unknown step (known: decode, random_resized_crop, resize, center_crop, "
             "horizontal_flip, normalize)");
    }
  }
  if (!geometry) {
    r.fail(seq, path, "needs random_resized_crop or resize so that every sample has one shape");
  }
  if (spec.geometry == image::Geometry::kResizeCenterCrop && spec.out_height == 0) {
    r.fail(seq, path, "'resize: {size: N}' resizes the shorter side; add '- center_crop: {size: M}' "
                      "or give resize an exact [height, width]");
  }
}

JobConfig parse_job(const Reader& r, const std::string& name, const YAML::Node& key,
                    const YAML::Node& j, const std::filesystem::path& base_dir) {
  const std::string path = "jobs." + name;
  static const std::regex kName("[A-Za-z0-9_.-]{1,48}");
  if (!std::regex_match(name, kName)) {
    r.fail(key, path, "job names are 1..48 characters of A-Z a-z 0-9 _ . -");
  }
  r.check_map(j, path, {"source", "batch_size", "shuffle", "seed", "drop_last", "consumers",
                        "prefetch", "on_error", "quarantine", "device", "pipeline", "output"});
  JobConfig job;
  job.name = name;
  job.mark = mark_of(key);

  const YAML::Node src = r.need(j, path, "source");
  r.check_map(src, path + ".source", {"type", "root"});
  job.source.type = src["type"] ? r.choice(src["type"], path + ".source.type", {"imagefolder"}) : "imagefolder";
  const YAML::Node root = r.need(src, path + ".source", "root");
  std::filesystem::path rp = r.string(root, path + ".source.root");
  if (rp.empty()) r.fail(root, path + ".source.root", "must not be empty");
  if (rp.is_relative()) rp = base_dir / rp;
  job.source.root = rp.lexically_normal();
  job.source.root_mark = mark_of(root);
  std::error_code ec;
  if (!std::filesystem::is_directory(job.source.root, ec)) {
    r.fail(root, path + ".source.root", job.source.root.string() + " is not an existing directory");
  }

  job.batch_size = static_cast<std::uint32_t>(r.integer(r.need(j, path, "batch_size"), path + ".batch_size", 1, 65536));
  if (j["shuffle"]) job.shuffle = r.boolean(j["shuffle"], path + ".shuffle");
  if (j["seed"]) job.seed = static_cast<std::uint64_t>(r.integer(j["seed"], path + ".seed", 0, INT64_MAX));
  if (j["drop_last"]) job.drop_last = r.boolean(j["drop_last"], path + ".drop_last");
  if (j["consumers"]) job.consumers = static_cast<std::uint32_t>(r.integer(j["consumers"], path + ".consumers", 1, 1024));
  if (j["prefetch"]) job.prefetch = static_cast<std::uint32_t>(r.integer(j["prefetch"], path + ".prefetch", 1, 64));
  if (j["on_error"]) {
    const std::string e = r.choice(j["on_error"], path + ".on_error", {"skip", "substitute", "fail"});
    job.on_error = e == "skip" ? OnError::kSkip : e == "substitute" ? OnError::kSubstitute : OnError::kFail;
  }
  if (j["quarantine"]) {
    std::filesystem::path q = r.string(j["quarantine"], path + ".quarantine");
    job.quarantine = q.is_relative() ? base_dir / q : q;
  }
  if (j["device"]) job.device_output = r.boolean(j["device"], path + ".device");

  parse_pipeline(r, r.need(j, path, "pipeline"), path + ".pipeline", job.pipeline);

  const YAML::Node out = r.need(j, path, "output");
  r.check_map(out, path + ".output", {"dtype", "layout"});
  if (out["dtype"]) {
    const std::string d = r.choice(out["dtype"], path + ".output.dtype", {"uint8", "float16", "float32"});
    job.pipeline.dtype = d == "uint8" ? proto::DType::kUInt8 : d == "float16" ? proto::DType::kFloat16 : proto::DType::kFloat32;
  }
  if (out["layout"]) {
    const std::string l = r.choice(out["layout"], path + ".output.layout", {"NCHW", "NHWC"});
    job.pipeline.layout = l == "NCHW" ? proto::Layout::kNCHW : proto::Layout::kNHWC;
  }
  if (job.pipeline.normalize && job.pipeline.dtype == proto::DType::kUInt8) {
    r.fail(out, path + ".output.dtype", "normalize needs float16 or float32 output (uint8 cannot hold normalized values)");
  }
  const std::uint64_t slot_bytes = job.pipeline.sample_bytes() * job.batch_size;
  if (slot_bytes > (std::uint64_t{4} << 30)) {
    r.fail(key, path, "one batch would take " + std::to_string(slot_bytes >> 20) + " MiB; reduce batch_size or size");
  }
  return job;
}

}  // namespace

ConfigError::ConfigError(const std::string& file, Mark mark, const std::string& key_path,
                         const std::string& message)
    : std::runtime_error(file + ":" + std::to_string(mark.line) + ":" + std::to_string(mark.column) +
                         ": " + key_path + ": " + message),
      file_(file),
      mark_(mark),
      key_path_(key_path) {}

Config parse_config(const std::string& yaml_text, const std::string& file_name,
                    const std::filesystem::path& base_dir) {
  const Reader r(file_name);
  YAML::Node doc;
  try {
    doc = YAML::Load(yaml_text);
  } catch (const YAML::ParserException& e) {
    throw ConfigError(file_name, Mark{e.mark.line + 1, e.mark.column + 1}, "(yaml)", e.msg);
  }
  if (!doc || doc.IsNull()) throw ConfigError(file_name, Mark{1, 1}, "(top)", "the config is empty");
  r.check_map(doc, "", {"server", "jobs"});

  Config cfg;
  cfg.file = file_name;
  if (const YAML::Node s = doc["server"]) {
    r.check_map(s, "server", {"workers", "socket", "log_level", "state_dir", "shm_mode", "handshake_timeout_s"});
    if (s["handshake_timeout_s"]) {
      cfg.server.handshake_timeout_s = r.number(s["handshake_timeout_s"], "server.handshake_timeout_s");
      if (!(cfg.server.handshake_timeout_s > 0 && cfg.server.handshake_timeout_s <= 3600)) {
        r.fail(s["handshake_timeout_s"], "server.handshake_timeout_s", "must be within (0, 3600] seconds");
      }
    }
    if (s["workers"]) cfg.server.workers = static_cast<std::uint32_t>(r.integer(s["workers"], "server.workers", 0, 1024));
    if (s["socket"]) cfg.server.socket = r.string(s["socket"], "server.socket");
    if (s["log_level"]) {
      cfg.server.log_level = r.choice(s["log_level"], "server.log_level", {"trace", "debug", "info", "warn", "error"});
    }
    if (s["state_dir"]) {
      std::filesystem::path d = r.string(s["state_dir"], "server.state_dir");
      cfg.server.state_dir = d.is_relative() ? base_dir / d : d;
    }
    if (s["shm_mode"]) {
      const std::string m = r.string(s["shm_mode"], "server.shm_mode");
      static const std::regex kMode("0?[0-7]{3}");
      if (!std::regex_match(m, kMode)) r.fail(s["shm_mode"], "server.shm_mode", "expected an octal mode like 0600");
      cfg.server.shm_mode = static_cast<std::uint32_t>(std::stoul(m, nullptr, 8));
      if ((cfg.server.shm_mode & 0600) != 0600) r.fail(s["shm_mode"], "server.shm_mode", "the owner needs read and write (0600)");
    }
  }
  const YAML::Node jobs = r.need(doc, "", "jobs");
  if (!jobs.IsMap() || jobs.size() == 0) r.fail(jobs, "jobs", "expected a mapping of job names to jobs");
  std::set<std::string> names;
  for (const auto& kv : jobs) {
    const std::string name = kv.first.as<std::string>();
    if (!names.insert(name).second) r.fail(kv.first, "jobs." + name, "duplicate job name");
    cfg.jobs.push_back(parse_job(r, name, kv.first, kv.second, base_dir));
  }
  return cfg;
}

Config load_config(const std::filesystem::path& file) {
  std::ifstream in(file);
  if (!in) {
    throw ConfigError(file.string(), Mark{0, 0}, "(file)",
                      std::string("cannot read the config: ") + std::strerror(errno));
  }
  std::stringstream ss;
  ss << in.rdbuf();
  const std::filesystem::path base = std::filesystem::absolute(file).parent_path();
  return parse_config(ss.str(), file.string(), base);
}

}  // namespace stoker::config
