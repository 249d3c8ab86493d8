// YAML -> Config, refusing anything unknown, mistyped, missing or impossible, with the
// position and key path of the offending node.
//
// Invariant: every failure leaves through ConfigError (never a yaml-cpp exception), so that
// main can print "FILE:LINE:COL: key.path: message" for any bad input whatsoever.
#include "config/config.hpp"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <fstream>
#include <grp.h>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string_view>

#include <arpa/inet.h>
#include <yaml-cpp/yaml.h>

namespace stoker::config {
namespace {

namespace fs = std::filesystem;

constexpr std::uint64_t kMaxSide = 16384;      // pixels, per output side
constexpr std::uint64_t kMaxBatch = 65536;
constexpr std::uint64_t kMaxReaders = 64;  // a slot's readers are bits of one 64-bit word
constexpr std::uint64_t kMaxSlotBytes = std::uint64_t{4} << 30;
constexpr std::size_t kMaxSocketPath = 107;    // sizeof(sockaddr_un::sun_path) - 1 on Linux

Mark mark_of(const YAML::Node& n) {
  if (!n.IsDefined()) return Mark{0, 0};
  const YAML::Mark m = n.Mark();
  if (m.is_null()) return Mark{0, 0};
  return Mark{m.line + 1, m.column + 1};
}

Mark mark_of(const YAML::Mark& m) {
  if (m.is_null()) return Mark{0, 0};
  return Mark{m.line + 1, m.column + 1};
}

std::string join(const std::string& path, std::string_view key) {
  return path.empty() ? std::string(key) : path + "." + std::string(key);
}

std::string index(const std::string& path, std::size_t i) {
  return path + "[" + std::to_string(i) + "]";
}

std::string quoted_list(std::initializer_list<std::string_view> words) {
  std::string list;
  for (auto w : words) list += (list.empty() ? "" : ", ") + std::string(w);
  return list;
}

// Edit distance counting a swap of neighbours as one edit (the commonest typo), for
// "did you mean" on misspelt keys and values.
std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::vector<std::size_t>> d(a.size() + 1, std::vector<std::size_t>(b.size() + 1));
  for (std::size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (std::size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    for (std::size_t j = 1; j <= b.size(); ++j) {
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  }
  return d[a.size()][b.size()];
}

// The closest option, if it is close enough to be what was meant (1 edit for words of up to
// 3 letters, 2 up to 8, 3 beyond), or "".
std::string closest(std::string_view word, std::initializer_list<std::string_view> options) {
  const std::size_t limit = word.size() <= 3 ? 1 : word.size() <= 8 ? 2 : 3;
  std::string best;
  std::size_t best_d = limit + 1;
  for (auto o : options) {
    const std::size_t d = edit_distance(word, o);
    if (d < best_d) best_d = d, best = std::string(o);
  }
  return best;
}

// A value in the document, with what is needed to complain about it. `at` is the value's
// own mark, or its key's when the value is empty (yaml-cpp gives an empty value the mark of
// whatever token follows, which may be lines away).
struct Value {
  YAML::Node node;
  std::string path;
  Mark at;
};

std::string describe(const YAML::Node& n) {
  if (n.IsScalar()) return "'" + n.Scalar() + "'";
  if (n.IsSequence()) return "a list";
  if (n.IsMap()) return "a mapping";
  return "nothing";
}

class Reader {
 public:
  // `client_job`: the text came from a client (parse_client_job): no value is taken from
  // stokerd's environment and no key may choose where stokerd writes.
  explicit Reader(std::string file, bool client_job = false) : file_(std::move(file)), client_job_(client_job) {}
  bool client_job() const { return client_job_; }

  [[noreturn]] void fail(Mark at, const std::string& path, const std::string& msg) const {
    throw ConfigError(file_, at, path, msg);
  }
  [[noreturn]] void fail(const Value& v, const std::string& msg) const { fail(v.at, v.path, msg); }

  // A scalar's text with ${NAME} and ${NAME:-default} replaced from the environment, so one
  // config serves every node of a multi-node job (torchrun's WORLD_SIZE / GROUP_RANK, SLURM's
  // SLURM_NODEID...). A variable that is unset (and has no default) is refused, naming it.
  std::string text(const Value& v) const {
    const std::string raw = v.node.IsScalar() ? v.node.Scalar() : std::string();
    std::string out;
    for (std::size_t i = 0; i < raw.size();) {
      if (raw.compare(i, 2, "${") != 0) {
        out += raw[i++];
        continue;
      }
      if (client_job_) {
        // stokerd's environment is not the client's, and may hold what the client must not
        // see (a token, a path): the client expands its own variables before it sends.
        fail(v, "'" + raw + "': a client-defined job cannot use ${...} (it would read stokerd's environment, "
                "not yours); expand the variable in the client");
      }
      const std::size_t end = raw.find('}', i);
      if (end == std::string::npos) fail(v, "unterminated ${ in '" + raw + "'");
      std::string name = raw.substr(i + 2, end - i - 2), fallback;
      const std::size_t dash = name.find(":-");
      const bool has_default = dash != std::string::npos;
      if (has_default) fallback = name.substr(dash + 2), name = name.substr(0, dash);
      const bool name_ok = !name.empty() && std::all_of(name.begin(), name.end(), [](char c) {
        return c == '_' || (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
      });
      if (!name_ok) fail(v, "'${" + raw.substr(i + 2, end - i - 2) + "}' is not ${NAME} or ${NAME:-default}");
      const char* env = std::getenv(name.c_str());
      if (env == nullptr || (*env == '\0' && has_default)) {
        if (!has_default) {
          fail(v, "environment variable " + name + " is not set (the value is '" + raw +
                      "'; set it, or write ${" + name + ":-default})");
        }
        out += fallback;
      } else {
        out += env;
      }
      i = end + 1;
    }
    return out;
  }

  std::uint64_t integer(const Value& v, std::uint64_t lo, std::uint64_t hi) const {
    // Decimal only: yaml-cpp's own conversion reads "010" as octal 8, which no user means.
    const std::string s = text(v);
    std::string_view digits = s;
    const bool negative = !digits.empty() && digits.front() == '-';
    if (!digits.empty() && (digits.front() == '-' || digits.front() == '+')) digits.remove_prefix(1);
    std::uint64_t x = 0;
    const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), x);
    const bool all_digits = !digits.empty() && end == digits.data() + digits.size() &&
                            std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; });
    if (!v.node.IsScalar() || !all_digits) fail(v, "expected an integer, got " + describe(v.node));
    const std::string range = "must be between " + std::to_string(lo) + " and " + std::to_string(hi);
    if (ec == std::errc::result_out_of_range) fail(v, range + ", got " + s);
    if ((negative && x != 0) || x < lo || x > hi) fail(v, range + ", got " + s);
    return x;
  }

  // A size in bytes: an integer, or an integer with a binary unit ("8GiB", "512 MiB").
  std::uint64_t bytes(const Value& v, std::uint64_t lo, std::uint64_t hi) const {
    const std::string s = string(v);
    std::size_t n = 0;
    while (n < s.size() && s[n] >= '0' && s[n] <= '9') ++n;
    std::string unit = s.substr(n);
    unit.erase(0, unit.find_first_not_of(' '));
    static constexpr std::pair<std::string_view, int> kUnits[] = {{"", 0}, {"B", 0}, {"KiB", 10}, {"MiB", 20}, {"GiB", 30}, {"TiB", 40}};
    int shift = -1;
    for (const auto& [name, sh] : kUnits) if (unit == name) shift = sh;
    std::uint64_t x = 0;
    const auto [end, ec] = std::from_chars(s.data(), s.data() + n, x);
    if (n == 0 || shift < 0 || ec != std::errc()) {
      fail(v, "expected a size in bytes: an integer, or one with KiB, MiB, GiB or TiB (e.g. 8GiB), got '" + s + "'");
    }
    const bool overflow = shift > 0 && x > (UINT64_MAX >> shift);
    const std::uint64_t total = overflow ? UINT64_MAX : x << shift;
    if (total < lo || total > hi) {
      fail(v, "must be between " + std::to_string(lo) + " and " + std::to_string(hi) + " bytes, got " + s);
    }
    return total;
  }

