// A job's `pipeline:`: the list of steps, the one order the engine runs them in, and the
// steps that are not augmentations: decode, the geometry (random_resized_crop, or resize with
// an optional center_crop), horizontal_flip and normalize. An augmentation step is any name in
// augment/'s registry (op_registry.cpp): where it may stand is checked here from its schema
// (OpSchema's placement fields), its parameters are read in augment_steps.cpp.
//
// client/python/stoker/step_rules.py mirrors the ordering rules of parse_pipeline for the
// client's early checks: change both together.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "augment/op_schema.hpp"
#include "config/sections.hpp"

namespace stoker::config {
namespace {

// One entry of the list: `- name: {args}`, or `- name` alone for the step with its defaults.
struct Step {
  std::string name;
  Value body;     // the step's mapping (an empty one for `- name` or `- name:`)
  Value at_name;  // the step itself, for complaints about where it stands
};

Step read_step(const Reader& r, const Value& seq, std::size_t i) {
  const Value step = r.element(seq, i);
  std::string name;
  Value body;
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
  Value at_name{step.node, body.path, step.at};
  return Step{std::move(name), std::move(body), std::move(at_name)};
}

// interpolation of the geometry step: torchvision's InterpolationMode on a PIL image.
image::ResizeFilter parse_resize_filter(const Reader& r, const Value& v) {
  const std::string s = r.choice(v, {"bilinear", "bicubic", "nearest"});
  return s == "bicubic" ? image::ResizeFilter::kBicubic
         : s == "nearest" ? image::ResizeFilter::kNearest
                          : image::ResizeFilter::kBilinear;
}

// decode: {exif_orientation, strict, max_pixels, max_memory_mb, dct_scale}. Returns
// dct_scale as written (if it was), which parse_pipeline checks against the filter at the end.
std::optional<Value> parse_decode(const Reader& r, const Value& body, image::PipelineSpec& spec) {
  std::optional<Value> dct_scale;
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
  // What one decode may allocate (each worker its own): within what a job may take.
  if (auto* v = f.get("max_memory_mb")) {
    spec.max_memory_bytes = r.integer(*v, 16, 1u << 20) << 20;
    if (spec.max_memory_bytes > job_memory_budget()) {
      r.fail(*v, "must be at most " + std::to_string(job_memory_budget() >> 20) + " (the bound of " + budget_words() +
                     "), got " + std::to_string(spec.max_memory_bytes >> 20));
    }
  }
  if (auto* v = f.get("max_pixels")) {
    spec.max_pixels = r.integer(*v, 1, std::uint64_t{1} << 40);
    if (spec.max_pixels * 4 > job_memory_budget()) {  // a decoded image: up to 4 bytes a pixel
      r.fail(*v, "must be at most " + std::to_string(job_memory_budget() / 4) +
                     " (4 bytes a decoded pixel; the bound is " + budget_words() + "), got " +
                     std::to_string(spec.max_pixels));
    }
  }
  return dct_scale;
}

// random_resized_crop: {size, scale, ratio, interpolation} as torchvision's RandomResizedCrop.
void parse_random_resized_crop(const Reader& r, const Value& body, image::PipelineSpec& spec) {
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
}

// resize: {size, interpolation}: `size: [h, w]` is the output; `size: N` resizes the shorter
// side to N and a center_crop must follow. Returns true in that second case.
bool parse_resize(const Reader& r, const Value& body, image::PipelineSpec& spec) {
  const Fields f(r, body, {"size", "interpolation"});
  if (auto* v = f.get("interpolation")) spec.filter = parse_resize_filter(r, *v);
  const Value& size = f.need("size");
  if (size.node.IsSequence()) {
    std::tie(spec.out_height, spec.out_width) = r.size(size);
    spec.geometry = image::Geometry::kResize;
    return false;
  }
  spec.resize_shorter = static_cast<std::uint32_t>(r.integer(size, 1, kMaxSide));
  spec.geometry = image::Geometry::kResizeCenterCrop;
  return true;  // the output shape comes from the center_crop that must follow
}

// center_crop: {size}, within the shorter side that resize gave.
void parse_center_crop(const Reader& r, const Value& body, image::PipelineSpec& spec) {
  const Fields f(r, body, {"size"});
  const Value& size = f.need("size");
  std::tie(spec.out_height, spec.out_width) = r.size(size);
  if (spec.out_height > spec.resize_shorter || spec.out_width > spec.resize_shorter) {
    r.fail(size, "crop larger than the resized shorter side (" + std::to_string(spec.resize_shorter) + ")");
  }
}

// horizontal_flip: {p}, default 0.5 as torchvision's RandomHorizontalFlip.
void parse_horizontal_flip(const Reader& r, const Value& body, image::PipelineSpec& spec) {
  const Fields f(r, body, {"p"});
  spec.flip_probability = 0.5;
  if (auto* v = f.get("p")) {
    spec.flip_probability = r.number(*v);
    if (spec.flip_probability < 0 || spec.flip_probability > 1) r.fail(*v, "must be within [0, 1]");
  }
}

// normalize: {mean, std}, three each (R, G, B), every std > 0.
void parse_normalize(const Reader& r, const Value& body, image::PipelineSpec& spec) {
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
}

// The step names in two orders, from the ops' registry: for "did you mean" (a tie goes to the
// first) and for the list of known steps, which names them in the order they may be written.
[[noreturn]] void fail_unknown_step(const Reader& r, const Step& step) {
  std::vector<std::string_view> names = {"decode", "random_resized_crop", "resize", "center_crop", "horizontal_flip",
                                         "normalize"};
  for (const augment::OpSchema& op : augment::op_schemas()) names.push_back(op.name);
  const std::string near = closest(step.name, names);
  if (!near.empty()) r.fail(step.at_name, "unknown step; did you mean '" + near + "'?");
  std::string known = "decode, random_resized_crop, resize, center_crop, horizontal_flip";
  for (const bool after_normalize : {false, true}) {
    for (const augment::OpSchema& op : augment::op_schemas()) {
      if (op.runs_after_normalize == after_normalize) known += ", " + std::string(op.name);
    }
  }
  r.fail(step.at_name, "unknown step (known: " + known + ", normalize)");
}

}  // namespace

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
  std::string flips_first;
  std::optional<Value> dct_scale;  // decode.dct_scale as written, checked against the filter
  for (std::size_t i = 0; i < seq.node.size(); ++i) {
    const Step step = read_step(r, seq, i);
    const std::string& name = step.name;
    const Value& body = step.body;
    const Value& at_name = step.at_name;

    if ((i == 0) != (name == "decode")) {
      r.fail(at_name, i == 0 ? "the first step must be 'decode'" : "'decode' must be the first step and appear once");
    }
    const bool is_geometry = name == "random_resized_crop" || name == "resize" || name == "center_crop";
    if (is_geometry && stage == kAfterGeometry) {
      r.fail(at_name, "geometry steps come right after decode (the engine crops and resizes before "
                      "it flips or normalizes)");
    }

    if (name == "decode") {
      dct_scale = parse_decode(r, body, spec);
    } else if (name == "random_resized_crop" || name == "resize") {
      if (geometry) r.fail(at_name, "only one of random_resized_crop / resize may be used");
      geometry = true;
      stage = kGeometry;
      if (name == "resize") {
        shorter_side = parse_resize(r, body, spec);
      } else {
        parse_random_resized_crop(r, body, spec);
      }
    } else if (name == "center_crop") {
      if (!shorter_side) {
        r.fail(at_name, "center_crop must directly follow 'resize: {size: N}' (shorter side), once");
      }
      shorter_side = false;
      parse_center_crop(r, body, spec);
    } else if (name == "horizontal_flip") {
      if (flip) r.fail(at_name, "horizontal_flip appears twice");
      if (!flips_first.empty()) {
        r.fail(at_name, "horizontal_flip must come before " + flips_first + " (the engine flips first)");
      }
      flip = true;
      parse_horizontal_flip(r, body, spec);
    } else if (const augment::OpSchema* op = augment::find_op(name)) {
      if (normalize && !op->runs_after_normalize) r.fail(at_name, std::string(op->before_normalize));
      if (!geometry) r.fail(at_name, std::string(op->needs_geometry));
      stage = kAfterGeometry;
      if (op->flip_first) flips_first = name;
      augment::OpContext ctx;
      ctx.out_width = static_cast<int>(spec.out_width);
      ctx.out_height = static_cast<int>(spec.out_height);
      ctx.size_known = !shorter_side;
      ctx.after_normalize = normalize;
      const augment::AugmentStep a = parse_augment_step(r, body, *op, ctx);
      if (normalize) {
        // On the float output. Invariant: random_erasing is the one op whose schema has
        // runs_after_normalize (tests/unit/augment_schema_test.cpp checks it).
        spec.erase_output.push_back(a.erasing);
      } else {
        spec.augment.push_back(a);
      }
    } else if (name == "normalize") {
      if (normalize) r.fail(at_name, "normalize appears twice");
      normalize = true;
      parse_normalize(r, body, spec);
    } else {
      fail_unknown_step(r, step);
    }
    // Checked after the step's own keys, so that a bad key is named first.
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

}  // namespace stoker::config
