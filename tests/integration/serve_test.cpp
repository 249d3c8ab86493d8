// Integration tier: a real stokerd process, real consumers, real shared memory and sockets.
#include <catch2/catch.hpp>

#include <algorithm>
#include <fstream>
#include <cstdlib>
#include <cstring>
#include <map>
#include <numeric>
#include <set>
#include <thread>

#include "batch_copy.hpp"
#include "daemon_fixture.hpp"
#include "stoker/proto/names.hpp"
#include "stoker/stoker.hpp"

using namespace stoker::test;

namespace {

using Received = BatchCopy;





}  // namespace

TEST_CASE("one consumer receives every sample of an epoch exactly once, in order", "[integration]") {
  TempDir dir;
  const auto socket = (dir.path() / "s.sock").string();
  Daemon d(write_config(dir.path(), {JobSpec{}}, 2), socket);

  stoker::ClientOptions o;
  o.socket_path = socket;
  stoker::Client c("demo", 0, o);
  CHECK(c.info().batch_size == 8);
  CHECK(c.info().height == 32);
  CHECK(c.info().width == 32);
  CHECK(c.info().channels == 3);
  CHECK(c.info().num_classes == 4);
  CHECK(c.info().batches_per_epoch == 8);

  for (std::uint64_t epoch = 0; epoch < 2; ++epoch) {
    const auto batches = take_epoch(c);
    REQUIRE(batches.size() == 8);
    std::vector<std::int64_t> all;
    for (std::size_t i = 0; i < batches.size(); ++i) {
      CHECK(batches[i].epoch == epoch);
      CHECK(batches[i].index == i);
      CHECK(batches[i].ids.size() == 8);
      for (std::size_t k = 0; k < batches[i].ids.size(); ++k) {
        // ImageFolder: sorted classes, 16 files each, ids in sorted path order.
        CHECK(batches[i].labels[k] == batches[i].ids[k] / 16);
      }
      all.insert(all.end(), batches[i].ids.begin(), batches[i].ids.end());
    }
    std::sort(all.begin(), all.end());
    std::vector<std::int64_t> expect(kDemoSamples);
    std::iota(expect.begin(), expect.end(), 0);
    CHECK(all == expect);
  }
  CHECK(d.stop() == 0);
}

TEST_CASE("ranks split each epoch like DistributedSampler and stream concurrently", "[integration]") {
  TempDir dir;
  const auto socket = (dir.path() / "s.sock").string();
  JobSpec j;
  j.consumers = 3;  // 64 samples over 3 ranks: padded to 66, 22 each
  j.batch_size = 5;
  Daemon d(write_config(dir.path(), {j}, 2), socket);

  std::vector<std::vector<Received>> got(3);
  std::vector<std::thread> threads;
  for (std::uint32_t r = 0; r < 3; ++r) {
    threads.emplace_back([&, r] {
      stoker::ClientOptions o;
      o.socket_path = socket;
      stoker::Client c("demo", r, o);
      got[r] = take_epoch(c);
    });
  }
  for (auto& t : threads) t.join();

  std::map<std::int64_t, int> seen;
  for (std::uint32_t r = 0; r < 3; ++r) {
    REQUIRE(got[r].size() == 5);  // ceil(22 / 5)
    std::size_t n = 0;
    for (const auto& b : got[r]) {
      n += b.ids.size();
      for (auto id : b.ids) seen[id]++;
    }
    CHECK(n == 22);
    CHECK(got[r].back().ids.size() == 2);
  }
  CHECK(seen.size() == kDemoSamples);  // every sample reached some rank
  int dup = 0;
  for (auto& [id, k] : seen) dup += k - 1;
  CHECK(dup == 2);  // exactly the padding
}

TEST_CASE("same config and seed give the same batches whatever the worker count", "[integration]") {
  std::vector<std::vector<Received>> runs;
  for (int workers : {1, 2}) {
    TempDir dir;
    const auto socket = (dir.path() / "s.sock").string();
    Daemon d(write_config(dir.path(), {JobSpec{}}, workers), socket);
    stoker::ClientOptions o;
    o.socket_path = socket;
    stoker::Client c("demo", 0, o);
    runs.push_back(take_epoch(c));
  }
  REQUIRE(runs[0].size() == runs[1].size());
  for (std::size_t i = 0; i < runs[0].size(); ++i) {
    CHECK(runs[0][i].ids == runs[1][i].ids);
    CHECK(runs[0][i].bytes == runs[1][i].bytes);
  }
}

