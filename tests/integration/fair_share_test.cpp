// Integration tier: jobs of one stokerd share its worker pool fairly (issue #12, "Fair sharing
// between jobs"): a light job is not stuck behind a greedy one's backlog, and busy jobs get
// decode work in proportion to their `weight`.
#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "batch_copy.hpp"
#include "daemon_fixture.hpp"
#include "stoker/stoker.h"
#include "stoker/stoker.hpp"

using namespace stoker::test;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

namespace {

std::string status(const std::string& socket) { return daemon_status_text(socket); }


// The text after `"key":` in the status entry of job `job` (jobs are listed in config order
// and each starts with its name).
std::string field(const std::string& json, const std::string& job, const std::string& key) {
  const auto at = json.find("\"name\":\"" + job + "\"");
  REQUIRE(at != std::string::npos);
  const auto k = json.find("\"" + key + "\":", at);
  REQUIRE(k != std::string::npos);
  const auto v = k + key.size() + 3;
  return json.substr(v, json.find_first_of(",}", v) - v);
}

std::uint64_t samples_ok(const std::string& socket, const std::string& job) {
  return std::stoull(field(status(socket), job, "samples_ok"));
}

// A consumer that takes batches of `job` as fast as they come until told to stop.
class Greedy {
 public:
  Greedy(const std::string& socket, const std::string& job) {
    thread_ = std::thread([this, socket, job] {
      stoker::ClientOptions o;
      o.socket_path = socket;
      stoker::Client c(job, 0, o);
      while (!stop_.load()) {
        c.next(30000);
        taken_.fetch_add(1);
      }
    });
  }
  ~Greedy() {
    stop_ = true;
    thread_.join();
  }
  std::uint64_t taken() const { return taken_.load(); }

 private:
  std::atomic<bool> stop_{false};
  std::atomic<std::uint64_t> taken_{0};
  std::thread thread_;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

TEST_CASE("a light job's batches wait little while a greedy job keeps the worker pool busy",
          "[integration][fair]") {
  TempDir dir;
  const auto socket = (dir.path() / "s.sock").string();
  // The greedy job keeps a deep backlog (8 slots of 64 samples in flight) of costly samples
  // (160 px outputs: little DCT scaling). With one FIFO for all jobs the light job's 8 cheap
  // samples queue behind up to 512 of them, several greedy batches' worth of work; shared by
  // weight they interleave with the backlog and are done after about 8 greedy samples.
  //
  // No absolute time is asserted (a loaded machine makes every figure larger): the yardstick
  // is the time the daemon takes to make one greedy batch, measured over the same seconds on
  // the same machine.
  JobSpec greedy;
  greedy.name = "greedy";
  greedy.batch_size = 64;
  greedy.prefetch = 8;
  greedy.out_size = 160;
  JobSpec light;
  light.name = "light";
  light.batch_size = 8;
  light.prefetch = 1;  // nothing decoded ahead: each wait is the time to make one batch now
  Daemon d(write_config(dir.path(), {greedy, light}, 2), socket);

  stoker::ClientOptions o;
  o.socket_path = socket;
  stoker::Client c("light", 0, o);
  stoker::Batch held = c.next(30000);  // the batch prefetched at start
  Greedy g(socket, "greedy");
  const auto warm_until = Clock::now() + 60s;
  while (g.taken() < 9 && Clock::now() < warm_until) std::this_thread::sleep_for(5ms);
  REQUIRE(g.taken() >= 9);  // the ring's first fill is taken: from here on greedy is decode-bound

  // A trainer step of ~50 ms per batch: use the batch, hand it back, ask for the next.
  std::vector<double> waits_ms;
  const std::uint64_t greedy_before = g.taken();
  const auto loop_start = Clock::now();
  for (int i = 0; i < 40; ++i) {
    std::this_thread::sleep_for(50ms);
    held = stoker::Batch();  // released: its slot (the only one) is planned again only now
    const auto asked = Clock::now();
    held = c.next(30000);
    waits_ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - asked).count());
  }
  const double loop_ms = std::chrono::duration<double, std::milli>(Clock::now() - loop_start).count();
  const std::uint64_t greedy_batches = g.taken() - greedy_before;
  REQUIRE(greedy_batches > 0);  // the greedy job kept running beside it
  const double greedy_batch_ms = loop_ms / static_cast<double>(greedy_batches);
  const double med = median(waits_ms);
  std::printf("fair share: light job wait per batch: median %.1f ms, max %.1f ms; one greedy batch every %.1f ms "
              "(%llu in %.0f ms); ratio %.2f\n",
              med, *std::max_element(waits_ms.begin(), waits_ms.end()), greedy_batch_ms,
              static_cast<unsigned long long>(greedy_batches), loop_ms, med / greedy_batch_ms);
  // Fair: about an eighth of a greedy batch's work (plus the round trips). FIFO: several
  // greedy batches. One greedy batch is the line between them, with room on both sides.
  CHECK(med < greedy_batch_ms);
}

TEST_CASE("two greedy jobs of weight 3 and 1 get decode work about 3:1", "[integration][fair]") {
  TempDir dir;
  const auto socket = (dir.path() / "s.sock").string();
  JobSpec heavy;
  heavy.name = "heavy";
  // Deep rings: the ratio holds only while both jobs have work queued, and a consumer thread
  // starved of CPU on a loaded machine must not let its ring fill up (its job then has nothing
  // queued and the other job rightly takes the workers).
  // Large outputs: decode, not the consumers' round trips through the control thread, must be
  // what limits the rate.
  heavy.batch_size = 16;
  heavy.prefetch = 8;
  heavy.out_size = 192;
  heavy.extra = "    weight: 3\n    workers: 2\n";
  JobSpec plain = heavy;
  plain.name = "plain";
  plain.extra = "";  // weight 1, no cap
  Daemon d(write_config(dir.path(), {heavy, plain}, 2), socket);

  const std::string st = status(socket);
  CHECK(field(st, "heavy", "weight") == "3.0");
  CHECK(field(st, "heavy", "workers") == "2");
  CHECK(field(st, "plain", "weight") == "1.0");
  CHECK(field(st, "plain", "workers") == "null");

  Greedy a(socket, "heavy"), b(socket, "plain");
  // Counted from a steady state: the rings' first fill at start is 1:1 whatever the weights.
  std::this_thread::sleep_for(1500ms);
  const std::uint64_t a0 = samples_ok(socket, "heavy"), b0 = samples_ok(socket, "plain");
  std::this_thread::sleep_for(3s);
  const std::uint64_t a1 = samples_ok(socket, "heavy"), b1 = samples_ok(socket, "plain");
  REQUIRE(b1 > b0);
  const double ratio = static_cast<double>(a1 - a0) / static_cast<double>(b1 - b0);
  std::printf("fair share: weight 3:1 over 3 s: %llu vs %llu samples, ratio %.2f\n",
              static_cast<unsigned long long>(a1 - a0), static_cast<unsigned long long>(b1 - b0), ratio);
  CHECK(ratio > 2.0);
  CHECK(ratio < 4.5);
}