  double number(const Value& v) const {
    const std::string s = text(v);
    std::string_view t = s;
    if (!t.empty() && t.front() == '+') t.remove_prefix(1);
    double x = 0;
    const auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), x);
    if (!v.node.IsScalar() || t.empty() || ec != std::errc() || end != t.data() + t.size() ||
        !std::isfinite(x)) {
      fail(v, "expected a number, got " + describe(v.node));
    }
    return x;
  }

  bool boolean(const Value& v) const {
    bool b = false;
    if (!v.node.IsScalar() || !YAML::convert<bool>::decode(YAML::Node(text(v)), b)) {
      fail(v, "expected true or false, got " + describe(v.node));
    }
    return b;
  }

  std::string string(const Value& v) const {
    if (!v.node.IsScalar()) fail(v, "expected a string, got " + describe(v.node));
    return text(v);
  }

  std::string choice(const Value& v, std::initializer_list<std::string_view> options) const {
    const std::string s = string(v);
    for (auto o : options) {
      if (s == o) return s;
    }
    const std::string near = closest(s, options);
    fail(v, "must be one of " + quoted_list(options) + ", got '" + s + "'" +
                (near.empty() ? "" : " (did you mean '" + near + "'?)"));
  }

  Value element(const Value& seq, std::size_t i) const {
    const YAML::Node n = seq.node[i];
    const Mark m = mark_of(n);
    return Value{n, index(seq.path, i), n.IsNull() || m.line == 0 ? seq.at : m};
  }

  std::vector<double> numbers(const Value& v, std::size_t count) const {
    if (!v.node.IsSequence() || v.node.size() != count) {
      fail(v, "expected a list of " + std::to_string(count) + " numbers, got " + describe(v.node) +
                  (v.node.IsSequence() ? " of " + std::to_string(v.node.size()) : ""));
    }
    std::vector<double> out;
    for (std::size_t i = 0; i < count; ++i) out.push_back(number(element(v, i)));
    return out;
  }

  // `size: 224` (square) or `size: [height, width]`.
  std::pair<std::uint32_t, std::uint32_t> size(const Value& v) const {
    if (v.node.IsSequence()) {
      if (v.node.size() != 2) fail(v, "expected an integer or a list [height, width]");
      return {static_cast<std::uint32_t>(integer(element(v, 0), 1, kMaxSide)),
              static_cast<std::uint32_t>(integer(element(v, 1), 1, kMaxSide))};
    }
    const auto s = static_cast<std::uint32_t>(integer(v, 1, kMaxSide));
    return {s, s};
  }

 private:
  std::string file_;
  bool client_job_ = false;
};

// A mapping whose keys have been checked against those allowed (unknown and repeated keys
// refused); gives each value with its path and a mark that is never lines away.
class Fields {
 public:
  Fields(const Reader& r, const Value& map, std::initializer_list<std::string_view> allowed)
      : r_(r), path_(map.path), at_(map.at) {
    if (!map.node.IsMap()) r.fail(map, "expected a mapping of keys, got " + describe(map.node));
    for (const auto& kv : map.node) {
      const Mark key_at = mark_of(kv.first);
      if (!kv.first.IsScalar()) r.fail(key_at, path_, "keys must be plain words, got " + describe(kv.first));
      const std::string key = kv.first.Scalar();
      if (std::find(allowed.begin(), allowed.end(), key) == allowed.end()) {
        const std::string near = closest(key, allowed);
        r.fail(key_at, join(path_, key),
               near.empty() ? "unknown key (allowed: " + quoted_list(allowed) + ")"
                            : "unknown key; did you mean '" + near + "'?");
      }
      const Mark m = mark_of(kv.second);
      Value v{kv.second, join(path_, key), kv.second.IsNull() || m.line == 0 ? key_at : m};
      if (!values_.emplace(key, std::move(v)).second) r.fail(key_at, join(path_, key), "duplicate key");
    }
  }

  const Value* get(std::string_view key) const {
    const auto it = values_.find(std::string(key));
    return it == values_.end() ? nullptr : &it->second;
  }

  const Value& need(std::string_view key) const {
    if (const Value* v = get(key)) return *v;
    r_.fail(at_, join(path_, key), "required key is missing");
  }

 private:
  const Reader& r_;
  std::string path_;
  Mark at_;
  std::map<std::string, Value, std::less<>> values_;
};

// gaussian_blur: {kernel_size, sigma} as torchvision's GaussianBlur: kernel_size (required) an
// odd positive int or [kx, ky] (torchvision's order: x is across, y down); sigma a number > 0
// or [min, max] with 0 < min <= max, default [0.1, 2.0]. Reflect padding needs kernel/2 pixels
// to mirror on each side, so the kernel must fit the output (torch raises otherwise).
augment::AugmentStep parse_gaussian_blur(const Reader& r, const Value& body, const image::PipelineSpec& spec,
                                       bool size_pending) {
  const Fields f(r, body, {"kernel_size", "sigma"});
  augment::AugmentStep a;
  a.kind = augment::AugmentStep::Kind::kGaussianBlur;
  const Value& k = f.need("kernel_size");
  auto odd = [&](const Value& v) {
    const auto n = static_cast<int>(r.integer(v, 1, kMaxSide));
    if (n % 2 == 0) r.fail(v, "must be odd (the kernel is centred on the pixel), got " + std::to_string(n));
    return n;
  };
  if (k.node.IsSequence()) {
    if (k.node.size() != 2) r.fail(k, "expected an odd integer or a list [kx, ky] of two");
    a.kernel = {odd(r.element(k, 0)), odd(r.element(k, 1))};
  } else {
    a.kernel[0] = a.kernel[1] = odd(k);
  }
  // (With `resize: {size: N}` still waiting for its center_crop the size is not known yet;
  // the missing center_crop is refused at the end of the pipeline.)
  if (!size_pending && (a.kernel[0] / 2 >= static_cast<int>(spec.out_width) ||
                        a.kernel[1] / 2 >= static_cast<int>(spec.out_height))) {
    r.fail(k, "a " + std::to_string(a.kernel[0]) + "x" + std::to_string(a.kernel[1]) + " kernel needs an output of at least " +
                  std::to_string(a.kernel[0] / 2 + 1) + "x" + std::to_string(a.kernel[1] / 2 + 1) +
                  " (width x height) to reflect into, this one is " + std::to_string(spec.out_width) + "x" +
                  std::to_string(spec.out_height));
  }
  if (const Value* v = f.get("sigma")) {
    if (v->node.IsSequence()) {
      const auto q = r.numbers(*v, 2);
      if (!(q[0] > 0 && q[0] <= q[1])) r.fail(*v, "must be [min, max] with 0 < min <= max");
      a.sigma = {q[0], q[1]};
    } else {
      const double x = r.number(*v);
      if (!(x > 0)) r.fail(*v, "must be > 0");
      a.sigma = {x, x};
    }
  }
  return a;
}

// interpolation: nearest or bilinear (the two torchvision's tensor warps offer).
augment::Interpolation parse_interpolation(const Reader& r, const Value& v) {
  return r.choice(v, {"nearest", "bilinear"}) == "bilinear" ? augment::Interpolation::kBilinear
                                                            : augment::Interpolation::kNearest;
}

// fill: a pixel value 0..255 or [r, g, b].
std::array<float, 3> parse_fill(const Reader& r, const Value& v) {
  auto one = [&](const Value& x) {
    const double p = r.number(x);
    if (!(p >= 0 && p <= 255)) r.fail(x, "must be a pixel value within [0, 255]");
    return static_cast<float>(p);
  };
  std::array<float, 3> fill{};
  if (v.node.IsSequence()) {
    if (v.node.size() != 3) r.fail(v, "expected a number or a list of 3 (R, G, B)");
    for (std::size_t c = 0; c < 3; ++c) fill[c] = one(r.element(v, c));
  } else {
    fill.fill(one(v));
  }
  return fill;
}

// An angle range as torchvision's _setup_angle: a number d >= 0 meaning [-d, d], or [min, max].
std::array<double, 2> parse_angle_range(const Reader& r, const Value& d) {
  if (d.node.IsSequence()) {
    const auto q = r.numbers(d, 2);
    if (!(q[0] <= q[1])) r.fail(d, "must be [min, max] with min <= max");
    return {q[0], q[1]};
  }
  const double x = r.number(d);
  if (x < 0) r.fail(d, "must be >= 0 (the angle is drawn in [-degrees, degrees])");
  return {-x, x};
}

// random_rotation: {degrees, interpolation, fill} as torchvision's RandomRotation (expand=False,
// about the centre): degrees (required) a number d >= 0 meaning [-d, d] or [min, max];
// interpolation nearest (default) or bilinear; fill a pixel value 0..255 or [r, g, b] (0).
augment::AugmentStep parse_random_rotation(const Reader& r, const Value& body) {
  const Fields f(r, body, {"degrees", "interpolation", "fill"});
  augment::AugmentStep a;
  a.kind = augment::AugmentStep::Kind::kRotation;
  a.degrees = parse_angle_range(r, f.need("degrees"));
  if (const Value* v = f.get("interpolation")) a.interpolation = parse_interpolation(r, *v);
  if (const Value* v = f.get("fill")) a.fill = parse_fill(r, *v);
  return a;
}

