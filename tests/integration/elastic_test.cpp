// Integration tier: elastic resume (issue 25). A 4-rank run of a job is checkpointed mid-epoch
// as a global position (samples consumed by the whole world) and resumed on 3 and on 6 ranks,
// through real stokerd processes and real clients: every sample of that epoch is served once
// across both runs (up to the padding or cut the job's shard rule applies to the rest), the next
// epoch is a fresh run's, and ranks passing different positions are refused. The same on two
// "nodes" (one daemon each, nothing shared) and after a daemon restart.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "daemon_fixture.hpp"
#include "stoker/stoker.hpp"

using namespace stoker::test;

namespace {

constexpr std::uint32_t kBatch = 3;         // 64 / 4 ranks = 16 each: 5 full batches and one of 1
constexpr std::uint64_t kTaken = 2;         // batches every rank of the 4-rank run took
constexpr std::uint64_t kPosition = kTaken * kBatch * 4;  // 24: what the whole world consumed

using Ids = std::vector<std::int64_t>;

stoker::ClientOptions at(const std::string& socket, std::uint64_t epoch, std::uint64_t batch,
                         std::uint64_t position = 0) {
  stoker::ClientOptions o;
  o.socket_path = socket;
  o.start_epoch = epoch;
  o.start_batch = batch;
  o.start_position = position;
  return o;
}

// Takes batches from `c` until the end of the epoch (or `limit` batches); appends their ids.
void take(stoker::Client& c, Ids& out, std::uint64_t limit = UINT64_MAX) {
  for (std::uint64_t n = 0; n < limit; ++n) {
    stoker::Batch b = c.next(30000);
    out.insert(out.end(), b.ids(), b.ids() + b.count());
    if (b.last_in_epoch()) break;
  }
}

struct Shard {
  const char* name;
  const char* yaml;  // the job keys that choose it
};
const Shard kShards[] = {
    {"pad", ""},
    {"drop", "    sampler_drop_last: true\n"},
    {"uneven", "    pad_shards: false\n"},
};

JobSpec job(const std::string& name, int consumers, const std::string& extra) {
  JobSpec j;
  j.name = name;
  j.consumers = consumers;
  j.batch_size = kBatch;
  j.extra = extra;
  return j;
}

// Checks the union of what the 4-rank run took and what `world` ranks took of the rest.
void check_once(const Ids& before, const Ids& after, const std::string& shard, std::uint32_t world) {
  std::map<std::int64_t, int> seen;
  for (auto id : before) seen[id]++;
  for (auto id : before) CHECK(seen[id] == 1);
  for (auto id : after) seen[id]++;
  std::uint64_t before_twice = 0;  // the new world's padding repeats the epoch's first samples
  for (auto id : before) before_twice += seen[id] == 2 ? 1 : 0;
  const std::uint64_t rest = kDemoSamples - kPosition;  // 40
  std::uint64_t twice = 0, missing = 0;
  for (std::int64_t id = 0; id < kDemoSamples; ++id) {
    const int n = seen.count(id) ? seen[id] : 0;
    CHECK(n <= 2);
    if (n == 0) ++missing;
    if (n == 2) ++twice;
  }
  INFO(shard << " 4 -> " << world);
  CHECK(before_twice == twice);  // what repeats is only ever something the first run took
  if (shard == "uneven") {
    CHECK(missing == 0);
    CHECK(twice == 0);
  } else if (shard == "pad") {
    CHECK(missing == 0);
    CHECK(twice == (world - rest % world) % world);  // the new world's padding: 2 for 3 and for 6
  } else {
    CHECK(twice == 0);
    CHECK(missing == rest % world);  // the new world's cut: 1 for 3, 4 for 6
  }
}

}  // namespace

TEST_CASE("elastic: a 4-rank run resumed mid-epoch on 3 and on 6 ranks serves the rest once",
          "[integration][elastic]") {
  for (const Shard& shard : kShards) {
    TempDir dir;
    const auto socket = (dir.path() / "s.sock").string();
    Daemon d(write_config(dir.path(), {job("w4", 4, shard.yaml), job("w3", 3, shard.yaml), job("w6", 6, shard.yaml)}, 2),
             socket);
    INFO("shard rule " << shard.name);
    // The 4-rank run: every rank takes 2 batches of epoch 0, then the job is checkpointed.
    Ids before;
    for (std::uint32_t r = 0; r < 4; ++r) {
      stoker::Client c("w4", r, at(socket, 0, 0));
      take(c, before, kTaken);
    }
    REQUIRE(before.size() == kPosition);

    for (const auto& [name, world] : {std::pair<std::string, std::uint32_t>{"w3", 3}, {"w6", 6}}) {
      // Resume: every rank of the new world connects with the same global position and
      // reads the rest of epoch 0, then all of epoch 1 on the same connection.
      Ids after;
      std::vector<Ids> next_epoch(world);
      {
        std::vector<std::unique_ptr<stoker::Client>> ranks;
        for (std::uint32_t r = 0; r < world; ++r) ranks.push_back(std::make_unique<stoker::Client>(name, r, at(socket, 0, 0, kPosition)));
        for (std::uint32_t r = 0; r < world; ++r) take(*ranks[r], after);
        for (std::uint32_t r = 0; r < world; ++r) take(*ranks[r], next_epoch[r]);
      }
      check_once(before, after, shard.name, world);
      // The next epoch is the ordinary split for the new world: what a fresh run gets.
      for (std::uint32_t r = 0; r < world; ++r) {
        stoker::Client fresh(name, r, at(socket, 1, 0));
        Ids want;
        take(fresh, want);
        INFO(name << " rank " << r);
        CHECK(next_epoch[r] == want);
      }
    }
  }
}

