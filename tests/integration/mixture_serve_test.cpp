// Integration tier: a job with `sources:` (a weighted mixture, issue #25) served by a real
// stokerd. Every rank's batches are its DistributedSampler share of the mixture's epoch order
// (sampler/mixture.hpp), the same for 1 and 2 workers, after a resume and after a restart;
// labels follow `labels: per_source|shared`; status reports each source.
#include <catch2/catch.hpp>

#include <algorithm>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "daemon_fixture.hpp"
#include "sampler/mixture.hpp"
#include "sampler/sampler.hpp"
#include "stoker/stoker.hpp"

using namespace stoker::test;
namespace fs = std::filesystem;
using Json = nlohmann::json;

namespace {

constexpr std::uint32_t kBatch = 8;
constexpr std::uint32_t kDemo = 64;   // tests/data/demo: 4 classes of 16
constexpr std::uint32_t kSmall = 6;   // small/flower 3, small/insect 3

// A second, small ImageFolder: two of the demo's classes, three files each.
fs::path make_small(const fs::path& dir) {
  const fs::path root = dir / "small";
  for (const char* cls : {"flower", "insect"}) {
    fs::create_directories(root / cls);
    for (int i = 0; i < 3; ++i) {
      fs::copy_file(fs::path(data_dir()) / "demo" / cls / (std::string(cls) + "_0" + std::to_string(i) + ".jpg"),
                    root / cls / ("s" + std::to_string(i) + ".jpg"));
    }
  }
  return root;
}

// A config whose job "demo" mixes the demo set (weight 1) and `small` (weight 2).
// `ranks`: the ranks this daemon serves of the world of 2 (one node of two: "0" or "1").
fs::path mixture_config(const fs::path& dir, int workers, const std::string& mix_keys, int consumers = 2,
                        const std::string& server_extra = "", const std::string& ranks = "") {
  JobSpec j;
  j.source = "@SOURCES@";
  j.batch_size = kBatch;
  j.consumers = consumers;
  j.prefetch = 2;
  j.extra = "    world_size: 2\n" + (ranks.empty() ? std::string() : "    ranks: " + ranks + "\n");
  const fs::path cfg = write_config(dir, {j}, workers, server_extra);
  std::ifstream in(cfg);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::string sources = "    sources:\n      - {root: \"" + data_dir() + "/demo\", weight: 1}\n" +
                              "      - {root: \"" + (dir / "small").string() + "\", weight: 2}\n" + mix_keys;
  text.replace(text.find("    source: @SOURCES@\n"), std::string("    source: @SOURCES@\n").size(), sources);
  std::ofstream(cfg) << text;
  return cfg;
}

stoker::sampler::Mixture the_mixture() {
  stoker::sampler::Mixture m;
  m.sources = {{0, kDemo, 1.0}, {kDemo, kSmall, 2.0}};
  m.epoch_size = kDemo + kSmall;
  return m;
}

// per_source labels: the demo's classes 0..3 (16 files each, in order), then small's 4..5.
std::int64_t per_source_label(std::int64_t id) { return id < kDemo ? id / 16 : 4 + (id - kDemo) / 3; }

struct Served {
  std::vector<std::vector<std::int64_t>> ids, labels;
  std::vector<std::vector<std::uint8_t>> images;  // one per sample, in order
  bool operator==(const Served&) const = default;
};

Served consume_epoch(const std::string& socket, std::uint32_t rank, std::uint64_t epoch, std::uint64_t start = 0) {
  stoker::ClientOptions o;
  o.socket_path = socket;
  o.start_epoch = epoch;
  o.start_batch = start;
  stoker::Client c("demo", rank, o);
  Served out;
  for (;;) {
    stoker::Batch b = c.next(30000);
    REQUIRE(b.epoch() == epoch);
    REQUIRE(b.index() == start + out.ids.size());
    out.ids.emplace_back(b.ids(), b.ids() + b.count());
    out.labels.emplace_back(b.labels(), b.labels() + b.count());
    const std::size_t per = 3 * 32 * 32;  // the fixture's uint8 32x32 output
    for (std::uint32_t i = 0; i < b.count(); ++i) {
      out.images.emplace_back(b.images<std::uint8_t>() + i * per, b.images<std::uint8_t>() + (i + 1) * per);
    }
    if (b.last_in_epoch()) break;
  }
  return out;
}

// What rank r must get: its DistributedSampler share of the mixture's order, in batches.
std::vector<std::vector<std::int64_t>> expected(std::uint32_t rank, std::uint64_t epoch) {
  const auto order = stoker::sampler::mixture_order(the_mixture(), true, 7, epoch);
  const auto mine = stoker::sampler::rank_samples(order, 2, rank, false);
  std::vector<std::vector<std::int64_t>> out;
  for (std::size_t k = 0; k * kBatch < mine.size(); ++k) {
    out.emplace_back(mine.begin() + static_cast<std::ptrdiff_t>(k * kBatch),
                     mine.begin() + static_cast<std::ptrdiff_t>(std::min<std::size_t>(mine.size(), (k + 1) * kBatch)));
  }
  return out;
}

}  // namespace