// random_affine: {degrees, translate, scale, shear, interpolation, fill} as torchvision's
// RandomAffine (about the centre): degrees as random_rotation's (required, 0 for none);
// translate [a, b] maximum fractions of width and height within [0, 1]; scale [min, max] with
// 0 < min <= max; shear a number s >= 0 ([-s, s] along x), [min, max] along x, or
// [xmin, xmax, ymin, ymax]; interpolation nearest (default) or bilinear; fill as rotation's.
augment::AugmentStep parse_random_affine(const Reader& r, const Value& body) {
  const Fields f(r, body, {"degrees", "translate", "scale", "shear", "interpolation", "fill"});
  augment::AugmentStep a;
  a.kind = augment::AugmentStep::Kind::kAffine;
  augment::RandomAffineParams& p = a.affine;
  p.degrees = parse_angle_range(r, f.need("degrees"));
  if (const Value* v = f.get("translate")) {
    const auto q = r.numbers(*v, 2);
    for (std::size_t i = 0; i < 2; ++i) {
      if (!(q[i] >= 0 && q[i] <= 1)) r.fail(r.element(*v, i), "must be a fraction of the side within [0, 1]");
    }
    p.has_translate = true;
    p.translate = {q[0], q[1]};
  }
  if (const Value* v = f.get("scale")) {
    const auto q = r.numbers(*v, 2);
    if (!(q[0] > 0 && q[0] <= q[1])) r.fail(*v, "must be [min, max] with 0 < min <= max");
    p.has_scale = true;
    p.scale = {q[0], q[1]};
  }
  if (const Value* v = f.get("shear")) {
    if (v->node.IsSequence() && v->node.size() == 4) {
      const auto q = r.numbers(*v, 4);
      if (!(q[0] <= q[1] && q[2] <= q[3])) r.fail(*v, "must be [xmin, xmax, ymin, ymax] with xmin <= xmax, ymin <= ymax");
      p.shear_ranges = 2;
      p.shear = {q[0], q[1], q[2], q[3]};
    } else if (v->node.IsSequence() && v->node.size() != 2) {
      r.fail(*v, "expected a number s (x shear in [-s, s]), [min, max] (x) or [xmin, xmax, ymin, ymax] (degrees)");
    } else {
      const auto x = parse_angle_range(r, *v);
      p.shear_ranges = 1;
      p.shear = {x[0], x[1], 0, 0};
    }
  }
  if (const Value* v = f.get("interpolation")) a.interpolation = parse_interpolation(r, *v);
  if (const Value* v = f.get("fill")) a.fill = parse_fill(r, *v);
  return a;
}

// trivial_augment_wide: {num_magnitude_bins, interpolation}, rand_augment: {num_ops, magnitude,
// num_magnitude_bins, interpolation}, auto_augment: {policy, interpolation}: torchvision's
// TrivialAugmentWide / RandAugment / AutoAugment with their defaults (31 bins; 2 ops at
// magnitude 9; the imagenet policy; nearest) and fill None (black).
augment::AugmentStep parse_policy(const Reader& r, const Value& body, const std::string& name) {
  augment::AugmentStep a;
  a.kind = augment::AugmentStep::Kind::kPolicy;
  augment::PolicyParams& p = a.policy;
  const bool rand = name == "rand_augment", automatic = name == "auto_augment";
  const Fields f(r, body, rand        ? std::initializer_list<std::string_view>{"num_ops", "magnitude", "num_magnitude_bins", "interpolation"}
                          : automatic ? std::initializer_list<std::string_view>{"policy", "interpolation"}
                                      : std::initializer_list<std::string_view>{"num_magnitude_bins", "interpolation"});
  p.kind = rand ? augment::PolicyKind::kRandAugment
           : automatic ? augment::PolicyKind::kAutoAugmentImagenet
                       : augment::PolicyKind::kTrivialAugmentWide;
  if (automatic) {
    if (const Value* v = f.get("policy")) r.choice(*v, {"imagenet"});  // the one policy Stoker has
  } else {
    // At least 2 bins: torchvision's posterize levels divide by num_bins - 1.
    if (const Value* v = f.get("num_magnitude_bins")) p.num_magnitude_bins = static_cast<int>(r.integer(*v, 2, 1024));
  }
  if (rand) {
    if (const Value* v = f.get("num_ops")) p.num_ops = static_cast<int>(r.integer(*v, 0, augment::kMaxPolicyOps));
    const Value* v = f.get("magnitude");
    if (v != nullptr) p.magnitude = static_cast<int>(r.integer(*v, 0, 1024));
    if (p.magnitude >= p.num_magnitude_bins) {
      r.fail(v != nullptr ? *v : body, "magnitude " + std::to_string(p.magnitude) + " is a bin index: must be below num_magnitude_bins (" +
                                           std::to_string(p.num_magnitude_bins) + ")");
    }
  }
  if (const Value* v = f.get("interpolation")) p.interpolation = parse_interpolation(r, *v);
  return a;
}

// random_erasing: {p, scale, ratio, value} as torchvision's RandomErasing. Before normalize
// it erases uint8 pixels, so a value is an integer 0..255; after normalize it erases the
// float output, so a value is in normalized units and `random` (standard normal values, as
// torchvision) is allowed.
augment::ErasingParams parse_random_erasing(const Reader& r, const Value& body, bool after_normalize) {
  const Fields f(r, body, {"p", "scale", "ratio", "value"});
  augment::ErasingParams e;
  if (const Value* v = f.get("p")) {
    e.p = r.number(*v);
    if (e.p < 0 || e.p > 1) r.fail(*v, "must be within [0, 1]");
  }
  if (const Value* v = f.get("scale")) {
    const auto q = r.numbers(*v, 2);
    if (!(q[0] >= 0 && q[0] <= q[1] && q[1] <= 1)) r.fail(*v, "must be [min, max] with 0 <= min <= max <= 1");
    e.scale = {q[0], q[1]};
  }
  if (const Value* v = f.get("ratio")) {
    const auto q = r.numbers(*v, 2);
    if (!(q[0] > 0 && q[0] <= q[1])) r.fail(*v, "must be [min, max] with 0 < min <= max");
    e.ratio = {q[0], q[1]};
  }
  const Value* v = f.get("value");
  if (v == nullptr) return e;
  if (v->node.IsScalar() && r.text(*v) == "random") {
    if (!after_normalize) {
      r.fail(*v, "'random' draws standard normal values, which mean something only in normalized units: put "
                 "random_erasing after normalize (before it, give pixel values 0..255)");
    }
    e.random = true;
    return e;
  }
  auto one = [&](const Value& x) {
    const double d = r.number(x);
    if (!after_normalize && !(d >= 0 && d <= 255 && d == std::floor(d))) {
      r.fail(x, "before normalize the value is in pixel units: an integer 0..255 (after normalize it is in "
                "normalized units)");
    }
    return static_cast<float>(d);
  };
  if (v->node.IsSequence()) {
    if (v->node.size() == 1) {
      e.value.fill(one(r.element(*v, 0)));
    } else if (v->node.size() == 3) {
      for (std::size_t c = 0; c < 3; ++c) e.value[c] = one(r.element(*v, c));
    } else {
      r.fail(*v, "expected a number, a list of 3 (R, G, B) or 'random'");
    }
  } else {
    e.value.fill(one(*v));
  }
  return e;
}

// interpolation of the geometry step: torchvision's InterpolationMode on a PIL image.
image::ResizeFilter parse_resize_filter(const Reader& r, const Value& v) {
  const std::string s = r.choice(v, {"bilinear", "bicubic", "nearest"});
  return s == "bicubic" ? image::ResizeFilter::kBicubic
         : s == "nearest" ? image::ResizeFilter::kNearest
                          : image::ResizeFilter::kBilinear;
}