TEST_CASE("elastic: ranks passing different positions are refused, naming both", "[integration][elastic]") {
  TempDir dir;
  const auto socket = (dir.path() / "s.sock").string();
  Daemon d(write_config(dir.path(), {job("w3", 3, "")}, 2), socket);
  stoker::Client first("w3", 0, at(socket, 0, 0, kPosition));
  try {
    stoker::Client other("w3", 1, at(socket, 0, 0, 36));
    FAIL("a rank with another position was accepted");
  } catch (const stoker::Error& e) {
    CHECK_THAT(e.what(), Catch::Contains("global position 36 of epoch 0") &&
                             Catch::Contains("global position 24 of epoch 0"));
  }
  try {
    stoker::Client plain("w3", 2, at(socket, 0, 1));
    FAIL("a rank without a position was mixed with one that has it");
  } catch (const stoker::Error& e) {
    CHECK_THAT(e.what(), Catch::Contains("epoch 0 batch 1 without a global position") &&
                             Catch::Contains("global position 24 of epoch 0"));
  }
  // The agreeing rank still joins, and so does one at an epoch's start (a Loader connects at
  // epoch 0 batch 0 when it is built, before its checkpoint is loaded); the first one was not
  // disturbed.
  stoker::Client agree("w3", 1, at(socket, 0, 0, kPosition));
  stoker::Client built("w3", 2, at(socket, 0, 0));
  Ids ids;
  take(first, ids, 1);
  CHECK(ids.size() == kBatch);
}

TEST_CASE("elastic: resumed on two nodes (one daemon each), and after a daemon restart", "[integration][elastic]") {
  TempDir dir;
  const auto socket = (dir.path() / "s.sock").string();
  Daemon d(write_config(dir.path(), {job("w", 4, "")}, 2), socket);
  Ids before;
  for (std::uint32_t r = 0; r < 4; ++r) {
    stoker::Client c("w", r, at(socket, 0, 0));
    take(c, before, kTaken);
  }
  // The same job for a world of 6 on two nodes of 3 ranks: each daemon computes only its own
  // ranks' share of the rest from the position and the world.
  struct Node {
    TempDir dir;
    std::string socket;
    std::unique_ptr<Daemon> daemon;
    explicit Node(const std::string& ranks) {
      socket = (dir.path() / "s.sock").string();
      daemon = std::make_unique<Daemon>(write_config(dir.path(), {job("w", 3, "    world_size: 6\n    ranks: " + ranks + "\n")}, 2),
                                        socket);
    }
  };
  Node a("0-2"), b("3-5");
  Ids after;
  for (std::uint32_t r = 0; r < 6; ++r) {
    Node& n = r < 3 ? a : b;
    stoker::ClientOptions o = at(n.socket, 0, 0, kPosition);
    o.reconnect_timeout_ms = 20000;
    stoker::Client c("w", r, o);
    if (r == 4) {
      // Node b's daemon restarts mid-epoch: the client reconnects within the rest of the epoch
      // with the same position and goes on with the same batches.
      take(c, after, 1);
      b.daemon->kill9();
      b.daemon = std::make_unique<Daemon>(b.dir.path() / "stoker.yaml", b.socket);
    }
    take(c, after);
  }
  check_once(before, after, "pad", 6);
}

namespace {

// The sample ids of every batch line `stokerctl consume --ids` printed.
Ids ids_in(const std::string& out) {
  Ids ids;
  for (std::size_t at = out.find("\"ids\":["); at != std::string::npos; at = out.find("\"ids\":[", at)) {
    at += 7;
    const std::size_t end = out.find(']', at);
    std::size_t p = at;
    while (p < end) {
      std::size_t next = out.find_first_of(",]", p);
      ids.push_back(std::stoll(out.substr(p, next - p)));
      p = next + 1;
    }
  }
  return ids;
}

}  // namespace

