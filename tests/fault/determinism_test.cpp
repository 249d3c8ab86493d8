// Fault tier: which samples go in which batch depends only on (config, seed, epoch, rank),
// never on which files are bad or when they were found (issue #13). Bad files are dropped
// inside their own batch (on_error: skip ships it short), so a resume at batch k and a
// restarted daemon with a bigger quarantine give exactly the batches an undisturbed run gives.
#include <catch2/catch.hpp>

#include <algorithm>
#include <fstream>
#include <map>
#include <set>

#include "daemon_fixture.hpp"
#include "sampler/sampler.hpp"
#include "stoker/stoker.hpp"

using namespace stoker::test;
namespace fs = std::filesystem;

namespace {

constexpr std::uint32_t kBatch = 5;

// 2 classes of good photos with broken files among them, spread through the sorted order.
// Returns the ImageFolder ids of the broken ones; `total` gets the sample count.
std::set<std::int64_t> make_dataset(const fs::path& root, std::uint32_t& total) {
  const auto src = data_dir() + "/demo/flower/flower_00.jpg";
  std::ifstream in(src, std::ios::binary);
  const std::string jpeg((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::pair<std::string, bool>> files;  // relative path, bad
  for (const char* cls : {"a", "b"}) {
    fs::create_directories(root / cls);
    for (int i = 0; i < 12; ++i) {
      char name[32];
      std::snprintf(name, sizeof name, "%s/img_%02d.jpg", cls, i);
      const bool bad = i % 5 == 2;  // img_02 and img_07 of each class
      std::ofstream(root / name, std::ios::binary) << (bad ? jpeg.substr(0, 200) : jpeg);
      files.emplace_back(name, bad);
    }
  }
  std::sort(files.begin(), files.end());  // ImageFolder order: classes, then file names
  std::set<std::int64_t> bad;
  for (std::size_t i = 0; i < files.size(); ++i) {
    if (files[i].second) bad.insert(static_cast<std::int64_t>(i));
  }
  total = static_cast<std::uint32_t>(files.size());
  return bad;
}

using Batches = std::vector<std::vector<std::int64_t>>;

Batches consume_epoch(const std::string& socket, std::uint64_t epoch, std::uint64_t start_batch = 0) {
  stoker::ClientOptions o;
  o.socket_path = socket;
  o.start_epoch = epoch;
  o.start_batch = start_batch;
  stoker::Client c("demo", 0, o);
  Batches out;
  for (;;) {
    stoker::Batch b = c.next(30000);
    REQUIRE(b.epoch() == epoch);
    REQUIRE(b.index() == start_batch + out.size());
    out.emplace_back(b.ids(), b.ids() + b.count());
    if (b.last_in_epoch()) break;
  }
  return out;
}

// What every run must deliver: batch k = the good ids among positions [kB, (k+1)B) of the
// rank's share of the epoch permutation.
Batches expected(std::uint32_t n, const std::set<std::int64_t>& bad, std::uint64_t epoch) {
  const auto perm = stoker::sampler::epoch_permutation(n, true, 7, epoch);
  const auto mine = stoker::sampler::rank_samples(perm, 1, 0, false);
  Batches out;
  for (std::size_t k = 0; k * kBatch < mine.size(); ++k) {
    out.emplace_back();
    for (std::size_t i = k * kBatch; i < std::min<std::size_t>(mine.size(), (k + 1) * kBatch); ++i) {
      if (bad.count(mine[i]) == 0) out.back().push_back(mine[i]);
    }
  }
  return out;
}

}  // namespace

TEST_CASE("batches depend only on (config, seed, epoch, rank), not on which files are bad or when found",
          "[fault][determinism]") {
  TempDir dir;
  std::uint32_t n = 0;
  const auto bad = make_dataset(dir.path() / "data", n);
  JobSpec j;
  j.root = (dir.path() / "data").string();
  j.batch_size = kBatch;
  j.prefetch = 2;
  const auto socket = (dir.path() / "s.sock").string();
  const auto cfg = write_config(dir.path(), {j}, 2);

  const Batches want0 = expected(n, bad, 0), want1 = expected(n, bad, 1);
  {
    // First run: the bad files are found while batches are being made.
    Daemon d(cfg, socket);
    CHECK(consume_epoch(socket, 0) == want0);
    // A trainer resuming mid-epoch gets exactly the rest of it.
    const Batches rest = consume_epoch(socket, 0, 2);
    CHECK(rest == Batches(want0.begin() + 2, want0.end()));
    CHECK(d.stop() == 0);
  }
  // Second run: every bad file is in the quarantine from the start; same batches.
  Daemon d2(cfg, socket);
  REQUIRE(bad.size() == 4);
  CHECK_THAT(d2.log(), Catch::Contains("4 file(s) skipped"));
  CHECK(consume_epoch(socket, 0) == want0);
  CHECK(consume_epoch(socket, 1) == want1);
  CHECK(consume_epoch(socket, 1, 3) == Batches(want1.begin() + 3, want1.end()));
}

TEST_CASE("the quarantine is keyed by the dataset, and a bad file replaced by a good one is tried again",
          "[fault][quarantine]") {
  TempDir dir;
  std::uint32_t n = 0;
  const auto bad = make_dataset(dir.path() / "data", n);
  JobSpec j;
  j.root = (dir.path() / "data").string();
  j.batch_size = kBatch;
  const auto socket = (dir.path() / "s.sock").string();
  {
    Daemon d(write_config(dir.path(), {j}, 2), socket);
    consume_epoch(socket, 0);
    CHECK(d.stop() == 0);
  }
  REQUIRE(quarantine_files(dir.path(), "demo").size() == 1);
  // The same job name on another dataset: its own (empty) list, nothing skipped.
  JobSpec other = j;
  other.root = data_dir() + "/demo";
  {
    Daemon d(write_config(dir.path(), {other}, 2), socket);
    CHECK_THAT(d.log(), !Catch::Contains("file(s) skipped"));
    CHECK(d.stop() == 0);
  }
  // Back on the first dataset, with one bad file replaced by a good photo: it is decoded
  // again and delivered; the others stay quarantined.
  fs::copy_file(data_dir() + "/demo/flower/flower_00.jpg", dir.path() / "data" / "a" / "img_02.jpg",
                fs::copy_options::overwrite_existing);
  Daemon d(write_config(dir.path(), {j}, 2), socket);
  CHECK_THAT(d.log(), Catch::Contains("3 file(s) skipped") &&
                          Catch::Contains("1 listed file(s) changed since and are tried again"));
  std::set<std::int64_t> got;
  for (const auto& b : consume_epoch(socket, 0)) got.insert(b.begin(), b.end());
  CHECK(got.size() == n - 3);
  CHECK(got.count(*bad.begin()) == 1);  // a/img_02.jpg is the first bad id
}
