// Integration tier: tar shards served by a real stokerd. The demo photos packed into shards in
// ImageFolder's order must give the same ids, labels and pixels as the ImageFolder job; the
// index cache must spare a restart the header walk; resume must work over tar like over files.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "batch_copy.hpp"
#include "daemon_fixture.hpp"
#include "stoker/stoker.hpp"
#include "tar_writer.hpp"

namespace fs = std::filesystem;
using namespace stoker::test;

namespace {

using Got = BatchCopy;




// The 64 demo photos in ImageFolder order (classes sorted, files sorted), packed into three
// shards of uneven sizes, `shards/demo-00.tar` .. `-02.tar`: key "<class>/<file stem>", a
// .jpg and a .cls each, plus a .json that must be ignored. Returns the shard pattern.
std::string write_demo_shards(const fs::path& dir, bool with_bad_member = false) {
  fs::create_directories(dir / "shards");
  const std::vector<std::string> classes = {"flower", "insect", "landscape", "texture"};
  std::vector<TarWriter> shards(3);
  int n = 0;
  for (std::size_t c = 0; c < classes.size(); ++c) {
    std::vector<fs::path> files;
    for (const auto& e : fs::directory_iterator(data_dir() + "/demo/" + classes[c])) files.push_back(e.path());
    std::sort(files.begin(), files.end());
    for (const auto& f : files) {
      TarWriter& w = shards[n < 20 ? 0 : n < 45 ? 1 : 2];
      const std::string key = classes[c] + "/" + f.stem().string();
      w.file(key + ".jpg", read_bytes(f)).file(key + ".cls", std::to_string(c)).file(key + ".json", "{}");
      ++n;
    }
  }
  REQUIRE(n == 64);
  if (with_bad_member) shards[2].file("zzz/bad.jpg", std::string("not a JPEG at all")).file("zzz/bad.cls", "0");
  for (int i = 0; i < 3; ++i) shards[i].save(dir / "shards" / ("demo-0" + std::to_string(i) + ".tar"));
  return "shards/demo-{00..02}.tar";  // relative: to the config's folder
}

}  // namespace

TEST_CASE("tar shards of the demo photos serve the same ids, labels and pixels as the ImageFolder job",
          "[integration][tar]") {
  TempDir dir;
  const auto socket = (dir.path() / "s.sock").string();
  const std::string pattern = write_demo_shards(dir.path());
  JobSpec folder;
  folder.name = "folder";
  folder.shuffle = false;
  JobSpec shards = folder;
  shards.name = "shards";
  shards.source = "{type: tar, shards: \"" + pattern + "\"}";
  Daemon d(write_config(dir.path(), {folder, shards}, 2), socket);

  stoker::ClientOptions o;
  o.socket_path = socket;
  stoker::Client a("folder", 0, o), b("shards", 0, o);
  CHECK(b.info().num_classes == 4);
  CHECK(b.info().batches_per_epoch == 8);
  for (int epoch = 0; epoch < 2; ++epoch) {
    const auto x = take_epoch(a), y = take_epoch(b);
    REQUIRE(x.size() == 8);
    REQUIRE(y.size() == 8);
    for (std::size_t i = 0; i < x.size(); ++i) {
      CHECK(x[i].ids == y[i].ids);
      CHECK(x[i].labels == y[i].labels);
      CHECK(x[i].bytes == y[i].bytes);  // random crops too: a function of (seed, epoch, id)
    }
  }
  CHECK_THAT(d.log(), Catch::Contains("job shards: indexed 3 of 3 tar shard(s)"));
  CHECK_THAT(d.log(), Catch::Contains("job shards: 64 sample(s) in 3 shard(s), 4 class(es) from .cls"));
}

TEST_CASE("tar: a restart with unchanged shards loads the index from the cache - a touched shard is indexed again",
          "[integration][tar]") {
  TempDir dir;
  const auto socket = (dir.path() / "s.sock").string();
  JobSpec j;
  j.source = "{type: tar, shards: [\"" + write_demo_shards(dir.path()) + "\"]}";  // a YAML list of patterns
  const auto cfg = write_config(dir.path(), {j}, 2);
  auto first_batch = [&](Daemon& d) {
    stoker::ClientOptions o;
    o.socket_path = socket;
    stoker::Client c("demo", 0, o);
    (void)d;
    return take_batch(c);
  };
  Got reference;
  {
    Daemon d(cfg, socket);
    CHECK_THAT(d.log(), Catch::Contains("indexed 3 of 3 tar shard(s)"));
    reference = first_batch(d);
  }
  {
    Daemon d(cfg, socket);
    CHECK_THAT(d.log(), Catch::Contains("job demo: index of 3 shard(s) loaded from cache"));
    const Got again = first_batch(d);
    CHECK(again.ids == reference.ids);
    CHECK(again.bytes == reference.bytes);
  }
  const struct timespec t[2] = {{1700000000, 0}, {1700000000, 0}};
  REQUIRE(::utimensat(AT_FDCWD, (dir.path() / "shards/demo-01.tar").c_str(), t, 0) == 0);
  {
    Daemon d(cfg, socket);
    CHECK_THAT(d.log(), Catch::Contains("indexed 1 of 3 tar shard(s)"));
    CHECK_THAT(d.log(), Catch::Contains("(2 from cache)"));
  }
}

