// Integration tier: one job spread over several "nodes" (several stokerd processes on their own
// sockets, as one per machine would be). Each serves a range of global ranks of one world;
// nothing is shared between them but the config and the seed.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "daemon_fixture.hpp"
#include "sampler/sampler.hpp"
#include "stoker/stoker.hpp"

using namespace stoker::test;

namespace {


// ids of one epoch for global `rank`, from the daemon serving it.
std::vector<std::int64_t> epoch_ids(const std::string& socket, std::uint32_t rank, std::uint64_t epoch,
                                    std::uint64_t start_batch = 0) {
  stoker::ClientOptions o;
  o.socket_path = socket;
  o.start_epoch = epoch;
  o.start_batch = start_batch;
  stoker::Client c("demo", rank, o);
  std::vector<std::int64_t> ids;
  for (;;) {
    stoker::Batch b = c.next(30000);
    ids.insert(ids.end(), b.ids(), b.ids() + b.count());
    if (b.last_in_epoch()) break;
  }
  return ids;
}

// A node of a world of 6: ranks [first, last]. The seed comes from the environment, as a
// launcher would pass it, through ${VAR} in the YAML.
struct Node {
  TempDir dir;
  std::string socket;
  std::unique_ptr<Daemon> daemon;
  Node(std::uint32_t first, std::uint32_t last, const std::string& ranks_yaml = "") {
    JobSpec j;
    j.consumers = static_cast<int>(last - first + 1);
    j.extra = "    world_size: ${TEST_WORLD_SIZE}\n" +
              (ranks_yaml.empty() ? "    ranks: " + std::to_string(first) + "-" + std::to_string(last) + "\n"
                                  : ranks_yaml);
    socket = (dir.path() / "s.sock").string();
    daemon = std::make_unique<Daemon>(write_config(dir.path(), {j}, 2), socket);
  }
};

}  // namespace

TEST_CASE("nodes of one world: every rank gets DistributedSampler's shard, the union is every sample",
          "[integration][multinode]") {
  ::setenv("TEST_WORLD_SIZE", "6", 1);
  Node a(0, 1), b(2, 3), c(4, 5, "    node_rank: 2\n    local_world_size: 2\n");
  const std::string sockets[6] = {a.socket, a.socket, b.socket, b.socket, c.socket, c.socket};
  for (std::uint64_t epoch : {0u, 1u}) {
    // The same permutation on every node: a function of (seed, epoch) only.
    const auto perm = stoker::sampler::epoch_permutation(kDemoSamples, true, 7, epoch);
    std::map<std::int64_t, int> seen;
    std::size_t total = 0;
    for (std::uint32_t r = 0; r < 6; ++r) {
      const auto ids = epoch_ids(sockets[r], r, epoch);
      const auto want = stoker::sampler::rank_samples(perm, 6, r, false);
      INFO("epoch " << epoch << " rank " << r);
      REQUIRE(ids.size() == want.size());  // 64 / 6 padded up: 11 each
      CHECK(std::equal(ids.begin(), ids.end(), want.begin()));
      for (auto id : ids) seen[id]++;
      total += ids.size();
    }
    // Every sample at least once; only DistributedSampler's padding (66 - 64 = 2) repeats.
    CHECK(seen.size() == kDemoSamples);
    CHECK(total == 66);
  }
  ::unsetenv("TEST_WORLD_SIZE");
}

TEST_CASE("a rank another node serves is refused, naming this node's ranks and the world",
          "[integration][multinode]") {
  ::setenv("TEST_WORLD_SIZE", "6", 1);
  Node a(0, 1);
  stoker::ClientOptions o;
  o.socket_path = a.socket;
  try {
    stoker::Client c("demo", 3, o);
    FAIL("rank 3 was accepted by the node serving 0..1");
  } catch (const stoker::Error& e) {
    CHECK_THAT(e.what(), Catch::Contains("rank 3 is outside job 'demo' (this stokerd serves ranks 0..1 of a world of 6)"));
  }
  ::unsetenv("TEST_WORLD_SIZE");
}

TEST_CASE("one node's daemon restarts: its ranks resume where they stood with the same batches",
          "[integration][multinode]") {
  ::setenv("TEST_WORLD_SIZE", "4", 1);
  Node b(2, 3);
  const auto full = epoch_ids(b.socket, 3, 1);
  b.daemon->kill9();
  b.daemon = std::make_unique<Daemon>(b.dir.path() / "stoker.yaml", b.socket);
  const auto rest = epoch_ids(b.socket, 3, 1, /*start_batch=*/1);
  REQUIRE(full.size() > 8);
  CHECK(std::equal(rest.begin(), rest.end(), full.begin() + 8));  // batch_size 8
  CHECK(rest.size() == full.size() - 8);
  ::unsetenv("TEST_WORLD_SIZE");
}
