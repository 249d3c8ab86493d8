// Unit tier: the one-daemon-per-socket lock (app/instance_lock.hpp). flock() conflicts
// between open file descriptions even inside one process, so threads here stand in for
// daemons starting and stopping on one socket.
#include <catch2/catch.hpp>

#include <atomic>
#include <filesystem>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <unistd.h>
#include <vector>

#include "daemon_fixture.hpp"
#include "app/instance_lock.hpp"

using stoker::app::InstanceLock;
using stoker::test::TempDir;
namespace fs = std::filesystem;

TEST_CASE("a released instance lock removes its file, and the next daemon locks again", "[unit][lock]") {
  TempDir dir;
  const auto socket = (dir.path() / "s.sock").string();
  {
    InstanceLock first(socket);
    CHECK(fs::exists(socket + ".lock"));
    try {
      InstanceLock second(socket);
      FAIL("a second lock on a held socket was granted");
    } catch (const std::runtime_error& e) {
      CHECK_THAT(e.what(), Catch::Contains("pid " + std::to_string(::getpid())) &&
                               Catch::Contains("already running on " + socket));
    }
    CHECK(fs::exists(socket + ".lock"));  // a refused start removes nothing
  }
  CHECK_FALSE(fs::exists(socket + ".lock"));
  InstanceLock third(socket);
  CHECK(fs::exists(socket + ".lock"));
}

// The race the unlink opens: B opens the file, A unlinks it and unlocks, B locks the unlinked
// inode while C creates a new file and locks that. Without B's re-check by inode both would
// run. Many threads starting and stopping at once must never hold the lock together.
TEST_CASE("daemons starting and stopping at once never hold one socket's lock together", "[unit][lock]") {
  TempDir dir;
  const auto socket = (dir.path() / "s.sock").string();
  std::atomic<int> holders{0}, most{0};
  std::atomic<long> granted{0}, refused{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 6; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 3000; ++i) {
        std::unique_ptr<InstanceLock> lock;
        try {
          lock = std::make_unique<InstanceLock>(socket);
        } catch (const std::runtime_error&) {
          refused.fetch_add(1);
          continue;
        }
        const int now = holders.fetch_add(1) + 1;
        int seen = most.load();
        while (now > seen && !most.compare_exchange_weak(seen, now)) {
        }
        granted.fetch_add(1);
        std::this_thread::yield();
        holders.fetch_sub(1);
        lock.reset();  // unlinks, then unlocks
      }
    });
  }
  for (auto& t : threads) t.join();
  INFO("granted " << granted.load() << ", refused " << refused.load());
  CHECK(most.load() == 1);
  CHECK(granted.load() > 0);
  CHECK(refused.load() > 0);  // they did overlap
  CHECK_FALSE(fs::exists(socket + ".lock"));
}