TEST_CASE("tar: a consumer resuming at batch k gets the batches of an uninterrupted run", "[integration][tar]") {
  TempDir dir;
  const auto socket = (dir.path() / "s.sock").string();
  JobSpec j;  // shuffled, random crops and flips
  j.source = "{type: tar, shards: \"" + write_demo_shards(dir.path()) + "\"}";
  Daemon d(write_config(dir.path(), {j}, 2), socket);
  stoker::ClientOptions o;
  o.socket_path = socket;
  std::vector<Got> reference;
  {
    stoker::Client c("demo", 0, o);
    take_epoch(c);
    reference = take_epoch(c);  // epoch 1
  }
  o.start_epoch = 1;
  o.start_batch = 3;
  stoker::Client c("demo", 0, o);
  for (std::size_t k = 3; k < reference.size(); ++k) {
    const Got r = take_batch(c);
    CHECK(r.epoch == 1);
    CHECK(r.index == k);
    CHECK(r.ids == reference[k].ids);
    CHECK(r.labels == reference[k].labels);
    CHECK(r.bytes == reference[k].bytes);
  }
}

TEST_CASE("tar: a gzip-compressed shard or a broken one stops the start with the config's file:line and the shard",
          "[integration][tar]") {
  TempDir dir;
  const auto socket = (dir.path() / "s.sock").string();
  write_demo_shards(dir.path());
  fs::copy_file(dir.path() / "shards/demo-00.tar", dir.path() / "shards/demo-00.tar.gz");
  JobSpec j;
  j.source = "{type: tar, shards: shards/demo-00.tar.gz}";
  std::string out;
  CHECK(run_program({bin("stokerd"), "--config", write_config(dir.path(), {j}, 1).string(), "--socket", socket}, out) == 2);
  CHECK_THAT(out, Catch::Contains("stoker.yaml:6:") && Catch::Contains("jobs.demo.source.shards: ") &&
                      Catch::Contains("demo-00.tar.gz: compressed shards are not supported"));
  fs::resize_file(dir.path() / "shards/demo-01.tar", 5000);
  j.source = "{type: tar, shards: \"shards/demo-{00..02}.tar\"}";
  CHECK(run_program({bin("stokerd"), "--config", write_config(dir.path(), {j}, 1).string(), "--socket", socket}, out) == 2);
  CHECK_THAT(out, Catch::Contains("demo-01.tar: at offset ") && Catch::Contains("truncated"));
}

TEST_CASE("tar: a member that does not decode is quarantined as SHARD:MEMBER, skipped after a restart, tried again "
          "once its shard changed", "[integration][tar]") {
  TempDir dir;
  const auto socket = (dir.path() / "s.sock").string();
  JobSpec j;
  j.shuffle = false;
  j.source = "{type: tar, shards: \"" + write_demo_shards(dir.path(), true) + "\"}";
  const auto cfg = write_config(dir.path(), {j}, 2);
  const std::string member = (dir.path() / "shards/demo-02.tar").string() + ":zzz/bad.jpg";
  auto one_epoch = [&] {
    stoker::ClientOptions o;
    o.socket_path = socket;
    stoker::Client c("demo", 0, o);
    std::size_t samples = 0;
    for (const auto& b : take_epoch(c)) samples += b.ids.size();
    return samples;
  };
  {
    Daemon d(cfg, socket);
    CHECK(one_epoch() == 64);  // 65 samples, the bad one dropped from its batch
    CHECK_THAT(d.log(), Catch::Contains(member + ": "));
  }
  const auto q = quarantine_files(dir.path(), "demo");
  REQUIRE(q.size() == 1);
  {
    std::ifstream in(q[0]);
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    CHECK_THAT(text, Catch::StartsWith(member + "\t"));
  }
  {
    Daemon d(cfg, socket);
    CHECK_THAT(d.log(), Catch::Contains("1 file(s) skipped, listed in quarantine"));
  }
  const struct timespec t[2] = {{1700000000, 0}, {1700000000, 0}};
  REQUIRE(::utimensat(AT_FDCWD, (dir.path() / "shards/demo-02.tar").c_str(), t, 0) == 0);
  {
    Daemon d(cfg, socket);
    CHECK_THAT(d.log(), Catch::Contains("1 listed file(s) changed since and are tried again"));
  }
}

