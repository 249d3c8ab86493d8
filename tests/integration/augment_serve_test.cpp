// Integration tier (#17): a real stokerd with the automatic policies and random_affine gives
// the same batches with 1 and 2 workers (randomness from (seed, epoch, sample id), not from
// which worker ran first), in the next epoch too (what exact resume relies on), and the steps
// change the pixels.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "batch_copy.hpp"
#include "daemon_fixture.hpp"
#include "stoker/stoker.hpp"

using namespace stoker::test;

namespace {

// Two epochs (demo: 64 photos, batch 8) of `steps` after a 24x24 random_resized_crop.
std::vector<std::uint8_t> two_epochs(int workers, const std::string& steps) {
  TempDir dir;
  const auto socket = (dir.path() / "s.sock").string();
  JobSpec j;
  j.pipeline_yaml = "    pipeline:\n      - decode: {}\n      - random_resized_crop: {size: 24}\n" + steps;
  Daemon d(write_config(dir.path(), {j}, workers), socket);
  stoker::ClientOptions o;
  o.socket_path = socket;
  stoker::Client c("demo", 0, o);
  std::vector<std::uint8_t> bytes;
  for (int i = 0; i < 16; ++i) {
    const BatchCopy b = take_batch(c);
    bytes.insert(bytes.end(), b.bytes.begin(), b.bytes.end());
  }
  return bytes;
}

}  // namespace

TEST_CASE("trivial_augment_wide: identical batches with 1 and 2 workers over two epochs, and it changes pixels",
          "[integration][augment]") {
  const std::string ta = "      - horizontal_flip\n      - trivial_augment_wide: {interpolation: bilinear}\n";
  const auto one = two_epochs(1, ta), two = two_epochs(2, ta), plain = two_epochs(2, "      - horizontal_flip\n");
  REQUIRE(one.size() == plain.size());
  CHECK(one == two);
  CHECK(one != plain);
}

TEST_CASE("rand_augment, auto_augment and random_affine: identical batches with 1 and 2 workers",
          "[integration][augment]") {
  const std::string steps =
      "      - rand_augment: {num_ops: 2, magnitude: 9}\n      - auto_augment: {policy: imagenet}\n"
      "      - random_affine: {degrees: 20, translate: [0.1, 0.1], scale: [0.9, 1.1], shear: 10, fill: 127}\n";
  const auto one = two_epochs(1, steps), two = two_epochs(2, steps);
  CHECK(one == two);
  CHECK(one != two_epochs(1, ""));
}