TEST_CASE("mixture: batches are the ranks' share of the mixture order, for 1 and 2 workers, after a resume and a restart",
          "[integration][mixture]") {
  TempDir dir;
  make_small(dir.path());
  const auto socket = (dir.path() / "s.sock").string();
  std::map<std::pair<std::uint32_t, std::uint64_t>, Served> first;
  {
    Daemon d(mixture_config(dir.path(), 1, ""), socket);
    for (std::uint64_t e = 0; e < 2; ++e) {
      for (std::uint32_t r = 0; r < 2; ++r) {
        const Served s = consume_epoch(socket, r, e);
        INFO("rank " << r << " epoch " << e);
        CHECK(s.ids == expected(r, e));
        for (std::size_t k = 0; k < s.ids.size(); ++k) {
          for (std::size_t i = 0; i < s.ids[k].size(); ++i) CHECK(s.labels[k][i] == per_source_label(s.ids[k][i]));
        }
        // small's samples come about 8 times an epoch: each visit its own random crop, so
        // the same sample's images within one rank's epoch are not all the same.
        std::map<std::int64_t, std::set<std::vector<std::uint8_t>>> looks;
        std::map<std::int64_t, int> visits;
        std::size_t at = 0;
        for (const auto& batch : s.ids) {
          for (const auto id : batch) {
            visits[id]++;
            looks[id].insert(s.images[at++]);
          }
        }
        for (const auto& [id, n] : visits) {
          if (n >= 3) CHECK(looks[id].size() >= 2);
        }
        first[{r, e}] = s;
      }
    }
    // Status: each source with its share and its own epoch counter.
    std::string out;
    REQUIRE(run_program({bin("stokerctl"), "status", "--socket", socket}, out) == 0);
    const Json job = Json::parse(out.substr(out.find('{')))["jobs"][0];
    CHECK(job["samples_per_epoch"] == kDemo + kSmall);
    CHECK(job["labels"] == "per_source");
    REQUIRE(job["sources"].size() == 2);
    CHECK(job["sources"][0]["name"] == "demo");
    CHECK(job["sources"][1]["name"] == "small");
    CHECK(job["sources"][1]["per_epoch"] == 47);  // 70 * 2/3, by largest remainder
    CHECK(job["sources"][0]["samples_served"].get<std::uint64_t>() >= 2 * 23);
    CHECK(job["sources"][1]["samples_served"].get<std::uint64_t>() >= 2 * 47);
    CHECK(job["sources"][1]["source_epoch"].get<std::uint64_t>() >= 47 / kSmall);  // small repeats
    CHECK(job["class_names"] ==
          Json::array({"demo/flower", "demo/insect", "demo/landscape", "demo/texture", "small/flower", "small/insect"}));
    // /metrics-style counters per source are in the metrics document too.
    CHECK(d.stop() == 0);
  }
  // A restarted daemon with 2 workers: the same batches, and a resume mid-epoch gets the rest.
  Daemon d2(mixture_config(dir.path(), 2, ""), socket);
  for (std::uint64_t e = 0; e < 2; ++e) {
    for (std::uint32_t r = 0; r < 2; ++r) {
      INFO("rank " << r << " epoch " << e);
      CHECK(consume_epoch(socket, r, e) == first[{r, e}]);
    }
  }
  const Served rest = consume_epoch(socket, 1, 1, 2);
  CHECK(rest.ids == std::vector<std::vector<std::int64_t>>(first[{1, 1}].ids.begin() + 2, first[{1, 1}].ids.end()));
  CHECK(d2.stop() == 0);

  // Two nodes, one daemon each serving one rank (nothing shared but the config): each rank's
  // batches are the one-daemon run's.
  TempDir n0, n1;
  make_small(n0.path());
  make_small(n1.path());
  // Sample ids, labels and the order do not depend on where the sources live; pixels neither.
  const auto s0 = (n0.path() / "s.sock").string(), s1 = (n1.path() / "s.sock").string();
  Daemon node0(mixture_config(n0.path(), 1, "", 1, "", "0"), s0);
  Daemon node1(mixture_config(n1.path(), 1, "", 1, "", "1"), s1);
  for (std::uint64_t e = 0; e < 2; ++e) {
    INFO("epoch " << e);
    CHECK(consume_epoch(s0, 0, e) == first[{0, e}]);
    CHECK(consume_epoch(s1, 1, e) == first[{1, e}]);
  }
}