void parse_pipeline(const Reader& r, const Value& seq, image::PipelineSpec& spec) {
  if (!seq.node.IsSequence() || seq.node.size() == 0) {
    r.fail(seq, "expected a non-empty list of steps, e.g. '- decode: {}'");
  }
  // Steps run in one fixed order in the engine (decode, geometry, then flip and normalize,
  // which commute), so the file must be written in that order: what it says is what runs.
  enum Stage { kDecoded, kGeometry, kAfterGeometry } stage = kDecoded;
  bool geometry = false, flip = false, normalize = false, shorter_side = false;
  // A step that the engine's flip (done while writing the upright image, before every
  // augment step) does not commute with; a horizontal_flip written after it is refused.
  const char* flips_first = nullptr;
  std::optional<Value> dct_scale;  // decode.dct_scale as written, checked against the filter
  for (std::size_t i = 0; i < seq.node.size(); ++i) {
    const Value step = r.element(seq, i);
    std::string name;
    Value body;
    // `- horizontal_flip` alone means the step with its defaults.
    if (step.node.IsScalar()) {
      name = step.node.Scalar();
      body = Value{YAML::Node(YAML::NodeType::Map), step.path + "." + name, step.at};
    } else if (step.node.IsMap() && step.node.size() == 1 && step.node.begin()->first.IsScalar()) {
      name = step.node.begin()->first.Scalar();
      const YAML::Node args = step.node.begin()->second;
      const Mark m = mark_of(args);
      body = Value{args.IsNull() ? YAML::Node(YAML::NodeType::Map) : args, step.path + "." + name,
                   args.IsNull() || m.line == 0 ? step.at : m};
    } else {
      r.fail(step, "each step is a mapping with one key, e.g. '- decode: {}'");
    }
    const Value at_name{step.node, body.path, step.at};

    if ((i == 0) != (name == "decode")) {
      r.fail(at_name, i == 0 ? "the first step must be 'decode'" : "'decode' must be the first step and appear once");
    }
    const bool is_geometry = name == "random_resized_crop" || name == "resize" || name == "center_crop";
    if (is_geometry && stage == kAfterGeometry) {
      r.fail(at_name, "geometry steps come right after decode (the engine crops and resizes before "
                      "it flips or normalizes)");
    }

    if (name == "decode") {
      const Fields f(r, body, {"exif_orientation", "strict", "max_pixels", "max_memory_mb", "dct_scale"});
      if (auto* v = f.get("dct_scale")) {
        const std::string d = r.choice(*v, {"auto", "always", "never"});
        spec.dct_scale = d == "always" ? image::DctScale::kAlways
                         : d == "never" ? image::DctScale::kNever
                                        : image::DctScale::kAuto;
        dct_scale = *v;
      }
      if (auto* v = f.get("exif_orientation")) spec.apply_exif_orientation = r.boolean(*v);
      if (auto* v = f.get("strict")) spec.strict = r.boolean(*v);
      if (auto* v = f.get("max_memory_mb")) spec.max_memory_bytes = r.integer(*v, 16, 1u << 20) << 20;
      if (auto* v = f.get("max_pixels")) spec.max_pixels = r.integer(*v, 1, std::uint64_t{1} << 40);
    } else if (name == "random_resized_crop") {
      if (geometry) r.fail(at_name, "only one of random_resized_crop / resize may be used");
      geometry = true;
      stage = kGeometry;
      const Fields f(r, body, {"size", "scale", "ratio", "interpolation"});
      std::tie(spec.out_height, spec.out_width) = r.size(f.need("size"));
      spec.geometry = image::Geometry::kRandomResizedCrop;
      if (auto* v = f.get("interpolation")) spec.filter = parse_resize_filter(r, *v);
      if (auto* v = f.get("scale")) {
        const auto s = r.numbers(*v, 2);
        if (!(s[0] > 0 && s[1] <= 1 && s[0] <= s[1])) r.fail(*v, "must be [min, max] with 0 < min <= max <= 1");
        spec.scale = {s[0], s[1]};
      }
      if (auto* v = f.get("ratio")) {
        const auto q = r.numbers(*v, 2);
        if (!(q[0] > 0 && q[0] <= q[1])) r.fail(*v, "must be [min, max] with 0 < min <= max");
        spec.ratio = {q[0], q[1]};
      }
    } else if (name == "resize") {
      if (geometry) r.fail(at_name, "only one of random_resized_crop / resize may be used");
      geometry = true;
      stage = kGeometry;
      const Fields f(r, body, {"size", "interpolation"});
      if (auto* v = f.get("interpolation")) spec.filter = parse_resize_filter(r, *v);
      const Value& size = f.need("size");
      if (size.node.IsSequence()) {
        std::tie(spec.out_height, spec.out_width) = r.size(size);
        spec.geometry = image::Geometry::kResize;
      } else {
        spec.resize_shorter = static_cast<std::uint32_t>(r.integer(size, 1, kMaxSide));
        spec.geometry = image::Geometry::kResizeCenterCrop;
        shorter_side = true;  // the output shape comes from the center_crop that must follow
      }
    } else if (name == "center_crop") {
      if (!shorter_side) {
        r.fail(at_name, "center_crop must directly follow 'resize: {size: N}' (shorter side), once");
      }
      shorter_side = false;
      const Fields f(r, body, {"size"});
      const Value& size = f.need("size");
      std::tie(spec.out_height, spec.out_width) = r.size(size);
      if (spec.out_height > spec.resize_shorter || spec.out_width > spec.resize_shorter) {
        r.fail(size, "crop larger than the resized shorter side (" + std::to_string(spec.resize_shorter) + ")");
      }
    } else if (name == "horizontal_flip") {
      if (flip) r.fail(at_name, "horizontal_flip appears twice");
      if (flips_first != nullptr) {
        r.fail(at_name, std::string("horizontal_flip must come before ") + flips_first + " (the engine flips first)");
      }
      flip = true;
      const Fields f(r, body, {"p"});
      spec.flip_probability = 0.5;
      if (auto* v = f.get("p")) {
        spec.flip_probability = r.number(*v);
        if (spec.flip_probability < 0 || spec.flip_probability > 1) r.fail(*v, "must be within [0, 1]");
      }
    } else if (name == "color_jitter" || name == "random_grayscale" || name == "random_solarize" ||
               name == "random_posterize" || name == "random_autocontrast" || name == "random_equalize" ||
               name == "random_adjust_sharpness") {
      if (normalize) r.fail(at_name, "colour steps work on uint8 pixels: put them before normalize");
      if (!geometry) r.fail(at_name, "colour steps come after the geometry step");
      stage = kAfterGeometry;
      augment::AugmentStep a;
      if (name == "color_jitter") {
        // A number x means [max(0, 1 - x), 1 + x]; a pair [lo, hi] is used as it is (torchvision).
        const Fields f(r, body, {"brightness", "contrast", "saturation", "hue"});
        a.kind = augment::AugmentStep::Kind::kColorJitter;
        auto range = [&](const char* key, std::array<double, 2>& out) {
          const Value* v = f.get(key);
          if (v == nullptr) return;
          if (v->node.IsSequence()) {
            const auto q = r.numbers(*v, 2);
            if (!(q[0] >= 0 && q[0] <= q[1])) r.fail(*v, "must be [min, max] with 0 <= min <= max");
            out = {q[0], q[1]};
          } else {
            const double x = r.number(*v);
            if (x < 0) r.fail(*v, "must be >= 0");
            out = {std::max(0.0, 1 - x), 1 + x};
          }
        };
        range("brightness", a.brightness);
        range("contrast", a.contrast);
        range("saturation", a.saturation);
        // hue: a number h in [0, 0.5] means [-h, h]; a pair within [-0.5, 0.5] (a full turn is 1).
        if (const Value* v = f.get("hue")) {
          if (v->node.IsSequence()) {
            const auto q = r.numbers(*v, 2);
            if (!(-0.5 <= q[0] && q[0] <= q[1] && q[1] <= 0.5)) {
              r.fail(*v, "must be [min, max] with -0.5 <= min <= max <= 0.5");
            }
            a.hue = {q[0], q[1]};
          } else {
            const double x = r.number(*v);
            if (!(x >= 0 && x <= 0.5)) r.fail(*v, "must be within [0, 0.5] (the shift is drawn in [-hue, hue])");
            a.hue = {-x, x};
          }
        }
      } else {
        const bool solar = name == "random_solarize", poster = name == "random_posterize",
                   sharp = name == "random_adjust_sharpness";
        const Fields f(r, body, solar    ? std::initializer_list<std::string_view>{"threshold", "p"}
                                : poster ? std::initializer_list<std::string_view>{"bits", "p"}
                                : sharp  ? std::initializer_list<std::string_view>{"sharpness_factor", "p"}
                                         : std::initializer_list<std::string_view>{"p"});
        a.kind = name == "random_grayscale"  ? augment::AugmentStep::Kind::kGrayscale
                 : solar                      ? augment::AugmentStep::Kind::kSolarize
                 : poster                     ? augment::AugmentStep::Kind::kPosterize
                 : sharp                      ? augment::AugmentStep::Kind::kSharpness
                 : name == "random_equalize" ? augment::AugmentStep::Kind::kEqualize
                                              : augment::AugmentStep::Kind::kAutocontrast;
        if (sharp) {
          const Value& v = f.need("sharpness_factor");
          a.sharpness = r.number(v);
          if (a.sharpness < 0) r.fail(v, "must be >= 0");
        }
        a.p = name == "random_grayscale" ? 0.1 : 0.5;  // torchvision's defaults
        if (auto* v = f.get("p")) {
          a.p = r.number(*v);
          if (a.p < 0 || a.p > 1) r.fail(*v, "must be within [0, 1]");
        }
        if (solar) a.threshold = static_cast<int>(r.integer(f.need("threshold"), 0, 256));
        if (poster) a.bits = static_cast<int>(r.integer(f.need("bits"), 0, 8));
      }
      spec.augment.push_back(a);
    } else if (name == "gaussian_blur") {
      if (normalize) r.fail(at_name, "gaussian_blur works on uint8 pixels: put it before normalize");
      if (!geometry) r.fail(at_name, "gaussian_blur comes after the geometry step");
      stage = kAfterGeometry;
      spec.augment.push_back(parse_gaussian_blur(r, body, spec, shorter_side));
    } else if (name == "random_rotation") {
      if (normalize) r.fail(at_name, "random_rotation works on uint8 pixels: put it before normalize");
      if (!geometry) r.fail(at_name, "random_rotation comes after the geometry step");
      stage = kAfterGeometry;
      flips_first = "random_rotation";
      spec.augment.push_back(parse_random_rotation(r, body));
    } else if (name == "random_affine" || name == "trivial_augment_wide" || name == "rand_augment" ||
               name == "auto_augment") {
      // Geometric ops (and policies holding them) on the upright uint8 image: after the
      // geometry, before normalize, and after horizontal_flip (the engine flips first).
      if (normalize) r.fail(at_name, name + " works on uint8 pixels: put it before normalize");
      if (!geometry) r.fail(at_name, name + " comes after the geometry step (random_resized_crop or resize)");
      stage = kAfterGeometry;
      flips_first = name == "random_affine" ? "random_affine"
                    : name == "trivial_augment_wide" ? "trivial_augment_wide"
                    : name == "rand_augment" ? "rand_augment" : "auto_augment";
      spec.augment.push_back(name == "random_affine" ? parse_random_affine(r, body) : parse_policy(r, body, name));
    } else if (name == "random_erasing") {
      if (!geometry) r.fail(at_name, "random_erasing comes after the geometry step");
      stage = kAfterGeometry;
      flips_first = "random_erasing";
      const augment::ErasingParams e = parse_random_erasing(r, body, normalize);
      if (normalize) {
        spec.erase_output.push_back(e);
      } else {
        augment::AugmentStep a;
        a.kind = augment::AugmentStep::Kind::kErasing;
        a.erasing = e;
        spec.augment.push_back(a);
      }
    } else if (name == "normalize") {
      if (normalize) r.fail(at_name, "normalize appears twice");
      normalize = true;
      const Fields f(r, body, {"mean", "std"});
      const auto m = r.numbers(f.need("mean"), 3);
      const Value& std_value = f.need("std");
      const auto s = r.numbers(std_value, 3);
      for (std::size_t c = 0; c < 3; ++c) {
        if (!(s[c] > 0)) r.fail(r.element(std_value, c), "every std must be > 0");
        spec.mean[c] = static_cast<float>(m[c]);
        spec.stddev[c] = static_cast<float>(s[c]);
      }
      spec.normalize = true;
    } else {
      const std::string near = closest(name, {"decode", "random_resized_crop", "resize", "center_crop",
                                              "horizontal_flip", "normalize", "color_jitter", "random_grayscale",
                                              "random_solarize", "random_posterize", "random_autocontrast",
                                              "random_equalize", "random_adjust_sharpness", "gaussian_blur",
                                              "random_erasing", "random_rotation", "random_affine",
                                              "trivial_augment_wide", "rand_augment", "auto_augment"});
      r.fail(at_name, near.empty() ? "unknown step (known: decode, random_resized_crop, resize, "
                                     "center_crop, horizontal_flip, color_jitter, random_grayscale, "
                                     "random_solarize, random_posterize, random_autocontrast, random_equalize, "
                                     "random_adjust_sharpness, gaussian_blur, random_rotation, random_affine, "
                                     "trivial_augment_wide, rand_augment, auto_augment, random_erasing, normalize)"
                                   : "unknown step; did you mean '" + near + "'?");
    }
    if (name == "horizontal_flip" || name == "normalize") {
      if (stage == kDecoded) {
        r.fail(at_name, "comes before the geometry step; write random_resized_crop or resize right "
                        "after decode (the engine crops and resizes first)");
      }
      stage = kAfterGeometry;
    }
  }
  if (!geometry) {
    r.fail(seq, "needs random_resized_crop or resize so that every sample has one shape");
  }
  if (shorter_side) {
    r.fail(seq, "'resize: {size: N}' resizes the shorter side; add '- center_crop: {size: M}' "
                "or give resize an exact [height, width]");
  }
  if (dct_scale && spec.dct_scale == image::DctScale::kAlways && spec.filter == image::ResizeFilter::kNearest) {
    r.fail(*dct_scale, "'always' with interpolation: nearest: nearest picks single source pixels, which a "
                       "reduced-scale decode does not have (use auto or never)");
  }
}

