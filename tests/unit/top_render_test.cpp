// Unit tier: `stokerctl top`'s frame (client/stokerctl/top_render.hpp) drawn from status
// documents with the widest figures a daemon can report: every line stays within 80 columns
// and nothing in the header is cut.
#include <catch2/catch.hpp>

#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "../../client/stokerctl/top_render.hpp"

namespace {

nlohmann::json wide_status() {
  nlohmann::json consumer = {{"rank", 4095}, {"connected", true},
                             {"slots", {{"free", 100}, {"filling", 100}, {"ready", 100}, {"leased", 99}}},
                             {"released", 123456789012.0}, {"wait_fraction", 1.0}, {"wait_s", 9999999.99},
                             {"stuck", true}};
  nlohmann::json job = {{"name", "a-job-name-far-longer-than-sixteen-columns"}, {"images_per_s", 99999.9},
                        {"samples_ok", 999999999999.0}, {"errors", {{"corrupt", 99999999}}},
                        {"quarantined", 999999}, {"state", "draining"}, {"failure", nullptr},
                        {"consumers", nlohmann::json::array({consumer})}};
  // remote: a worker whose name resolved to a long IPv6 endpoint, with the widest figures.
  job["remote"] = nlohmann::json::array({{{"address", "workers.example:7070"},
                                          {"endpoint", "[2001:db8:ffff:ffff:ffff:ffff:ffff:1]:7070"},
                                          {"connected", true}, {"in_flight", 512}, {"samples_per_s", 99999.9},
                                          {"samples", 9999999999.0}, {"rtt_ms", 99999.9}, {"reissued", 99999999},
                                          {"errors", 999999}, {"hedged", 99999999999.0},
                                          {"mismatches", 99999999999.0}}});
  return {{"pid", 4194304}, {"uptime_s", 99999 * 86400.0}, {"workers", 1024}, {"worker_busy_fraction", 1.0},
          {"rss_bytes", 999999.0 * 1048576}, {"clients", 65535}, {"jobs", nlohmann::json::array({job})}};
}

}  // namespace

TEST_CASE("top's header keeps every figure, the clients count included, within 80 columns", "[unit][top]") {
  const std::string frame = stoker::ctl::render_top_frame(wide_status());
  INFO(frame);
  CHECK_THAT(frame, Catch::Contains("pid 4194304") && Catch::Contains("clients 65535") &&
                        Catch::Contains("workers 1024 (100% busy)") && Catch::Contains("rss 999999 MiB"));
  // The remote worker's row: its endpoint (cut to fit), in flight, rate, samples, re-issues.
  CHECK_THAT(frame, Catch::Contains("REMOTE WORKER") && Catch::Contains(" yes ") && Catch::Contains("9999999999") &&
                        Catch::Contains("99999999 999999"));
  // Below it, what the node did about a slow or lying worker (issue #34).
  CHECK_THAT(frame, Catch::Contains("\n    hedged 99999999999  mismatches 99999999999\n"));
  std::istringstream in(frame);
  for (std::string line; std::getline(in, line);) {
    INFO(line);
    CHECK(line.size() <= 80);
  }
}

TEST_CASE("top's header on a small daemon: the usual figures, clock at the right edge", "[unit][top]") {
  nlohmann::json st = {{"pid", 123456}, {"uptime_s", 61}, {"workers", 2}, {"worker_busy_fraction", 0.0},
                       {"rss_bytes", 25.0 * 1048576}, {"clients", 1}, {"jobs", nlohmann::json::array()}};
  const std::string frame = stoker::ctl::render_top_frame(st);
  const std::string first = frame.substr(0, frame.find('\n'));
  INFO(frame);
  CHECK_THAT(first, Catch::StartsWith("stokerd pid 123456  up 1m01s  clients 1 "));
  CHECK(first.size() == 80);  // hh:mm:ss in the last 8 columns
  CHECK(first[71] == ' ');
  CHECK(first[74] == ':');
  CHECK_THAT(frame, Catch::Contains("\nworkers 2 (0% busy)  rss 25 MiB\n"));
}

TEST_CASE("top shows an object source's fetch rate from two frames, and why a job is paused", "[unit][top]") {
  auto status = [](double bytes, double requests, const char* paused) {
    nlohmann::json src = {{"name", "imagenet-bucket-with-a-long-name"}, {"type", "tar"}, {"requests", requests},
                          {"bytes", bytes}, {"retries", 99999999999.0}, {"cache_hits", 7},
                          {"in_flight", 12}, {"latency_ms", {{"p50", 32.0}, {"p99", 999999.0}}}};
    nlohmann::json local = {{"name", "local"}, {"type", "imagefolder"}, {"root", "/data"}};
    nlohmann::json job = {{"name", "train"}, {"images_per_s", 10.0}, {"samples_ok", 1}, {"quarantined", 0},
                          {"sources", nlohmann::json::array({local, src})},
                          {"paused", paused != nullptr ? nlohmann::json(paused) : nlohmann::json(nullptr)}};
    return nlohmann::json{{"pid", 1}, {"uptime_s", 1}, {"workers", 2}, {"jobs", nlohmann::json::array({job})}};
  };
  const std::string first = stoker::ctl::render_top_frame(status(1e6, 10, nullptr));
  INFO(first);
  // No previous frame: no rate yet; local sources have no line of their own.
  CHECK_THAT(first, Catch::Contains("SOURCE") && Catch::Contains("imagenet-bucket~         -        -    32.0"));
  CHECK_THAT(first, !Catch::Contains("PAUSED") && !Catch::Contains("  local "));
  const nlohmann::json before = status(1e6, 10, nullptr);
  const std::string second = stoker::ctl::render_top_frame(
      status(1e6 + 50e6, 10 + 400, "waiting 12 s for the object store: s3://bucket/train-000001.tar: HTTP 503, "
                                   "and a reason far longer than the eighty columns of the frame"),
      &before, 2.0);
  INFO(second);
  // 50 MB and 400 requests in 2 s: 25.0 MB/s and 200 requests a second.
  CHECK_THAT(second, Catch::Contains("imagenet-bucket~      25.0      200    32.0 99999.9 99999999     12       7"));
  CHECK_THAT(second, Catch::Contains("\n  PAUSED: waiting 12 s for the object store: s3://bucket/train-000001.tar"));
  std::istringstream in(second);
  for (std::string line; std::getline(in, line);) {
    INFO(line);
    CHECK(line.size() <= 80);
  }
}
