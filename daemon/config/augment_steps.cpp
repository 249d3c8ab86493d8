// The augmentation steps of a pipeline (color_jitter ... random_erasing), read by walking the
// op's schema (augment/op_schema.hpp): what each step accepts, its torchvision defaults, its
// checks and how it fills the AugmentStep live beside the op's code in daemon/augment/; this
// file only reads the YAML (augment/ does not depend on yaml-cpp) and refuses what the
// schema's checks return, so every failure is a ConfigError naming FILE:LINE:COL and the key.
// Where a step may stand in the pipeline is checked in pipeline_steps.cpp.
#include <algorithm>
#include <string>
#include <vector>

#include "augment/color_ops.hpp"
#include "config/sections.hpp"

namespace stoker::config {
namespace {

static_assert(kMaxSide == static_cast<std::uint64_t>(augment::kMaxImageSide),
              "the config's largest side and the ops' must agree");

void refuse(const Reader& r, const Value& v, const augment::Complaint& c) {
  if (c.ok()) return;
  if (c.element >= 0) r.fail(r.element(v, static_cast<std::size_t>(c.element)), c.message);
  r.fail(v, c.message);
}

// One declared parameter's value, read in the shape its kind declares; each number goes
// through check_element as it is read (so the first bad element is the one named).
augment::ParamValue read_param(const Reader& r, const Value& v, const augment::ParamSpec& p,
                               const augment::OpContext& ctx) {
  using augment::ParamKind;
  augment::ParamValue out;
  auto one = [&](const Value& x) {
    const double d = p.integers ? static_cast<double>(r.integer(x, static_cast<std::uint64_t>(p.min),
                                                                static_cast<std::uint64_t>(p.max)))
                                : r.number(x);
    if (p.check_element != nullptr) refuse(r, x, p.check_element(d, ctx));
    out.numbers.push_back(d);
  };
  switch (p.kind) {
    case ParamKind::kNumber:
      one(v);
      break;
    case ParamKind::kInteger:
      out.numbers.push_back(static_cast<double>(
          r.integer(v, static_cast<std::uint64_t>(p.min), static_cast<std::uint64_t>(p.max))));
      break;
    case ParamKind::kPair:
      out.list = true;
      out.numbers = r.numbers(v, 2);
      break;
    case ParamKind::kNumberOrPair:
      out.list = v.node.IsSequence();
      out.numbers = out.list ? r.numbers(v, 2) : std::vector<double>{r.number(v)};
      break;
    case ParamKind::kNumberOrList:
      if (!p.word.empty() && v.node.IsScalar() && r.text(v) == p.word) {
        out.word = p.word;
      } else if (v.node.IsSequence()) {
        if (std::find(p.lengths.begin(), p.lengths.end(), v.node.size()) == p.lengths.end()) {
          r.fail(v, std::string(p.list_error));
        }
        out.list = true;
        for (std::size_t i = 0; i < v.node.size(); ++i) one(r.element(v, i));
      } else {
        one(v);
      }
      break;
    case ParamKind::kChoice:
      out.word = r.choice(v, p.choices);
      break;
  }
  return out;
}

}  // namespace

augment::AugmentStep parse_augment_step(const Reader& r, const Value& body, const augment::OpSchema& op,
                                        const augment::OpContext& ctx) {
  std::vector<std::string_view> keys;
  for (const augment::ParamSpec& p : op.params) keys.push_back(p.name);
  const Fields f(r, body, keys);
  augment::AugmentStep a = op.make();
  for (const augment::ParamSpec& p : op.params) {
    const Value* v = p.required ? &f.need(p.name) : f.get(p.name);
    if (v == nullptr) continue;  // the op's default stands
    const augment::ParamValue value = read_param(r, *v, p, ctx);
    if (p.check != nullptr) refuse(r, *v, p.check(value, ctx));
    p.apply(a, value);
  }
  if (op.finish != nullptr) {
    const augment::StepComplaint c = op.finish(a);
    if (!c.ok()) {
      const Value* v = f.get(c.param);
      r.fail(v != nullptr ? *v : body, c.message);
    }
  }
  return a;
}

}  // namespace stoker::config