TEST_CASE("elastic: stokerctl consume --start-position P resumes a rank on another world size",
          "[integration][elastic]") {
  TempDir dir;
  const auto socket = (dir.path() / "s.sock").string();
  Daemon d(write_config(dir.path(), {job("w4", 4, "    pad_shards: false\n"), job("w3", 3, "    pad_shards: false\n")}, 2),
           socket);
  Ids seen;
  std::string out;
  for (std::uint32_t r = 0; r < 4; ++r) {
    REQUIRE(run_program({bin("stokerctl"), "consume", "--job", "w4", "--socket", socket, "--rank", std::to_string(r),
                         "--batches", std::to_string(kTaken), "--ids"},
                        out) == 0);
    const Ids mine = ids_in(out);
    CHECK(mine.size() == kTaken * kBatch);
    seen.insert(seen.end(), mine.begin(), mine.end());
  }
  for (std::uint32_t r = 0; r < 3; ++r) {
    REQUIRE(run_program({bin("stokerctl"), "consume", "--job", "w3", "--socket", socket, "--rank", std::to_string(r),
                         "--start-position", std::to_string(kPosition), "--epochs", "1", "--ids"},
                        out) == 0);
    const Ids mine = ids_in(out);
    seen.insert(seen.end(), mine.begin(), mine.end());
  }
  std::sort(seen.begin(), seen.end());
  Ids every(kDemoSamples);
  for (std::uint32_t i = 0; i < kDemoSamples; ++i) every[i] = i;
  CHECK(seen == every);  // pad_shards: false: each sample of the epoch exactly once
}

TEST_CASE("elastic: with readers: 2 both readers of a rank get the same share of the rest", "[integration][elastic]") {
  TempDir dir;
  const auto socket = (dir.path() / "s.sock").string();
  Daemon d(write_config(dir.path(), {job("w4", 4, "    pad_shards: false\n"),
                                     job("w3", 3, "    pad_shards: false\n    readers: 2\n")}, 2),
           socket);
  Ids seen;
  for (std::uint32_t r = 0; r < 4; ++r) {
    stoker::Client c("w4", r, at(socket, 0, 0));
    take(c, seen, kTaken);
  }
  for (std::uint32_t r = 0; r < 3; ++r) {
    stoker::ClientOptions o0 = at(socket, 0, 0, kPosition), o1 = o0;
    o1.reader = 1;
    stoker::Client r0("w3", r, o0), r1("w3", r, o1);
    // The readers share slots: take their batches side by side.
    Ids a, b;
    for (bool last = false; !last;) {
      stoker::Batch x = r0.next(30000), y = r1.next(30000);
      a.insert(a.end(), x.ids(), x.ids() + x.count());
      b.insert(b.end(), y.ids(), y.ids() + y.count());
      CHECK(x.last_in_epoch() == y.last_in_epoch());
      last = x.last_in_epoch();
    }
    INFO("rank " << r);
    CHECK(a == b);
    seen.insert(seen.end(), a.begin(), a.end());
  }
  std::sort(seen.begin(), seen.end());
  Ids every(kDemoSamples);
  for (std::uint32_t i = 0; i < kDemoSamples; ++i) every[i] = i;
  CHECK(seen == every);
}

TEST_CASE("elastic: bad files are skipped inside their batch and the position still counts positions",
          "[integration][elastic]") {
  namespace fs = std::filesystem;
  TempDir dir;
  // The demo's 64 photos plus 3 files that fail to decode (quarantined when first met).
  const fs::path root = dir.path() / "data";
  fs::create_directories(root / "a");
  for (const auto& cls : fs::directory_iterator(std::string(STOKER_TEST_DATA_DIR) + "/demo")) {
    if (!cls.is_directory()) continue;
    fs::create_directories(root / cls.path().filename());
    for (const auto& e : fs::directory_iterator(cls.path())) fs::copy_file(e.path(), root / cls.path().filename() / e.path().filename());
  }
  for (const char* bad : {"bad0.jpg", "bad1.jpg", "bad2.jpg"}) std::ofstream(root / "a" / bad) << "not an image\n";
  std::vector<JobSpec> jobs = {job("w4", 4, "    pad_shards: false\n"), job("w3", 3, "    pad_shards: false\n")};
  for (auto& j : jobs) j.root = root.string();
  const auto socket = (dir.path() / "s.sock").string();
  Daemon d(write_config(dir.path(), jobs, 2), socket);
  Ids seen;
  for (std::uint32_t r = 0; r < 4; ++r) {
    stoker::Client c("w4", r, at(socket, 0, 0));
    take(c, seen, kTaken);
  }
  for (std::uint32_t r = 0; r < 3; ++r) {
    stoker::Client c("w3", r, at(socket, 0, 0, kPosition));
    take(c, seen);
  }
  // Sample ids are sorted paths: a/bad0..2 are 0..2; every other one arrives exactly once.
  std::sort(seen.begin(), seen.end());
  std::uint32_t total = 0;
  for (const auto& e : fs::recursive_directory_iterator(root)) total += e.is_regular_file() ? 1 : 0;
  Ids good;
  for (std::uint32_t i = 3; i < total; ++i) good.push_back(i);
  CHECK(seen == good);
}