// Relative paths are relative to the config file's folder; "a/./" comes out as "a" so that
// messages and comparisons see one spelling.
fs::path resolve(const fs::path& p, const fs::path& base_dir) {
  fs::path r = (p.is_relative() ? base_dir / p : p).lexically_normal();
  if (!r.has_filename() && r.has_relative_path()) r = r.parent_path();
  return r;
}

// The global world a job belongs to and the ranks this daemon serves (multi-node: one stokerd
// per node, each serving its own GPUs' global ranks; nothing is shared but config and seed).
//   world_size: W, ranks: A-B        ranks A..B (inclusive) of a world of W
//   world_size: W, node_rank: N, local_world_size: L     ranks N*L .. N*L+L-1
//   neither                          ranks 0..consumers-1 of a world of `consumers`
void parse_world(const Reader& r, const Fields& f, const Value& j, JobConfig& job) {
  const Value* world = f.get("world_size");
  const Value* ranks = f.get("ranks");
  const Value* node = f.get("node_rank");
  const Value* local = f.get("local_world_size");
  if (world == nullptr) {
    for (const Value* v : {ranks, node, local}) {
      if (v != nullptr) r.fail(*v, "needs world_size beside it (the global number of ranks)");
    }
    job.world_size = job.consumers;
    return;
  }
  job.world_size = static_cast<std::uint32_t>(r.integer(*world, 1, 1u << 20));
  if (ranks != nullptr && (node != nullptr || local != nullptr)) {
    r.fail(*ranks, "give either ranks: A-B or node_rank + local_world_size, not both");
  }
  std::uint64_t first = 0, last = job.world_size - 1;
  if (ranks != nullptr) {
    const std::string t = r.string(*ranks);
    const std::size_t dash = t.find('-');
    Value a{YAML::Node(t.substr(0, dash)), ranks->path, ranks->at};
    Value b{YAML::Node(dash == std::string::npos ? t : t.substr(dash + 1)), ranks->path, ranks->at};
    if (t.empty() || t.find('-', dash == std::string::npos ? 0 : dash + 1) != std::string::npos) {
      r.fail(*ranks, "expected A-B (global ranks, inclusive) or one rank, got '" + t + "'");
    }
    first = r.integer(a, 0, job.world_size - 1);
    last = r.integer(b, 0, job.world_size - 1);
    if (last < first) r.fail(*ranks, "the range " + t + " is empty (A-B needs A <= B)");
  } else if (node != nullptr || local != nullptr) {
    if (node == nullptr || local == nullptr) {
      r.fail(node ? *node : *local, "node_rank and local_world_size go together");
    }
    const std::uint64_t l = r.integer(*local, 1, 1024);
    const std::uint64_t n = r.integer(*node, 0, job.world_size - 1);
    first = n * l;
    last = first + l - 1;
    if (last >= job.world_size) {
      r.fail(*node, "node " + std::to_string(n) + " with " + std::to_string(l) + " rank(s) per node needs ranks " +
                        std::to_string(first) + ".." + std::to_string(last) + ", beyond world_size " +
                        std::to_string(job.world_size));
    }
  }
  if (last - first + 1 > 1024) r.fail(ranks ? *ranks : *world, "one daemon serves at most 1024 ranks");
  const auto served = static_cast<std::uint32_t>(last - first + 1);
  if (const Value* c = f.get("consumers"); c != nullptr && job.consumers != served) {
    r.fail(*c, "consumers: " + std::to_string(job.consumers) + " disagrees with the " + std::to_string(served) +
                   " rank(s) this daemon serves (" + std::to_string(first) + ".." + std::to_string(last) +
                   "); leave consumers out");
  }
  (void)j;
  job.first_rank = static_cast<std::uint32_t>(first);
  job.consumers = served;
}

// cache: {bytes: N} keeps finished samples of a deterministic pipeline in RAM, so later
// epochs skip read and decode. A random step would make a cached sample differ from what the
// pipeline gives for (seed, epoch, sample): refused, naming the step.
void parse_cache(const Reader& r, const Value& v, JobConfig& job) {
  const Fields c(r, v, {"bytes"});
  job.cache_bytes = r.bytes(c.need("bytes"), 0, std::uint64_t{1} << 50);
  const image::PipelineSpec& p = job.pipeline;
  const char* random = p.geometry == image::Geometry::kRandomResizedCrop ? "random_resized_crop"
                       : p.flip_probability > 0                           ? "horizontal_flip"
                       : !p.augment.empty()                               ? "its colour augmentations"
                       : !p.erase_output.empty()                          ? "random_erasing"
                                                                          : nullptr;
  if (job.cache_bytes > 0 && random != nullptr) {
    r.fail(v, std::string("only for deterministic pipelines (e.g. resize + center_crop), but this pipeline has ") +
                  random + ": every epoch gives a sample different pixels, so a cached one would be wrong");
  }
}

