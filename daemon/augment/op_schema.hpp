// What an augmentation operation accepts in a job's pipeline, as plain data beside the op's own
// code (DALI keeps an operator's schema beside its implementation): the step's name, where it
// may stand, and each parameter's name, the shape its value may take, its range, its checks
// and how it fills the op's AugmentStep. No YAML here (augment/ never depends on yaml-cpp):
// daemon/config/augment_steps.cpp walks these tables over the YAML node, reads each value into
// a ParamValue with the config's reader and refuses what a check returns, naming file:line.
//
// Adding an operation is a change in augment/ only: its pixels (a .cpp of its own or among
// its family's), its AugmentStep::Kind and parameters (color_ops.hpp) with the dispatch in
// apply_augment, an OpSchema in its family's *_schema.cpp, and one line in op_registry.cpp.
//
// Invariants: a ParamSpec's checks are called only with a value of the shape its kind
// declares (the walker has already refused any other); `apply` is called only after every
// check of that parameter passed, so it may assume the value is valid.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "augment/geometric.hpp"

namespace stoker::augment {

struct AugmentStep;

// Largest output side in pixels (the config's kMaxSide is the same number, static_assert'ed
// there): a blur kernel can never need to be larger.
inline constexpr int kMaxImageSide = 16384;

// Where the step stands in the pipeline, for checks that depend on it.
struct OpContext {
  int out_width = 0;
  int out_height = 0;
  bool size_known = true;        // false: `resize: {size: N}` still waits for its center_crop
  bool after_normalize = false;  // the step follows normalize (only ops with runs_after_normalize)
};

// One parameter's value as read from the config, without YAML: a number (numbers[0]), a list
// of numbers (`list`), or a word (a choice, or a ParamSpec::word written in place of numbers).
struct ParamValue {
  bool list = false;
  std::vector<double> numbers;
  std::string word;
  double number() const { return numbers.at(0); }
};

// A refusal: what is wrong, and which list element it is about (-1: the value as a whole).
// An empty message means the value is fine.
struct Complaint {
  std::string message;
  int element = -1;
  bool ok() const { return message.empty(); }
};
inline Complaint fine() { return {}; }
inline Complaint complain(std::string message, int element = -1) { return {std::move(message), element}; }

enum class ParamKind : std::uint8_t {
  kNumber,        // one finite number
  kInteger,       // one decimal integer within [min, max]
  kPair,          // a list of exactly 2 numbers
  kNumberOrPair,  // a number, or a list of exactly 2 numbers
  // A number, or a list whose length is one of `lengths` (other lengths: `list_error`), its
  // elements read and passed to check_element one by one; integers within [min, max] when
  // `integers`.
  kNumberOrList,
  kChoice,        // one of `choices` (the reader says "did you mean")
};

struct ParamSpec {
  std::string_view name{};
  ParamKind kind = ParamKind::kNumber;
  bool required = false;
  std::int64_t min = 0, max = 0;             // kInteger, and kNumberOrList with `integers`
  std::span<const std::string_view> choices{};  // kChoice
  std::span<const std::size_t> lengths{};       // kNumberOrList
  std::string_view list_error{};                // kNumberOrList: a list of another length
  bool integers = false;                      // kNumberOrList
  std::string_view word{};  // kNumberOrList: a word accepted in place of numbers ("" none)
  // Each number as it is read (a scalar, or each element of a list), before the next is read.
  Complaint (*check_element)(double x, const OpContext& ctx) = nullptr;
  // The whole value, once read.
  Complaint (*check)(const ParamValue& v, const OpContext& ctx) = nullptr;
  // Fills the op's step from a valid value.
  void (*apply)(AugmentStep& step, const ParamValue& v) = nullptr;
};

// A refusal that involves several parameters: `param` names the one it is about; when that
// one was not written the refusal is about the step as a whole.
struct StepComplaint {
  std::string_view param{};
  std::string message;
  bool ok() const { return message.empty(); }
};

struct OpSchema {
  std::string_view name{};  // the step's name in a pipeline (torchvision's transform, snake_case)
  // Parameters in the order they are read and listed in "unknown key (allowed: ...)"; when a
  // step has several errors, the first in this order is the one named.
  std::span<const ParamSpec> params{};
  // The step with the op's Kind and torchvision's defaults, before any parameter is applied.
  AugmentStep (*make)() = nullptr;
  // Checks across parameters, after all were applied (nullptr: none).
  StepComplaint (*finish)(const AugmentStep& step) = nullptr;
  // Placement, checked by the pipeline walker before the parameters:
  std::string_view needs_geometry{};    // refusal when no geometry step came before
  std::string_view before_normalize{};  // refusal when normalize came before (ops that may not follow it)
  // May follow normalize, then running on the float output. Only random_erasing does today:
  // the walker moves its ErasingParams to PipelineSpec::erase_output.
  bool runs_after_normalize = false;
  // The engine flips before this step (it does not commute with a flip): a horizontal_flip
  // written after it is refused.
  bool flip_first = false;
};

// Every operation, in the order "did you mean" considers them (op_registry.cpp).
std::span<const OpSchema> op_schemas();
const OpSchema* find_op(std::string_view name);  // nullptr for a name no op has

// The families' schemas (each *_schema.cpp beside the family's code).
std::span<const OpSchema> color_op_schemas();     // color_ops_schema.cpp
std::span<const OpSchema> blur_op_schemas();      // blur_schema.cpp
std::span<const OpSchema> erasing_op_schemas();   // erasing_schema.cpp
std::span<const OpSchema> geometric_op_schemas(); // geometric_schema.cpp
std::span<const OpSchema> policy_op_schemas();    // policies_schema.cpp

// Shared parameter shapes of the families.
// interpolation: nearest or bilinear (the two torchvision's tensor warps offer).
inline constexpr std::string_view kInterpolationNames[] = {"nearest", "bilinear"};
Interpolation interpolation_of(const ParamValue& v);

// Shared checks of the families.
Complaint check_probability(const ParamValue& v, const OpContext& ctx);  // [0, 1]
// An angle range as torchvision's _setup_angle: d >= 0 meaning [-d, d], or [min, max].
Complaint check_angle_range(const ParamValue& v, const OpContext& ctx);
std::array<double, 2> angle_range(const ParamValue& v);
// A positive range: x > 0, or [min, max] with 0 < min <= max (a list only: kPair).
Complaint check_positive_range(const ParamValue& v, const OpContext& ctx);

}  // namespace stoker::augment