TEST_CASE("mixture: labels: shared maps class names across sources, and refuses a missing class by name",
          "[integration][mixture]") {
  TempDir dir;
  make_small(dir.path());
  const auto socket = (dir.path() / "s.sock").string();
  {
    // small has no landscape/texture: refused, naming the key, the class and the source.
    std::string out;
    const auto cfg = mixture_config(dir.path(), 1, "    labels: shared\n");
    CHECK(run_program({bin("stokerd"), "--config", cfg.string(), "--socket", socket}, out) == 2);
    CHECK_THAT(out, Catch::Contains("stoker.yaml:") && Catch::Contains("jobs.demo.labels") &&
                        Catch::Contains("class 'landscape'") && Catch::Contains("source 'small'"));
    CHECK_FALSE(fs::exists(socket));
  }
  Daemon d(mixture_config(dir.path(), 1, "    labels: shared\n    allow_missing_classes: true\n"), socket);
  for (std::uint32_t r = 0; r < 2; ++r) {
    const Served s = consume_epoch(socket, r, 0);
    for (std::size_t k = 0; k < s.ids.size(); ++k) {
      for (std::size_t i = 0; i < s.ids[k].size(); ++i) {
        const std::int64_t id = s.ids[k][i];
        // The same name, the same label: small's flower is 0, its insect 1, as the demo's.
        CHECK(s.labels[k][i] == (id < kDemo ? id / 16 : (id - kDemo) / 3));
      }
    }
  }
}

TEST_CASE("mixture: a bad file is quarantined in its own source, skipped after a restart, status and /metrics per source",
          "[integration][mixture]") {
  TempDir dir;
  const fs::path small = make_small(dir.path());
  {  // small's insect/s1.jpg (id 64 + 4) truncated: undecodable
    std::ifstream in(small / "insect" / "s1.jpg", std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::ofstream(small / "insect" / "s1.jpg", std::ios::binary | std::ios::trunc) << bytes.substr(0, 300);
  }
  const std::int64_t bad = kDemo + 4;
  const auto socket = (dir.path() / "s.sock").string();
  const auto cfg = mixture_config(dir.path(), 2, "", 2, "  metrics: 127.0.0.1:0\n");
  auto served_ids = [&]() {
    std::vector<std::vector<std::int64_t>> all;
    for (std::uint32_t r = 0; r < 2; ++r) {
      for (auto& b : consume_epoch(socket, r, 0).ids) all.push_back(b);
    }
    return all;
  };
  // What the order says, less the bad sample (on_error: skip drops it inside its batch).
  std::vector<std::vector<std::int64_t>> want;
  for (std::uint32_t r = 0; r < 2; ++r) {
    for (auto b : expected(r, 0)) {
      b.erase(std::remove(b.begin(), b.end(), bad), b.end());
      want.push_back(b);
    }
  }
  {
    Daemon d(cfg, socket);
    CHECK(served_ids() == want);
    std::string out;
    REQUIRE(run_program({bin("stokerctl"), "status", "--socket", socket}, out) == 0);
    const Json doc = Json::parse(out.substr(out.find('{')));
    const Json job = doc["jobs"][0];
    CHECK(job["sources"][0]["quarantined"] == 0);
    CHECK(job["sources"][1]["quarantined"] == 1);
    CHECK(job["quarantined"] == 1);
    // The same figures on /metrics, labelled by job and source.
    std::string metrics;
    REQUIRE(run_program({"/usr/bin/python3", "-c",
                         // The document is published once a second: wait for one that has the job.
                         "import sys, time, urllib.request\n"
                         "for _ in range(300):\n"
                         "    t = urllib.request.urlopen(sys.argv[1]).read().decode()\n"
                         "    if 'stoker_source_quarantined' in t: break\n"
                         "    time.sleep(0.1)\n"
                         "print(t)",
                         doc["metrics"].get<std::string>()},
                        metrics) == 0);
    CHECK_THAT(metrics, Catch::Contains("stoker_source_quarantined{job=\"demo\",source=\"small\"} 1") &&
                            Catch::Contains("stoker_source_quarantined{job=\"demo\",source=\"demo\"} 0") &&
                            Catch::Contains("stoker_source_samples_total{job=\"demo\",source=\"small\"}") &&
                            Catch::Contains("stoker_source_epoch{job=\"demo\",source=\"small\"}"));
    CHECK(d.stop() == 0);
  }
  Daemon d2(cfg, socket);
  CHECK_THAT(d2.log(), Catch::Contains("1 file(s) skipped"));
  CHECK(served_ids() == want);
}