// read_ahead: {bytes: SIZE, requests: N} (either 0: off), or false to turn it off. The
// defaults hold a few hundred typical JPEGs; requests is the most reads in flight per job.
void parse_read_ahead(const Reader& r, const Value& v, JobConfig& job) {
  if (v.node.IsScalar()) {
    if (r.boolean(v)) return;  // true: the defaults
    job.read_ahead_bytes = 0;
    job.read_ahead_requests = 0;
    return;
  }
  const Fields ra(r, v, {"bytes", "requests"});
  if (auto* b = ra.get("bytes")) job.read_ahead_bytes = r.bytes(*b, 0, std::uint64_t{1} << 40);
  if (auto* q = ra.get("requests")) job.read_ahead_requests = static_cast<std::uint32_t>(r.integer(*q, 0, 256));
}

// mixup: {alpha}, cutmix: {alpha} (torchvision's MixUp/CutMix, α > 0 of Beta(α, α)) and,
// with both, mix_switch_prob: the probability that a batch takes CutMix rather than MixUp.
double parse_mix_alpha(const Reader& r, const Value& v) {
  const Fields m(r, v, {"alpha"});
  const Value& a = m.need("alpha");
  const double alpha = r.number(a);
  if (!(alpha > 0 && alpha <= 1000)) r.fail(a, "must be within (0, 1000] (the alpha of Beta(alpha, alpha))");
  return alpha;
}

void parse_mix(const Reader& r, const Fields& f, JobConfig& job) {
  const Value* mixup = f.get("mixup");
  const Value* cutmix = f.get("cutmix");
  if (mixup != nullptr) job.mix.mixup_alpha = parse_mix_alpha(r, *mixup);
  if (cutmix != nullptr) job.mix.cutmix_alpha = parse_mix_alpha(r, *cutmix);
  if (const Value* v = f.get("mix_switch_prob")) {
    if (mixup == nullptr || cutmix == nullptr) {
      r.fail(*v, "only with both mixup and cutmix (it is the probability that a batch takes CutMix instead of MixUp)");
    }
    job.mix.switch_prob = r.number(*v);
    if (!(job.mix.switch_prob >= 0 && job.mix.switch_prob <= 1)) r.fail(*v, "must be within [0, 1]");
  }
}

JobConfig parse_job(const Reader& r, const std::string& name, Mark name_at, const Value& j,
                    const fs::path& base_dir) {
  const bool name_ok = !name.empty() && name.size() <= 48 &&
                       std::all_of(name.begin(), name.end(), [](char c) {
                         return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
                                c == '_' || c == '.' || c == '-';
                       });
  if (!name_ok) {
    r.fail(name_at, j.path, "job names are 1..48 characters of A-Z a-z 0-9 _ . -");
  }
  const Fields f(r, j, {"source", "batch_size", "shuffle", "seed", "augment_seed", "drop_last", "sampler_drop_last", "pad_shards",
                        "consumers", "world_size",
                        "ranks", "node_rank", "local_world_size", "readers", "prefetch", "lease_timeout_s", "cache",
                        "weight", "workers", "on_error", "quarantine", "device", "device_normalize", "pipeline", "output",
                        "mixup", "cutmix", "mix_switch_prob", "read_ahead"});
  JobConfig job;
  job.name = name;
  job.definition = YAML::Dump(j.node) + "\n# relative to " + base_dir.string();
  job.mark = name_at;

  const Fields src(r, f.need("source"), {"type", "root", "list", "file", "shards"});
  if (auto* v = src.get("type")) job.source.type = r.choice(*v, {"imagefolder", "filelist", "tar"});
  if (job.source.type == "tar") {
    // shards: one pattern or a list of them; braces are expanded (and shards opened) when the
    // source is indexed, which names the key on failure through root_mark.
    const Value& shards = src.need("shards");
    auto add = [&](const Value& v) {
      const fs::path given = r.string(v);
      if (given.empty()) r.fail(v, "must not be empty");
      job.source.shards.push_back(resolve(given, base_dir).string());
    };
    if (shards.node.IsSequence()) {
      if (shards.node.size() == 0) r.fail(shards, "expected at least one shard pattern");
      for (std::size_t i = 0; i < shards.node.size(); ++i) add(r.element(shards, i));
    } else {
      add(shards);
    }
    job.source.root_mark = shards.at;
    job.source.root_key = "shards";
    for (const char* k : {"root", "list", "file"}) {
      if (const Value* v = src.get(k)) r.fail(*v, std::string("not a key of type: tar (shards name the files)"));
    }
  } else if (const Value* v = src.get("shards")) {
    r.fail(*v, "only for type: tar");
  }
  const Value* list_v = src.get("list");
  if (const Value* alias = src.get("file"); alias != nullptr && job.source.type != "tar") {
    // `file` is the older name of `list`, still accepted; both at once would say two things.
    if (list_v != nullptr) r.fail(*alias, "give the file list as 'list' only ('file' is its older name)");
    list_v = alias;
  }
  if (job.source.type == "filelist") {
    // list: the list; root: what relative paths in it are relative to (default: its folder).
    const Value& file = list_v != nullptr ? *list_v : src.need("list");
    const fs::path list = r.string(file);
    if (list.empty()) r.fail(file, "must not be empty");
    job.source.file = resolve(list, base_dir);
    job.source.root_mark = file.at;
    job.source.root_key = src.get("list") != nullptr ? "list" : "file";
    std::error_code fec;
    if (!fs::is_regular_file(job.source.file, fec)) r.fail(file, job.source.file.string() + " is not an existing file");
  } else if (list_v != nullptr && job.source.type != "tar") {
    r.fail(*list_v, "only for type: filelist");
  }
  if (job.source.type != "tar") {
    const Value* root_v = src.get("root");
    if (root_v == nullptr && job.source.type == "filelist") {
      job.source.root = job.source.file.parent_path();
    } else {
      const Value& root = root_v != nullptr ? *root_v : src.need("root");
      const fs::path given = r.string(root);
      if (given.empty()) r.fail(root, "must not be empty");
      job.source.root = resolve(given, base_dir);
      if (job.source.type != "filelist") job.source.root_mark = root.at;
    }
    const Value& root = root_v != nullptr ? *root_v : *list_v;
    std::error_code ec;
    if (!fs::is_directory(job.source.root, ec)) {
      r.fail(root, job.source.root.string() + " is not an existing directory" +
                       (ec && ec != std::errc::no_such_file_or_directory ? " (" + ec.message() + ")" : ""));
    }
  }

  job.batch_size = static_cast<std::uint32_t>(r.integer(f.need("batch_size"), 1, kMaxBatch));
  if (auto* v = f.get("shuffle")) job.shuffle = r.boolean(*v);
  if (auto* v = f.get("seed")) job.seed = r.integer(*v, 0, UINT64_MAX);
  if (auto* v = f.get("augment_seed")) job.augment_seed = r.integer(*v, 0, UINT64_MAX);
  if (auto* v = f.get("drop_last")) job.drop_last = r.boolean(*v);
  // Two drop_lasts, as PyTorch has them: DataLoader's (the last short batch, `drop_last`) and
  // DistributedSampler's (`sampler_drop_last`, default: the same value, which is what a
  // `drop_last: true` meant before they were two); `pad_shards: false` is the validation
  // split, every sample exactly once.
  job.sampler_drop_last = job.drop_last;
  if (auto* v = f.get("sampler_drop_last")) job.sampler_drop_last = r.boolean(*v);
  if (auto* v = f.get("pad_shards")) {
    job.pad_shards = r.boolean(*v);
    if (!job.pad_shards && job.sampler_drop_last) {
      r.fail(*v, "pad_shards: false gives every rank its share of every sample (uneven by at most one), "
                 "sampler_drop_last: true cuts the epoch to a multiple of the world: choose one "
                 "(set sampler_drop_last: false, or drop pad_shards)");
    }
  }
  if (auto* v = f.get("consumers")) job.consumers = static_cast<std::uint32_t>(r.integer(*v, 1, 1024));
  parse_world(r, f, j, job);
  if (auto* v = f.get("readers")) job.readers = static_cast<std::uint32_t>(r.integer(*v, 1, kMaxReaders));
  if (auto* v = f.get("prefetch")) job.prefetch = static_cast<std::uint32_t>(r.integer(*v, 1, 64));
  if (auto* v = f.get("lease_timeout_s")) {
    job.lease_timeout_s = r.number(*v);
    if (!(job.lease_timeout_s > 0 && job.lease_timeout_s <= 86400)) r.fail(*v, "must be within (0, 86400] seconds");
  }
  if (auto* v = f.get("weight")) {
    job.weight = r.number(*v);
    if (!(job.weight > 0 && job.weight <= 1000)) r.fail(*v, "must be within (0, 1000]");
  }
  if (auto* v = f.get("workers")) job.max_workers = static_cast<std::uint32_t>(r.integer(*v, 1, 1024));
  if (auto* v = f.get("on_error")) {
    const std::string e = r.choice(*v, {"skip", "substitute", "fail"});
    job.on_error = e == "skip" ? OnError::kSkip : e == "substitute" ? OnError::kSubstitute : OnError::kFail;
  }
  if (auto* v = f.get("quarantine")) {
    if (r.client_job()) {
      // A client must not choose a file stokerd writes (as root, that is any file): a client's
      // job always has the server's path, <state_dir>/<job>-<dataset hash>.quarantine.
      r.fail(*v, "a client-defined job cannot choose its quarantine file (stokerd writes it, under its "
                 "server.state_dir); leave the key out");
    }
    const fs::path q = r.string(*v);
    if (q.empty()) r.fail(*v, "must not be empty (leave the key out for the default)");
    job.quarantine = resolve(q, base_dir);
  }
  if (auto* v = f.get("device")) job.device_output = r.boolean(*v);

  parse_pipeline(r, f.need("pipeline"), job.pipeline);

  // `output` may be left out: uint8 NCHW, the cheapest thing to produce and to move.
  Mark dtype_at = j.at;  // where a dtype complaint points: the dtype, else output, else the job
  if (auto* out = f.get("output")) {
    const Fields o(r, *out, {"dtype", "layout"});
    dtype_at = out->at;
    if (auto* v = o.get("dtype")) {
      dtype_at = v->at;
      const std::string d = r.choice(*v, {"uint8", "float16", "float32"});
      job.pipeline.dtype = d == "uint8"     ? proto::DType::kUInt8
                           : d == "float16" ? proto::DType::kFloat16
                                            : proto::DType::kFloat32;
    }
    if (auto* v = o.get("layout")) {
      job.pipeline.layout = r.choice(*v, {"NCHW", "NHWC"}) == "NCHW" ? proto::Layout::kNCHW : proto::Layout::kNHWC;
    }
  }
  if (job.pipeline.normalize && job.pipeline.dtype == proto::DType::kUInt8) {
    r.fail(dtype_at, join(j.path, "output.dtype"),
           "normalize needs float16 or float32 output (uint8 cannot hold normalized values); "
           "keep uint8 and normalize on the GPU, or set output.dtype");
  }
  if (auto* v = f.get("device_normalize"); v != nullptr && r.boolean(*v)) {
    // The workers write uint8 (a quarter of float32's bytes over PCIe) and the device copy is
    // normalized on the GPU into the float output the pipeline asks for.
    if (job.pipeline.dtype == proto::DType::kUInt8) {
      r.fail(v->at, join(j.path, "device_normalize"),
             "needs a float16 or float32 output.dtype (the type the GPU writes)");
    }
    if (!job.pipeline.erase_output.empty()) {
      r.fail(v->at, join(j.path, "device_normalize"),
             "random_erasing after normalize erases the normalized output, which the GPU writes here; put "
             "random_erasing before normalize (values in pixels 0..255) or leave device_normalize out");
    }
    job.device_normalize = true;
    job.device_pipeline = job.pipeline;
    job.pipeline.dtype = proto::DType::kUInt8;
    job.pipeline.normalize = false;
  }
  if (auto* v = f.get("cache")) parse_cache(r, *v, job);
  if (auto* v = f.get("read_ahead")) parse_read_ahead(r, *v, job);
  parse_mix(r, f, job);
  const std::uint64_t slot_bytes = job.pipeline.sample_bytes() * job.batch_size;
  if (slot_bytes > kMaxSlotBytes) {
    r.fail(name_at, j.path, "one batch would take " + std::to_string(slot_bytes >> 20) +
                                " MiB (limit 4096); reduce batch_size or the output size");
  }
  return job;
}