TEST_CASE("a consumer resumes at the position its handshake names", "[integration]") {
  TempDir dir;
  const auto socket = (dir.path() / "s.sock").string();
  Daemon d(write_config(dir.path(), {JobSpec{}}, 2), socket);
  stoker::ClientOptions o;
  o.socket_path = socket;
  std::vector<Received> reference;
  {
    stoker::Client c("demo", 0, o);
    take_epoch(c);
    reference = take_epoch(c);  // epoch 1
  }
  {
    o.start_epoch = 1;
    o.start_batch = 3;
    stoker::Client c("demo", 0, o);
    const Received r = take_batch(c);
    CHECK(r.epoch == 1);
    CHECK(r.index == 3);
    CHECK(r.ids == reference[3].ids);
    CHECK(r.bytes == reference[3].bytes);
  }
  // ...and back to the start of epoch 0 in a new connection: prefetched batches are dropped.
  o.start_epoch = 0;
  o.start_batch = 0;
  stoker::Client c0("demo", 0, o);
  const Received r0 = take_batch(c0);
  CHECK(r0.epoch == 0);
  CHECK(r0.index == 0);
}

TEST_CASE("a held batch is never overwritten while the daemon keeps prefetching", "[integration]") {
  TempDir dir;
  const auto socket = (dir.path() / "s.sock").string();
  JobSpec j;
  j.prefetch = 3;
  Daemon d(write_config(dir.path(), {j}, 2), socket);
  stoker::ClientOptions o;
  o.socket_path = socket;
  stoker::Client c("demo", 0, o);
  stoker::Batch held = c.next(30000);
  CHECK(held.shape() == std::array<std::uint64_t, 4>{8, 3, 32, 32});
  const std::vector<std::uint8_t> copy(held.images(), held.images() + c.info().image_bytes * held.count());
  const std::vector<std::int64_t> ids(held.ids(), held.ids() + held.count());
  // Take and release many more: the two other slots cycle, the held one must not.
  for (int i = 0; i < 12; ++i) c.next(30000);
  CHECK(std::equal(copy.begin(), copy.end(), held.images()));
  CHECK(std::equal(ids.begin(), ids.end(), held.ids()));
  // With two more held, the ring is full: the next request must wait, not overwrite.
  stoker::Batch h2 = c.next(30000), h3 = c.next(30000);
  CHECK_THROWS_AS(c.next(300), stoker::Error);
  held.reset();
  CHECK_NOTHROW(c.next(30000));  // the outstanding request is served once a slot frees
}

TEST_CASE("errors a client can meet name what went wrong", "[integration]") {
  TempDir dir;
  const auto socket = (dir.path() / "s.sock").string();
  JobSpec j;
  j.consumers = 2;
  Daemon d(write_config(dir.path(), {j}, 1), socket);
  stoker::ClientOptions o;
  o.socket_path = socket;

  try {
    stoker::Client c("nope", 0, o);
    FAIL("unknown job accepted");
  } catch (const stoker::Error& e) {
    CHECK(e.status() == STOKER_ERR_REFUSED);
    CHECK_THAT(e.what(), Catch::Contains("no job 'nope'") && Catch::Contains("demo"));
  }
  try {
    stoker::Client c("demo", 2, o);
    FAIL("rank 2 accepted");
  } catch (const stoker::Error& e) {
    CHECK(e.status() == STOKER_ERR_REFUSED);
    CHECK_THAT(e.what(), Catch::Contains("rank 2") && Catch::Contains("0..1"));
  }
  {
    stoker::Client c("demo", 1, o);
    try {
      stoker::Client c2("demo", 1, o);
      FAIL("second consumer on a busy rank accepted");
    } catch (const stoker::Error& e) {
      CHECK_THAT(e.what(), Catch::Contains("already has a consumer"));
    }
  }
  o.socket_path = (dir.path() / "absent.sock").string();
  try {
    stoker::Client c("demo", 0, o);
    FAIL("connected to nothing");
  } catch (const stoker::Error& e) {
    CHECK(e.status() == STOKER_ERR_NO_DAEMON);
    CHECK_THAT(e.what(), Catch::Contains("no stokerd at") && Catch::Contains("absent.sock"));
  }
}

TEST_CASE("stokerctl consume dumps what a trainer receives - status reports the rings",
          "[integration]") {
  TempDir dir;
  const auto socket = (dir.path() / "s.sock").string();
  Daemon d(write_config(dir.path(), {JobSpec{}}, 2), socket);
  std::string out;
  const auto dump = (dir.path() / "dump").string();
  REQUIRE(run_program({bin("stokerctl"), "consume", "--job", "demo", "--socket", socket, "--batches",
                       "3", "--ids", "--dump", dump},
                      out) == 0);
  CHECK_THAT(out, Catch::Contains("{\"epoch\":0,\"index\":0,\"count\":8"));
  CHECK_THAT(out, Catch::Contains("\"ids\":["));
  CHECK_THAT(out, Catch::Contains("\"summary\":true,\"batches\":3,\"samples\":24"));
  const auto npy = std::filesystem::path(dump) / "e0_b0.images.npy";
  REQUIRE(std::filesystem::exists(npy));
  CHECK(std::filesystem::file_size(npy) == 128 + 8 * 3 * 32 * 32);
  CHECK(std::filesystem::exists(std::filesystem::path(dump) / "e0_b2.labels.npy"));

  REQUIRE(run_program({bin("stokerctl"), "status", "--socket", socket}, out) == 0);
  CHECK_THAT(out, Catch::Contains("\"name\":\"demo\"") && Catch::Contains("\"samples\":64") &&
                      Catch::Contains("\"consumers\":[{\"rank\":0"));
}

