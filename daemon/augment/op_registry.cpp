// Every augmentation operation's schema in one list (op_schema.hpp), and the parameter checks
// the families share. The order is the one "did you mean" considers (a tie goes to the first).
#include <vector>

#include "augment/color_ops.hpp"
#include "augment/op_schema.hpp"

namespace stoker::augment {

std::span<const OpSchema> op_schemas() {
  // Built once (thread-safe static); the families' arrays outlive it.
  static const std::vector<OpSchema> all = [] {
    std::vector<OpSchema> v;
    for (auto family : {color_op_schemas(), blur_op_schemas(), erasing_op_schemas(), geometric_op_schemas(),
                        policy_op_schemas()}) {
      v.insert(v.end(), family.begin(), family.end());
    }
    return v;
  }();
  return all;
}

const OpSchema* find_op(std::string_view name) {
  for (const OpSchema& op : op_schemas()) {
    if (op.name == name) return &op;
  }
  return nullptr;
}

Interpolation interpolation_of(const ParamValue& v) {
  return v.word == "bilinear" ? Interpolation::kBilinear : Interpolation::kNearest;
}

Complaint check_probability(const ParamValue& v, const OpContext&) {
  return v.number() >= 0 && v.number() <= 1 ? fine() : complain("must be within [0, 1]");
}

Complaint check_angle_range(const ParamValue& v, const OpContext&) {
  if (v.list) return v.numbers[0] <= v.numbers[1] ? fine() : complain("must be [min, max] with min <= max");
  return v.number() >= 0 ? fine() : complain("must be >= 0 (the angle is drawn in [-degrees, degrees])");
}

std::array<double, 2> angle_range(const ParamValue& v) {
  if (v.list) return {v.numbers[0], v.numbers[1]};
  return {-v.number(), v.number()};
}

Complaint check_positive_range(const ParamValue& v, const OpContext&) {
  if (v.list) {
    const bool ok = v.numbers[0] > 0 && v.numbers[0] <= v.numbers[1];
    return ok ? fine() : complain("must be [min, max] with 0 < min <= max");
  }
  return v.number() > 0 ? fine() : complain("must be > 0");
}

}  // namespace stoker::augment