// "HOST:PORT" or "[V6]:PORT" -> numeric host and port; false with `why` otherwise.
bool split_metrics_address(const std::string& a, std::string& host, std::uint16_t& port, bool& loopback,
                           std::string& why) {
  const std::size_t colon = a.rfind(':');
  if (colon == std::string::npos || colon + 1 == a.size()) {
    why = "expected HOST:PORT like \"127.0.0.1:9400\", got '" + a + "'";
    return false;
  }
  host = a.substr(0, colon);
  const std::string p = a.substr(colon + 1);
  unsigned long n = 0;
  const auto [end, ec] = std::from_chars(p.data(), p.data() + p.size(), n);
  if (ec != std::errc() || end != p.data() + p.size() || n > 65535) {
    why = "port must be 0..65535 (0: any free port), got '" + p + "'";
    return false;
  }
  port = static_cast<std::uint16_t>(n);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  if (host == "localhost") host = "127.0.0.1";
  in_addr v4{};
  in6_addr v6{};
  if (::inet_pton(AF_INET, host.c_str(), &v4) == 1) {
    loopback = (ntohl(v4.s_addr) >> 24) == 127;
  } else if (::inet_pton(AF_INET6, host.c_str(), &v6) == 1) {
    loopback = IN6_IS_ADDR_LOOPBACK(&v6);
  } else {
    why = "host must be a numeric IPv4/IPv6 address or localhost (no name lookups), got '" + host + "'";
    return false;
  }
  return true;
}

// server.group: a group name or a numeric gid that exists on this machine (looked up now, so
// a typo is refused with the config's line rather than found when the socket is made).
void parse_server_group(const Reader& r, const Value& v, ServerConfig& out) {
  const std::string g = r.string(v);
  if (g.empty()) r.fail(v, "must not be empty (leave the key out for owner-only access)");
  std::vector<char> buf(16384);
  group gr{};
  group* found = nullptr;
  const bool numeric = g.size() <= 9 && std::all_of(g.begin(), g.end(), [](char c) { return c >= '0' && c <= '9'; });
  if (numeric) {
    ::getgrgid_r(static_cast<gid_t>(std::stoul(g)), &gr, buf.data(), buf.size(), &found);
  } else {
    ::getgrnam_r(g.c_str(), &gr, buf.data(), buf.size(), &found);
  }
  if (found == nullptr) {
    r.fail(v, "no group '" + g + "' on this machine (`getent group " + g + "`; create it with `groupadd " + g + "`)");
  }
  out.group = found->gr_name;
  out.group_id = found->gr_gid;
}

void parse_server(const Reader& r, const Value& s, const fs::path& base_dir, ServerConfig& out) {
  const Fields f(r, s, {"workers", "socket", "log_level", "state_dir", "shm_mode", "handshake_timeout_s",
                        "idle_timeout_s", "max_connections", "client_jobs", "client_job_linger_s", "drain_timeout_s",
                        "metrics", "metrics_allow_remote", "metrics_textfile", "log_interval_s", "group",
                        "client_jobs_for_group", "client_jobs_per_user"});
  if (auto* v = f.get("workers")) out.workers = static_cast<std::uint32_t>(r.integer(*v, 0, 1024));
  if (auto* v = f.get("socket")) {
    out.socket = r.string(*v);
    if (out.socket.empty()) r.fail(*v, "must not be empty (leave the key out for the default)");
    if (out.socket.size() > kMaxSocketPath) {
      r.fail(*v, "a Unix socket path holds at most " + std::to_string(kMaxSocketPath) + " bytes, this one has " +
                     std::to_string(out.socket.size()));
    }
  }
  if (auto* v = f.get("log_level")) out.log_level = r.choice(*v, {"trace", "debug", "info", "warn", "error"});
  if (auto* v = f.get("state_dir")) {
    const fs::path d = r.string(*v);
    if (d.empty()) r.fail(*v, "must not be empty (leave the key out for the default)");
    out.state_dir = resolve(d, base_dir);
  }
  if (auto* v = f.get("shm_mode")) {
    // Written 0600 or "0600"; the scalar's text is read as octal either way.
    const std::string m = r.string(*v);
    const bool octal = (m.size() == 3 || (m.size() == 4 && m[0] == '0')) &&
                       std::all_of(m.begin(), m.end(), [](char c) { return c >= '0' && c <= '7'; });
    if (!octal) r.fail(*v, "expected an octal mode like 0600, got '" + m + "'");
    out.shm_mode = static_cast<std::uint32_t>(std::stoul(m, nullptr, 8));
    if ((out.shm_mode & 0600) != 0600) r.fail(*v, "the owner needs read and write (0600)");
  }
  if (auto* v = f.get("handshake_timeout_s")) {
    out.handshake_timeout_s = r.number(*v);
    if (!(out.handshake_timeout_s > 0 && out.handshake_timeout_s <= 3600)) {
      r.fail(*v, "must be within (0, 3600] seconds");
    }
  }
  if (auto* v = f.get("idle_timeout_s")) {
    out.idle_timeout_s = r.number(*v);
    if (!(out.idle_timeout_s > 0 && out.idle_timeout_s <= 3600)) r.fail(*v, "must be within (0, 3600] seconds");
  }
  if (auto* v = f.get("max_connections")) out.max_connections = static_cast<std::uint32_t>(r.integer(*v, 1, 1000000));
  if (auto* v = f.get("client_jobs")) out.client_jobs = r.boolean(*v);
  if (auto* v = f.get("client_jobs_for_group")) out.client_jobs_for_group = r.boolean(*v);
  if (auto* v = f.get("client_jobs_per_user")) {
    out.client_jobs_per_user = static_cast<std::uint32_t>(r.integer(*v, 1, 16));  // 16: all client jobs
  }
  if (auto* v = f.get("client_job_linger_s")) {
    out.client_job_linger_s = r.number(*v);
    if (!(out.client_job_linger_s >= 0 && out.client_job_linger_s <= 86400)) r.fail(*v, "must be within [0, 86400] seconds");
  }
  if (auto* v = f.get("drain_timeout_s")) {
    out.drain_timeout_s = r.number(*v);
    if (!(out.drain_timeout_s > 0 && out.drain_timeout_s <= 86400)) r.fail(*v, "must be within (0, 86400] seconds");
  }
  if (auto* v = f.get("metrics_allow_remote")) out.metrics_allow_remote = r.boolean(*v);
  if (auto* v = f.get("metrics")) {
    out.metrics = r.string(*v);
    bool loopback = false;
    std::string why;
    if (!split_metrics_address(out.metrics, out.metrics_host, out.metrics_port, loopback, why)) r.fail(*v, why);
    // The endpoint has no authentication: off the loopback only when asked for in so many words.
    if (!loopback && !out.metrics_allow_remote) {
      r.fail(*v, "'" + out.metrics_host + "' is not a loopback address; /metrics has no authentication, so "
                 "set server.metrics_allow_remote: true to serve it there");
    }
  }
  if (auto* v = f.get("metrics_textfile")) {
    const fs::path d = r.string(*v);
    if (d.empty()) r.fail(*v, "must not be empty (leave the key out for none)");
    out.metrics_textfile = resolve(d, base_dir);
  }
  if (auto* v = f.get("log_interval_s")) {
    out.log_interval_s = r.number(*v);
    if (!(out.log_interval_s >= 0 && out.log_interval_s <= 86400)) r.fail(*v, "must be within [0, 86400] seconds (0: off)");
  }
  if (auto* v = f.get("group")) parse_server_group(r, *v, out);
}

}  // namespace