TEST_CASE("stop removes the socket - segments are unnamed memfds that go with the daemon", "[integration]") {
  TempDir dir;
  const auto socket = (dir.path() / "s.sock").string();
  const std::string seg = stoker::proto::segment_name(socket, "demo");
  {
    Daemon d(write_config(dir.path(), {JobSpec{}}, 1), socket);
    CHECK(!memfd_of(d.pid(), seg).empty());
    CHECK(shm_objects_containing(seg).empty());  // nothing in /dev/shm for anyone to open
    CHECK(d.stop() == 0);
  }
  CHECK(shm_objects_containing(seg).empty());
  CHECK_FALSE(std::filesystem::exists(socket));
}

TEST_CASE("a consumer asking for device output without a usable GPU gets a clear error",
          "[integration]") {
  TempDir dir;
  const auto socket = (dir.path() / "s.sock").string();
  // The daemon has no usable device; the consumer (simulated device) asks for one anyway.
  ::setenv("STOKER_DEVICE_BACKEND", "none", 1);
  Daemon d(write_config(dir.path(), {JobSpec{}}, 1), socket);
  ::setenv("STOKER_DEVICE_BACKEND", "hostsim", 1);
  stoker::ClientOptions o;
  o.socket_path = socket;
  o.want_device = true;
  try {
    stoker::Client c("demo", 0, o);
    FAIL("device output granted by a daemon without a device");
  } catch (const stoker::Error& e) {
    CHECK(e.status() == STOKER_ERR_REFUSED);
    CHECK_THAT(e.what(), Catch::Contains("device output was requested") &&
                             Catch::Contains("host batches only") &&
                             Catch::Contains("STOKER_DEVICE_BACKEND=none"));
  }
  // The daemon logged why once, and host consumers are served as usual.
  CHECK_THAT(d.log(), Catch::Contains("device output unavailable"));
  o.want_device = false;
  stoker::Client c("demo", 0, o);
  CHECK(c.next(30000).count() == 8);
  ::unsetenv("STOKER_DEVICE_BACKEND");
}

TEST_CASE("a consumer whose process cannot use a device is told why before connecting",
          "[integration]") {
  TempDir dir;
  const auto socket = (dir.path() / "s.sock").string();
  Daemon d(write_config(dir.path(), {JobSpec{}}, 1), socket);
  ::setenv("STOKER_DEVICE_BACKEND", "none", 1);
  stoker::ClientOptions o;
  o.socket_path = socket;
  o.device = "cuda:0";
  try {
    stoker::Client c("demo", 0, o);
    FAIL("device output granted to a process without a device");
  } catch (const stoker::Error& e) {
    CHECK(e.status() == STOKER_ERR_REFUSED);
    CHECK_THAT(e.what(), Catch::Contains("this process cannot use a device") &&
                             Catch::Contains("STOKER_DEVICE_BACKEND=none"));
  }
  o.device = "gpu0";
  ::unsetenv("STOKER_DEVICE_BACKEND");
  try {
    stoker::Client c("demo", 0, o);
    FAIL("a bad device name was accepted");
  } catch (const stoker::Error& e) {
    CHECK(e.status() == STOKER_ERR_INVALID_ARGUMENT);
    CHECK_THAT(e.what(), Catch::Contains("'gpu0' is not \"cuda\" or \"cuda:N\""));
  }
}

