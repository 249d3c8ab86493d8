// Integration tier, issue #36: batches announced, not asked for (protocol 2.5). Differential
// against the Acquire round trip that 2.0..2.4 clients use (and STOKER_ACQUIRE=1 selects): the
// same batches in the same order, and what only announcements can do — a consumer takes the
// batches already announced to it while stokerd cannot answer at all (SIGSTOP), because
// next() on a buffered announcement asks the daemon nothing.
#include <catch2/catch.hpp>

#include <signal.h>
#include <stdlib.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "batch_copy.hpp"
#include "daemon_fixture.hpp"
#include "scoped_env.hpp"
#include "status_json.hpp"
#include "temp_dir.hpp"

using namespace stoker::test;
using AnnounceClock = std::chrono::steady_clock;

namespace {

int leased(const std::string& socket) {
  return status_json(socket)["jobs"][0]["consumers"][0]["slots"]["leased"].get<int>();
}

// A stokerd (2 workers) serving the demo job with a ring of 4 slots.
struct FourSlotDaemon {
  TempDir dir;
  std::string socket = (dir.path() / "s.sock").string();
  Daemon daemon{write_config(dir.path(), {four_slots()}, 2), socket};
  static JobSpec four_slots() {
    JobSpec j;
    j.prefetch = 4;
    return j;
  }
};

// Until the first consumer holds `want` leases (10 s at most), then 100 ms more so that nothing
// is still in flight.
void settle_leases(const std::string& socket, int want) {
  const auto until = AnnounceClock::now() + std::chrono::seconds(10);
  while (leased(socket) < want && AnnounceClock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
}

// A consumer of rank `rank` (reader `reader`), on the Acquire path or announced (the client
// reads STOKER_ACQUIRE when it connects, so it is set only around the connect).
std::unique_ptr<stoker::Client> consumer(const std::string& socket, bool acquire, std::uint32_t rank = 0,
                                         std::uint32_t reader = 0) {
  ScopedEnvironment env;
  if (acquire) env.set("STOKER_ACQUIRE", "1");
  stoker::ClientOptions o = at(socket);
  o.reader = reader;
  return std::make_unique<stoker::Client>("demo", rank, o);
}

// Two epochs, copied batch by batch.
std::vector<BatchCopy> two_epochs(stoker::Client& c) {
  std::vector<BatchCopy> out = take_epoch(c);
  const std::vector<BatchCopy> second = take_epoch(c);
  out.insert(out.end(), second.begin(), second.end());
  return out;
}

// Each client's two epochs, read side by side (ranks and readers of one job advance together).
std::vector<std::vector<BatchCopy>> read_together(std::vector<std::unique_ptr<stoker::Client>>& clients) {
  std::vector<std::vector<BatchCopy>> out(clients.size());
  std::vector<std::thread> threads;
  for (std::size_t i = 0; i < clients.size(); ++i) threads.emplace_back([&, i] { out[i] = two_epochs(*clients[i]); });
  for (auto& t : threads) t.join();
  return out;
}

// `rounds` short consumers, one after another, on each of `ranks` ranks, the ranks side by side;
// `one(rank, round)` connects, reads and closes one, true when it got the batch it should.
// How many did not.
template <class One>
int short_consumers(std::uint32_t ranks, int rounds, One one) {
  std::vector<std::thread> threads;
  std::atomic<int> wrong{0};
  for (std::uint32_t rank = 0; rank < ranks; ++rank) {
    threads.emplace_back([&, rank] {
      for (int i = 0; i < rounds; ++i) {
        if (!one(rank, i)) ++wrong;
      }
    });
  }
  for (auto& t : threads) t.join();
  return wrong.load();
}

}  // namespace

TEST_CASE("announced batches are taken while stokerd is stopped, the Acquire path waits for it",
          "[integration][announce]") {
  FourSlotDaemon f;
  const std::string& socket = f.socket;
  Daemon& d = f.daemon;

  for (const bool acquire : {false, true}) {
    CAPTURE(acquire);
    const auto client = consumer(socket, acquire);
    stoker::Client& c = *client;
    CHECK(take_batch(c).index == 0);
    // Announce mode: the ring's other ready batches are sent to the consumer unasked, and
    // leased to it; Acquire mode: none is leased until it asks.
    settle_leases(socket, acquire ? 0 : 4);
    REQUIRE(::kill(d.pid(), SIGSTOP) == 0);
    int got = 0;
    std::uint64_t expect = 1;
    const auto t0 = AnnounceClock::now();
    for (int i = 0; i < 6; ++i) {
      try {
        const BatchCopy b = take_batch(c, 300);
        CHECK(b.index == expect);
        ++expect;
        ++got;
      } catch (const stoker::Error&) {  // timed out: the daemon cannot answer
        break;
      }
    }
    const double took = std::chrono::duration<double>(AnnounceClock::now() - t0).count();
    REQUIRE(::kill(d.pid(), SIGCONT) == 0);
    INFO(got << " batches in " << took << " s while stokerd was stopped");
    if (acquire) {
      CHECK(got == 0);  // every batch is a round trip
    } else {
      CHECK(got == 4);  // the window: the ring's 4 slots, announced before the stop
      CHECK(took < 0.3 + 0.25);  // four from the buffer at once, then one timed-out call
    }
    // The stream goes on where it was once the daemon runs again.
    CHECK(take_batch(c, 10000).index == expect);
    if (acquire) {
      // (Acquire leaves its request outstanding across the timeout: the next call gets it.)
      CHECK(take_batch(c, 10000).index == expect + 1);
    }
  }
}

TEST_CASE("try_next takes only batches already received, at once, and next() goes on after them",
          "[integration][announce]") {
  FourSlotDaemon f;
  const std::string& socket = f.socket;
  Daemon& d = f.daemon;

  SECTION("announced: the window, then nothing, while stokerd is stopped") {
    const auto client = consumer(socket, false);
    stoker::Client& c = *client;
    CHECK(take_batch(c).index == 0);
    settle_leases(socket, 4);
    REQUIRE(::kill(d.pid(), SIGSTOP) == 0);
    // Batches 1..4 were announced before the stop: next() takes the first, try_next the rest
    // (from the client's buffer or, once that is empty, from the socket without waiting), then
    // says "none" at once.
    std::vector<std::uint64_t> got{take_batch(c, 300).index};
    const auto t0 = AnnounceClock::now();
    for (int i = 0; i < 6; ++i) {
      std::optional<stoker::Batch> b = c.try_next();
      if (!b) break;
      got.push_back(copy_of(*b, c).index);
    }
    const double took = std::chrono::duration<double>(AnnounceClock::now() - t0).count();
    const bool empty_after = !c.try_next().has_value();
    REQUIRE(::kill(d.pid(), SIGCONT) == 0);
    CHECK(got == std::vector<std::uint64_t>{1, 2, 3, 4});
    CHECK(empty_after);
    CHECK(took < 0.25);                      // no call waited for the stopped daemon (a wait here is 0.3 s)
    CHECK(take_batch(c, 10000).index == 5);  // next() goes on where try_next stopped
  }

  SECTION("Acquire path: never a batch, and no request left behind") {
    const auto client = consumer(socket, true);
    stoker::Client& c = *client;
    CHECK(take_batch(c).index == 0);
    settle_leases(socket, 0);
    for (int i = 0; i < 3; ++i) CHECK_FALSE(c.try_next().has_value());
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    CHECK(leased(socket) == 0);  // try_next asked stokerd for nothing
    CHECK(take_batch(c, 10000).index == 1);
  }
}

TEST_CASE("announce and Acquire deliver the same batches: two epochs, two ranks, fan-out readers",
          "[integration][announce]") {
  TempDir dir;
  const auto socket = (dir.path() / "s.sock").string();
  JobSpec ranks;
  ranks.consumers = 2;
  ranks.prefetch = 3;
  std::vector<std::vector<BatchCopy>> acquired, announced;
  {
    Daemon d(write_config(dir.path(), {ranks}, 2), socket);
    std::vector<std::unique_ptr<stoker::Client>> clients;
    clients.push_back(consumer(socket, true, 0));
    clients.push_back(consumer(socket, true, 1));
    acquired = read_together(clients);
  }
  {
    Daemon d(write_config(dir.path(), {ranks}, 2), socket);
    std::vector<std::unique_ptr<stoker::Client>> clients;
    clients.push_back(consumer(socket, false, 0));
    clients.push_back(consumer(socket, false, 1));
    announced = read_together(clients);
  }
  REQUIRE(acquired[0].size() == 8);  // 64 samples, 2 ranks, batches of 8, two epochs
  CHECK(announced[0] == acquired[0]);
  CHECK(announced[1] == acquired[1]);
  CHECK(announced[0] != announced[1]);

  // Fan-out: two readers of one rank, one announced and one acquiring, read the same batches.
  JobSpec fan;
  fan.extra = "    readers: 2\n";
  Daemon d(write_config(dir.path(), {fan}, 2), socket);
  std::vector<std::unique_ptr<stoker::Client>> readers;
  readers.push_back(consumer(socket, false, 0, 0));
  readers.push_back(consumer(socket, true, 0, 1));
  const auto both = read_together(readers);
  REQUIRE(both[0].size() == 16);
  CHECK(both[0] == both[1]);
}

TEST_CASE("consumers that release and hang up while batches are announced to them: every release is counted",
          "[integration][announce]") {
  // The race this pins: a client releases its batch and closes while stokerd is announcing the
  // next one to it. That send fails (EPIPE) with the release still queued on stokerd's side;
  // evicted unread, the release was never counted (and the batch it took would count as
  // untaken). Many short consumers on several ranks at once make the race likely: each takes
  // one batch while its ring is still being filled behind it.
  TempDir dir;
  const auto socket = (dir.path() / "s.sock").string();
  JobSpec j;
  j.consumers = 4;
  j.prefetch = 4;
  Daemon d(write_config(dir.path(), {j}, 2), socket);
  constexpr int kRounds = 40;
  CHECK(short_consumers(4, kRounds, [&](std::uint32_t rank, int) {
          const auto client = consumer(socket, false, rank);
          // Released on return, then the client closes; each starts the epoch it asks for (0).
          return take_batch(*client).index == 0;
        }) == 0);
  const auto until = AnnounceClock::now() + std::chrono::seconds(10);
  std::int64_t reports = -1;
  std::string last;
  while (AnnounceClock::now() < until) {
    reports = 0;
    const auto st = status_json(socket);
    last = st.dump();
    for (const auto& c : st["jobs"][0]["consumers"]) reports += c["wait_reports"].get<std::int64_t>();
    if (reports == 4 * kRounds) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  INFO(last);
  CHECK(reports == 4 * kRounds);
}

TEST_CASE("a consumer that hangs up while a batch is announced to it leaves that batch to the next one",
          "[integration][announce]") {
  // The race this pins: stokerd takes a ready batch for a consumer (leasing it, moving that
  // reader's position past it) and its announcement fails because the consumer has just
  // closed. That batch was never seen, so it must go back as untaken: the ring then holds it
  // for whoever resumes there. Counted as taken, the idle ring gave its slot up, the resuming
  // consumer found its batch gone and the ring re-planned (everything prefetched decoded
  // again; in a fan-out group, a batch decoded past the bound the group promises).
  // Each rank runs a chain of short consumers, each resuming where the last one stopped.
  TempDir dir;
  const auto socket = (dir.path() / "s.sock").string();
  JobSpec j;
  j.consumers = 4;
  j.prefetch = 4;
  Daemon d(write_config(dir.path(), {j}, 2), socket);
  constexpr std::uint64_t kPerEpoch = kDemoSamples / 4 / 8;  // a rank's batches in an epoch
  CHECK(short_consumers(4, 30, [&](std::uint32_t rank, int round) {
          const auto p = static_cast<std::uint64_t>(round);
          stoker::ClientOptions o = at(socket);
          o.start_epoch = p / kPerEpoch;
          o.start_batch = p % kPerEpoch;
          stoker::Client c("demo", rank, o);
          const BatchCopy b = take_batch(c);
          return b.epoch == p / kPerEpoch && b.index == p % kPerEpoch;
        }) == 0);
  // Every consumer resumed at a batch its ring still held: nothing was planned twice.
  const std::string log = d.log();
  const std::size_t first = log.find("re-planning");
  INFO((first == std::string::npos ? std::string() : log.substr(first > 3000 ? first - 3000 : 0, 3200)));
  CHECK(first == std::string::npos);
}