ConfigError::ConfigError(const std::string& file, Mark mark, const std::string& key_path,
                         const std::string& message)
    : std::runtime_error(file + ":" + std::to_string(mark.line) + ":" + std::to_string(mark.column) +
                         ": " + key_path + ": " + message),
      file_(file),
      mark_(mark),
      key_path_(key_path) {}

namespace {

// Line (1-based) of the first line that is neither blank, a comment nor a document marker;
// 0 when there is none.
std::size_t first_content_line(const std::string& text) {
  std::size_t line = 0, pos = 0;
  while (pos <= text.size()) {
    const std::size_t end = std::min(text.find('\n', pos), text.size());
    ++line;
    const std::string_view l(text.data() + pos, end - pos);
    const std::size_t first = l.find_first_not_of(" \t\r");
    if (first != std::string_view::npos && l[first] != '#' && l.substr(first, 3) != "---" &&
        l.substr(first, 3) != "...") {
      return line;
    }
    pos = end + 1;
  }
  return 0;
}

// Line of a `---` marker that starts a second document (one after content), or 0.
std::size_t second_document(const std::string& text) {
  std::size_t line = 0, pos = 0;
  bool content = false;
  while (pos <= text.size()) {
    const std::size_t end = std::min(text.find('\n', pos), text.size());
    ++line;
    const std::string_view l(text.data() + pos, end - pos);
    const bool marker = l.substr(0, 3) == "---" && (l.size() == 3 || l[3] == ' ' || l[3] == '\t' || l[3] == '\r');
    if (marker && content) return line;
    const std::size_t first = l.find_first_not_of(" \t\r");
    if (!marker && first != std::string_view::npos && l[first] != '#') content = true;
    pos = end + 1;
  }
  return 0;
}

}  // namespace

namespace {

Config parse_config_as(const std::string& yaml_text, const std::string& file_name, const fs::path& base_dir,
                       bool client_job) {
  const Reader r(file_name, client_job);
  // One document, read with YAML::Load: yaml-cpp 0.7's LoadAll never returns on some inputs
  // (",a", "---\n---\n,,": it loops allocating ~1 GB/s), which would wedge a daemon reloading
  // its config. A second document is found by its marker instead (second_document()).
  if (const std::size_t line = second_document(yaml_text); line != 0) {
    throw ConfigError(file_name, Mark{static_cast<int>(line), 1}, "(top)", "one YAML document expected, found a second one here");
  }
  YAML::Node doc;
  try {
    doc = YAML::Load(yaml_text);
  } catch (const YAML::Exception& e) {
    throw ConfigError(file_name, mark_of(e.mark), "(yaml)", e.msg);
  }
  if (doc.IsNull()) {
    if (const std::size_t line = first_content_line(yaml_text); line != 0) {
      throw ConfigError(file_name, Mark{static_cast<int>(line), 1}, "(top)",
                        "expected a mapping with 'jobs' (and optionally 'server'); this line does not start one");
    }
    throw ConfigError(file_name, Mark{1, 1}, "(top)", "the config is empty");
  }
  try {
    const Value top{doc, "", mark_of(doc)};
    if (!top.node.IsMap()) r.fail(top.at, "(top)", "expected a mapping with 'jobs' (and optionally 'server')");
    const Fields f(r, top, {"server", "jobs"});

    Config cfg;
    cfg.file = file_name;
    if (auto* s = f.get("server")) parse_server(r, *s, base_dir, cfg.server);

    const Value& jobs = f.need("jobs");
    // `jobs: {}` is a daemon for client-defined jobs only (Loader.from_folder/from_dataset
    // define theirs at run time); with client_jobs off it could never serve anything.
    if (!jobs.node.IsMap()) r.fail(jobs, "expected a mapping of job names to jobs ({} for client-defined jobs only)");
    if (jobs.node.size() == 0 && !cfg.server.client_jobs) {
      r.fail(jobs, "no jobs and server.client_jobs: false: this stokerd could serve nothing (define a job, or "
                   "allow client-defined jobs)");
    }
    std::set<std::string> names;
    for (const auto& kv : jobs.node) {
      const Mark name_at = mark_of(kv.first);
      if (!kv.first.IsScalar()) r.fail(name_at, "jobs", "job names must be plain words, got " + describe(kv.first));
      const std::string name = kv.first.Scalar();
      // yaml-cpp keeps both entries of a repeated key, so a copy-pasted job is caught here.
      if (!names.insert(name).second) r.fail(name_at, "jobs." + name, "duplicate job name");
      const Mark m = mark_of(kv.second);
      const Value body{kv.second, "jobs." + name, kv.second.IsNull() || m.line == 0 ? name_at : m};
      cfg.jobs.push_back(parse_job(r, name, name_at, body, base_dir));
    }
    return cfg;
  } catch (const YAML::Exception& e) {
    // Not expected (every access above is checked first); kept so that no yaml-cpp exception
    // can escape as something other than a ConfigError.
    throw ConfigError(file_name, mark_of(e.mark), "(yaml)", e.msg);
  }
}

}  // namespace

Config parse_config(const std::string& yaml_text, const std::string& file_name, const fs::path& base_dir) {
  return parse_config_as(yaml_text, file_name, base_dir, /*client_job=*/false);
}

JobConfig parse_client_job(const std::string& yaml_text, const std::string& origin) {
  // Relative paths would resolve from "/", which is never what the client meant: refuse them
  // by resolving from a folder that cannot exist.
  Config cfg = parse_config_as(yaml_text, origin, "/nonexistent-relative-path-in-a-client-job", /*client_job=*/true);
  try {
    const YAML::Node doc = YAML::Load(yaml_text);  // parsed once already: it is valid YAML
    if (doc.IsMap() && doc["server"]) {
      throw ConfigError(origin, mark_of(doc["server"]), "server", "a client-defined job cannot set server keys");
    }
  } catch (const YAML::Exception& e) {
    throw ConfigError(origin, mark_of(e.mark), "(yaml)", e.msg);
  }
  if (cfg.jobs.size() != 1) {
    throw ConfigError(origin, Mark{1, 1}, "jobs", "a client defines exactly one job, got " + std::to_string(cfg.jobs.size()));
  }
  return cfg.jobs.front();
}

Config load_config(const fs::path& file) {
  std::error_code ec;
  if (fs::is_directory(file, ec)) {
    throw ConfigError(file.string(), Mark{0, 0}, "(file)", "cannot read the config: it is a directory");
  }
  std::ifstream in(file, std::ios::binary);
  if (!in) {
    throw ConfigError(file.string(), Mark{0, 0}, "(file)",
                      std::string("cannot read the config: ") + std::strerror(errno));
  }
  std::stringstream ss;
  ss << in.rdbuf();
  if (in.bad()) {
    throw ConfigError(file.string(), Mark{0, 0}, "(file)", "cannot read the config: read error");
  }
  const fs::path base = fs::absolute(file).parent_path();
  return parse_config(ss.str(), file.string(), base);
}

}  // namespace stoker::config