TEST_CASE("read-ahead on or off, shuffled: the same ids, labels and pixels from a folder and from tar shards, "
          "and status counts the workers' wait for bytes", "[integration][tar][read_ahead]") {
  TempDir dir;
  const auto socket = (dir.path() / "s.sock").string();
  const std::string pattern = write_demo_shards(dir.path());
  JobSpec off;
  off.name = "off";
  off.extra = "    read_ahead: false\n";
  JobSpec on = off;
  on.name = "on";
  on.extra = "";  // the default: 16 reads in flight
  JobSpec tight = off;  // a budget of about one photo, 3 reads in flight: reads withdrawn and waited for
  tight.name = "tight";
  tight.extra = "    read_ahead: {bytes: 16KiB, requests: 3}\n";
  JobSpec tar_on = off;
  tar_on.name = "tar_on";
  tar_on.source = "{type: tar, shards: \"" + pattern + "\"}";
  tar_on.extra = "    read_ahead: {bytes: 1MiB, requests: 8}\n";
  Daemon d(write_config(dir.path(), {off, on, tight, tar_on}, 2), socket);

  stoker::ClientOptions o;
  o.socket_path = socket;
  stoker::Client a("off", 0, o), b("on", 0, o), c("tight", 0, o), t("tar_on", 0, o);
  for (int epoch = 0; epoch < 2; ++epoch) {
    const auto x = take_epoch(a), y = take_epoch(b), z = take_epoch(c), w = take_epoch(t);
    REQUIRE(x.size() == 8);
    CHECK(x == y);
    CHECK(x == z);
    CHECK(x == w);
  }
  std::string st;
  REQUIRE(run_program({bin("stokerctl"), "status", "--socket", socket}, st) == 0);
  CHECK_THAT(st, Catch::Contains("\"read_wait_s\":"));
  CHECK_THAT(st, !Catch::Contains("\"read_wait_s\":0.0,"));  // the job without read-ahead waited on every read
}

TEST_CASE("tar: shuffle: {window_shards: 2} serves every sample once an epoch, two shards at a time",
          "[integration][tar][window]") {
  TempDir dir;
  const auto socket = (dir.path() / "s.sock").string();
  // Six shards of four photos; a sample's label is its shard, so each batch says where it read.
  constexpr int kShards = 6, kPerShard = 4, kWindow = kPerShard * 2;
  std::vector<fs::path> photos;
  for (const auto& e : fs::recursive_directory_iterator(data_dir() + "/demo")) {
    if (e.path().extension() == ".jpg") photos.push_back(e.path());
  }
  std::sort(photos.begin(), photos.end());
  REQUIRE(photos.size() >= kShards * kPerShard);
  fs::create_directories(dir.path() / "shards");
  for (int s = 0; s < kShards; ++s) {
    TarWriter w;
    for (int i = 0; i < kPerShard; ++i) {
      const std::string key = "s" + std::to_string(s) + "/" + std::to_string(i);
      w.file(key + ".jpg", read_bytes(photos[s * kPerShard + i])).file(key + ".cls", std::to_string(s));
    }
    w.save(dir.path() / "shards" / ("w-" + std::to_string(s) + ".tar"));
  }
  JobSpec j;
  j.source = "{type: tar, shards: \"shards/w-{0..5}.tar\"}";
  j.shuffle_yaml = "{window_shards: 2}";
  j.batch_size = 4;
  j.random_crop = false;
  Daemon d(write_config(dir.path(), {j}, 2), socket);
  stoker::Client c("demo", 0, at(socket));
  std::vector<std::vector<std::int64_t>> orders;
  for (int epoch = 0; epoch < 2; ++epoch) {
    std::vector<std::int64_t> ids, shard;
    for (const auto& b : take_epoch(c)) {
      ids.insert(ids.end(), b.ids.begin(), b.ids.end());
      shard.insert(shard.end(), b.labels.begin(), b.labels.end());
    }
    INFO("epoch " << epoch);
    REQUIRE(ids.size() == std::size_t{kShards * kPerShard});
    std::vector<std::int64_t> sorted = ids;
    std::sort(sorted.begin(), sorted.end());
    for (int i = 0; i < kShards * kPerShard; ++i) CHECK(sorted[i] == i);  // every sample once
    // Each window of 8 positions is two whole shards (ids run contiguously per shard).
    for (std::size_t w = 0; w < ids.size(); w += kWindow) {
      std::vector<std::int64_t> in(shard.begin() + static_cast<std::ptrdiff_t>(w),
                                   shard.begin() + static_cast<std::ptrdiff_t>(w + kWindow));
      for (std::size_t k = 0; k < in.size(); ++k) CHECK(in[k] == ids[w + k] / kPerShard);
      std::sort(in.begin(), in.end());
      CHECK(std::unique(in.begin(), in.end()) - in.begin() == 2);
    }
    CHECK_FALSE(std::is_sorted(ids.begin(), ids.end()));
    orders.push_back(ids);
  }
  CHECK(orders[0] != orders[1]);
  std::string st;
  REQUIRE(run_program({bin("stokerctl"), "status", "--socket", socket}, st) == 0);
  CHECK_THAT(st, Catch::Contains("\"window_shards\":2"));
  CHECK_THAT(d.log(), Catch::Contains("job demo: shuffle in windows of 2 of its 6 shard(s)"));
}