TEST_CASE("a file-list job serves its list's order and labels - a listed file that is missing is skipped",
          "[integration][filelist]") {
  TempDir dir;
  const auto socket = (dir.path() / "s.sock").string();
  // Every demo photo, in reverse order, labelled by hand; one line names a file that does not exist.
  std::vector<std::string> files;
  for (const char* cls : {"flower", "insect", "landscape", "texture"}) {
    for (int i = 0; i < 16; ++i) files.push_back(std::string(cls) + "/" + cls + "_" + (i < 10 ? "0" : "") + std::to_string(i) + ".jpg");
  }
  std::reverse(files.begin(), files.end());
  {
    std::ofstream list(dir.path() / "train.csv");
    list << "# path,label\n";
    for (std::size_t i = 0; i < files.size(); ++i) list << files[i] << "," << (i % 5) << "\n";
    list << "flower/not_there.jpg,4\n";
  }
  JobSpec j;
  j.shuffle = false;
  j.batch_size = 5;
  j.extra = "";
  auto cfg = write_config(dir.path(), {j}, 2);
  {
    std::ifstream in(cfg);
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const std::string from = "source: {type: imagefolder, root: \"" + data_dir() + "/demo\"}";
    REQUIRE(text.find(from) != std::string::npos);
    text.replace(text.find(from), from.size(),
                 "source: {type: filelist, list: train.csv, root: \"" + data_dir() + "/demo\"}");
    std::ofstream(cfg) << text;
  }
  Daemon d(cfg, socket);
  stoker::ClientOptions o;
  o.socket_path = socket;
  stoker::Client c("demo", 0, o);
  std::vector<std::int64_t> ids, labels;
  for (;;) {
    stoker::Batch b = c.next(30000);
    ids.insert(ids.end(), b.ids(), b.ids() + b.count());
    labels.insert(labels.end(), b.labels(), b.labels() + b.count());
    if (b.last_in_epoch()) break;
  }
  REQUIRE(ids.size() == 64);  // the missing 65th line is skipped
  for (std::size_t i = 0; i < ids.size(); ++i) {
    CHECK(ids[i] == static_cast<std::int64_t>(i));   // the list's order
    CHECK(labels[i] == static_cast<std::int64_t>(i % 5));
  }
  CHECK_THAT(d.log(), Catch::Contains("not_there.jpg: cannot open: No such file or directory"));
}

TEST_CASE("colour steps: same batches whatever the worker count, and they really change the pixels",
          "[integration][augment]") {
  auto run_job = [](int workers, const std::string& steps) {
    TempDir dir;
    const auto socket = (dir.path() / "s.sock").string();
    JobSpec j;
    j.shuffle = false;
    j.pipeline_yaml = "    pipeline:\n      - decode: {}\n      - random_resized_crop: {size: 24}\n" + steps;
    Daemon d(write_config(dir.path(), {j}, workers), socket);
    stoker::ClientOptions o;
    o.socket_path = socket;
    stoker::Client c("demo", 0, o);
    std::vector<std::uint8_t> bytes;
    for (int i = 0; i < 4; ++i) {
      Received r = take_batch(c);
      bytes.insert(bytes.end(), r.bytes.begin(), r.bytes.end());
    }
    return bytes;
  };
  const std::string colour =
      "      - color_jitter: {brightness: 0.4, contrast: 0.4, saturation: 0.4}\n"
      "      - random_grayscale: {p: 0.2}\n      - random_solarize: {threshold: 192, p: 0.3}\n"
      "      - random_posterize: {bits: 4, p: 0.3}\n      - random_autocontrast: {p: 0.3}\n"
      "      - random_equalize: {p: 0.3}\n      - random_adjust_sharpness: {sharpness_factor: 2, p: 0.3}\n";
  const auto one = run_job(1, colour), two = run_job(2, colour), plain = run_job(2, "");
  REQUIRE(one.size() == plain.size());
  CHECK(one == two);    // randomness from (seed, epoch, sample id), not from which worker ran
  CHECK(one != plain);  // and the steps did something
  // The crops are the same with and without colour steps (their randomness has its own stream):
  // a posterize-only job keeps each pixel's high bits.
  const auto poster = run_job(2, "      - random_posterize: {bits: 2, p: 1.0}\n");
  std::size_t same_high_bits = 0;
  for (std::size_t i = 0; i < plain.size(); ++i) same_high_bits += (plain[i] & 0xc0) == poster[i] ? 1 : 0;
  CHECK(same_high_bits == plain.size());
}

TEST_CASE("status reports the rate over the last seconds, not 0 as soon as the consumer leaves",
          "[integration][status]") {
  TempDir dir;
  const auto socket = (dir.path() / "s.sock").string();
  JobSpec j;
  j.prefetch = 2;
  Daemon d(write_config(dir.path(), {j}, 2), socket);
  {
    stoker::ClientOptions o;
    o.socket_path = socket;
    stoker::Client c("demo", 0, o);
    const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(2500);
    while (std::chrono::steady_clock::now() < until) {
      take_batch(c);
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(1200));  // the consumer is gone
  std::string out;
  REQUIRE(run_program({bin("stokerctl"), "status", "--socket", socket}, out) == 0);
  const auto at = out.find("\"images_per_s\":");
  REQUIRE(at != std::string::npos);
  // Not 0 (the bug); no figure to reach: a loaded machine serves fewer than the ~8 images per
  // 20 ms batch the consumer asked for.
  CHECK(std::stod(out.substr(at + 15)) > 0.0);
}
