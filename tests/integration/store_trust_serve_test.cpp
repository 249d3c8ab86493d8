// Issue #34, B4: a decoded store that cannot be opened (here its folder is writable by others,
// so it is refused: B2) turns the store off for that job, with the reason in its status; the
// job serves every sample all the same, and a job beside it with a good store keeps its store.
#include <catch2/catch.hpp>

#include <filesystem>
#include <string>
#include <sys/stat.h>

#include <nlohmann/json.hpp>

#include "batch_copy.hpp"
#include "daemon_fixture.hpp"
#include "stoker/stoker.hpp"

using namespace stoker::test;
using Json = nlohmann::json;
namespace fs = std::filesystem;

namespace {

JobSpec stored_job(const fs::path& store, const std::string& name) {
  JobSpec j;
  j.name = name;
  j.extra = "    decoded_store: {max_side: 64, path: \"" + store.string() + "\", bytes: 64MiB}\n";
  return j;
}

Json job_status(const std::string& socket, const std::string& name) {
  const Json st = Json::parse(daemon_status_text(socket));
  for (const auto& j : st["jobs"]) {
    if (j["name"] == name) return j;
  }
  FAIL("no job " << name << " in status");
  return {};
}

}  // namespace

TEST_CASE("decoded store: a store refused at start is off for its job, which serves every sample",
          "[integration][decoded_store][trust]") {
  TempDir dir;
  const fs::path open_dir = dir.path() / "open-store", good = dir.path() / "good-store";
  fs::create_directories(open_dir);
  ::chmod(open_dir.c_str(), 0777);  // anyone may write: refused
  const auto socket = (dir.path() / "s.sock").string();
  Daemon d(write_config(dir.path(), {stored_job(open_dir, "refused"), stored_job(good, "kept")}, 2), socket);
  for (const char* name : {"refused", "kept"}) {
    INFO(name);
    stoker::Client c(name, 0, at(socket));
    std::size_t samples = 0;
    for (const auto& b : take_epoch(c)) samples += b.ids.size();
    CHECK(samples == 64);  // tests/data/demo
  }
  const Json refused = job_status(socket, "refused");
  CHECK_FALSE(refused.contains("decoded_store"));
  REQUIRE(refused.contains("decoded_store_off"));
  CHECK_THAT(refused["decoded_store_off"].get<std::string>(),
             Catch::Contains(open_dir.string()) && Catch::Contains("mode 0777"));
  const Json kept = job_status(socket, "kept");
  CHECK(kept.contains("decoded_store"));
  CHECK_FALSE(kept.contains("decoded_store_off"));
  CHECK(fs::is_empty(open_dir));  // nothing was created in the refused folder
  INFO(d.log());
  CHECK(d.stop() == 0);
}

TEST_CASE("decoded store: entries are keyed by the decode limits - a job with a lower max_pixels is not served "
          "what a looser job stored",
          "[integration][decoded_store][trust]") {
  // Issue #34, B3: both jobs read tests/data/demo into one store folder with the same max_side.
  // "loose" stores every photo; "limited" refuses the photos above 136,097 pixels (about half
  // of them, 62,930-241,895 px each) and must go on refusing them after "loose" stored them.
  TempDir dir;
  const fs::path store = dir.path() / "store";
  const auto socket = (dir.path() / "s.sock").string();
  auto job = [&](const std::string& name, const std::string& decode) {
    JobSpec j = stored_job(store, name);
    j.on_error = "skip";
    j.pipeline_yaml = "    pipeline:\n      - decode: " + decode +
                      "\n      - resize: {size: 36}\n      - center_crop: {size: 32}\n"
                      "    output: {dtype: uint8, layout: NCHW}\n";
    return j;
  };
  Daemon d(write_config(dir.path(), {job("loose", "{}"), job("limited", "{max_pixels: 136097}")}, 2), socket);
  auto served = [&](const std::string& name) {
    stoker::Client c(name, 0, at(socket));
    std::size_t samples = 0;
    for (const auto& b : take_epoch(c)) samples += b.ids.size();
    return samples;
  };
  REQUIRE(served("loose") == 64);
  const std::size_t limited = served("limited");
  INFO(d.log());
  CHECK(limited > 0);
  CHECK(limited < 64);  // the large photos refused, not served from "loose"'s entries
  const Json st = job_status(socket, "limited");
  CHECK(st["quarantined"].get<std::uint64_t>() == 64 - limited);
  CHECK(d.stop() == 0);
}
