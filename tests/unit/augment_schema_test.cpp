// The ops' schemas (augment/op_schema.hpp) as the config walker relies on them: every op
// findable by its one name, every parameter complete for its kind, random_erasing the one op
// that may follow normalize (pipeline_steps.cpp moves its ErasingParams to erase_output), and
// each op's make() giving the step kind its pixels are dispatched on. What a step accepts and
// refuses is tested through the config (tests/unit/config_test.cpp) and the client's copy of the
// table against `stokerd --list-ops` (tests/python/test_step_table.py).
#include <catch2/catch.hpp>

#include <set>
#include <string>
#include <utility>

#include "augment/color_ops.hpp"
#include "augment/op_schema.hpp"

using namespace stoker;
using augment::ParamKind;

TEST_CASE("augment schemas: one name per op, complete parameters, placement the walker relies on",
          "[augment][schema]") {
  const auto ops = augment::op_schemas();
  REQUIRE(ops.size() == 14);
  std::set<std::string> names;
  std::set<std::pair<int, int>> kinds;
  for (const augment::OpSchema& op : ops) {
    CAPTURE(op.name);
    CHECK(names.insert(std::string(op.name)).second);
    CHECK(augment::find_op(op.name) == &op);
    REQUIRE(op.make != nullptr);
    const augment::AugmentStep a = op.make();
    // Distinct ops make distinct steps (the policies share kPolicy and differ by policy.kind).
    CHECK(kinds.insert({static_cast<int>(a.kind), static_cast<int>(a.policy.kind)}).second);
    CHECK_FALSE(op.needs_geometry.empty());
    CHECK((op.runs_after_normalize || !op.before_normalize.empty()));
    CHECK(op.runs_after_normalize == (a.kind == augment::AugmentStep::Kind::kErasing));
    std::set<std::string> params;
    for (const augment::ParamSpec& p : op.params) {
      CAPTURE(p.name);
      CHECK(params.insert(std::string(p.name)).second);
      CHECK(p.apply != nullptr);
      if (p.kind == ParamKind::kChoice) CHECK_FALSE(p.choices.empty());
      if (p.kind == ParamKind::kInteger || p.integers) CHECK((0 <= p.min && p.min <= p.max));
      if (p.kind == ParamKind::kNumberOrList) CHECK((!p.lengths.empty() && !p.list_error.empty()));
    }
  }
  CHECK(augment::find_op("random_erasin") == nullptr);
  CHECK(augment::find_op("normalize") == nullptr);  // read by the pipeline itself, not an op
}

TEST_CASE("augment schemas: checks and apply fill the step as torchvision builds its ranges", "[augment][schema]") {
  const augment::OpSchema* jitter = augment::find_op("color_jitter");
  REQUIRE(jitter != nullptr);
  const augment::ParamSpec& brightness = jitter->params[0];
  REQUIRE(brightness.name == "brightness");
  const augment::OpContext ctx;
  augment::ParamValue x;
  x.numbers = {1.5};
  CHECK(brightness.check(x, ctx).ok());
  augment::AugmentStep a = jitter->make();
  brightness.apply(a, x);
  CHECK(a.brightness == std::array<double, 2>{0, 2.5});  // [max(0, 1 - x), 1 + x]
  x.numbers = {-1};
  CHECK(brightness.check(x, ctx).message == "must be >= 0");

  // The blur kernel must fit the output, known only from the context.
  const augment::OpSchema* blur = augment::find_op("gaussian_blur");
  REQUIRE(blur != nullptr);
  const augment::ParamSpec& kernel = blur->params[0];
  augment::ParamValue k;
  k.numbers = {9};
  augment::OpContext small;
  small.out_width = 4;
  small.out_height = 8;
  CHECK_THAT(kernel.check(k, small).message, Catch::StartsWith("a 9x9 kernel needs an output of at least 5x5"));
  small.size_known = false;  // resize's center_crop still to come: checked no earlier than that
  CHECK(kernel.check(k, small).ok());
  CHECK(kernel.check_element(4, ctx).message == "must be odd (the kernel is centred on the pixel), got 4");

  // rand_augment: magnitude is a bin index, checked across parameters once all are applied.
  const augment::OpSchema* rand = augment::find_op("rand_augment");
  REQUIRE((rand != nullptr && rand->finish != nullptr));
  augment::AugmentStep r = rand->make();
  CHECK(rand->finish(r).ok());
  r.policy.num_magnitude_bins = 5;
  const augment::StepComplaint c = rand->finish(r);
  CHECK(c.param == "magnitude");
  CHECK(c.message == "magnitude 9 is a bin index: must be below num_magnitude_bins (5)");
}
