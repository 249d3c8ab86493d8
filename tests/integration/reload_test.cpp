// Integration tier: jobs coming and going while stokerd runs (issue #11: SIGHUP reload,
// `stokerctl drain`; issue #9: jobs a client defines). Consumers of jobs a reload does not
// touch must see no gap; consumers of drained jobs get what was planned and are then told.
#include <catch2/catch.hpp>

#include <chrono>
#include <csignal>
#include <fstream>
#include <memory>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "batch_copy.hpp"
#include "daemon_fixture.hpp"
#include "status_json.hpp"
#include "stoker/stoker.hpp"

using namespace stoker::test;

namespace {

// The job's status entries of that name (a draining one and its restarted successor may both be there).
std::vector<Json> job_entries(const Json& st, const std::string& name) {
  std::vector<Json> out;
  for (const auto& j : st["jobs"]) {
    if (j["name"] == name) out.push_back(j);
  }
  return out;
}

// Polls `pred(status)` for up to `seconds`.
template <class Pred>
bool eventually(const std::string& socket, Pred pred, double seconds = 20) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < end) {
    if (pred(status_json(socket))) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return false;
}

// Takes batches until the daemon ends the connection; returns how many came and the error.
std::pair<int, std::string> take_until_dropped(stoker::Client& c, int most = 1000) {
  int n = 0;
  try {
    for (; n < most; ++n) c.next(20000);
  } catch (const stoker::Error& e) {
    return {n, e.what()};
  }
  return {n, ""};
}

std::string command_text(const std::string& socket, const std::string& text) {
  char* reply = nullptr;
  if (stoker_daemon_command(socket.c_str(), text.c_str(), 60000, &reply) != STOKER_OK) {
    throw std::runtime_error(stoker_last_error());
  }
  std::string out(reply);
  stoker_free(reply);
  return out;
}

std::string command(const std::string& socket, const Json& request) { return command_text(socket, request.dump()); }

JobSpec spec(const std::string& name, int batch) {
  JobSpec j;
  j.name = name;
  j.batch_size = batch;
  j.prefetch = 2;
  return j;
}

}  // namespace

TEST_CASE("SIGHUP adds a new job, restarts a changed one, drains a removed one, leaves the rest alone",
          "[integration][reload]") {
  TempDir dir;
  const auto socket = (dir.path() / "s.sock").string();
  const auto config = write_config(dir.path(), {spec("keep", 4), spec("change", 4), spec("gone", 4)}, 2);
  Daemon d(config, socket);

  stoker::Client keep("keep", 0, at(socket));
  stoker::Client change("change", 0, at(socket));
  stoker::Client gone("gone", 0, at(socket));
  std::uint64_t next_keep = 0;
  for (int i = 0; i < 3; ++i) {
    stoker::Batch b = keep.next(20000);
    CHECK(b.index() == next_keep);
    next_keep = b.last_in_epoch() ? 0 : b.index() + 1;
  }
  { stoker::Batch b = change.next(20000); }
  { stoker::Batch b = gone.next(20000); }

  // keep: the same text; change: another batch size; gone: removed; fresh: new.
  write_config(dir.path(), {spec("keep", 4), spec("change", 2), spec("fresh", 4)}, 2);
  REQUIRE(::kill(d.pid(), SIGHUP) == 0);
  REQUIRE(eventually(socket, [](const Json& st) {
    for (const auto& j : st["jobs"]) {
      if (j["name"] == "fresh") return true;
    }
    return false;
  }));

  // The unchanged job's consumer goes on in order, with no error and no restart of its stream.
  for (int i = 0; i < 12; ++i) {
    stoker::Batch b = keep.next(20000);
    CHECK(b.index() == next_keep);
    next_keep = b.last_in_epoch() ? 0 : b.index() + 1;
  }
  // The removed job's consumer gets at most what was planned (its ring: 2 slots), then is told.
  const auto [gone_n, gone_why] = take_until_dropped(gone);
  CHECK(gone_n <= 2);
  CHECK_THAT(gone_why, Catch::Contains("job 'gone' was drained") && Catch::Contains("removed from the config"));
  const auto [change_n, change_why] = take_until_dropped(change);
  CHECK(change_n <= 2);
  CHECK_THAT(change_why, Catch::Contains("changed in the config"));

  // The changed job restarted with its new definition; the new job serves.
  stoker::Client change2("change", 0, at(socket));
  CHECK(change2.next(20000).count() == 2);
  stoker::Client fresh("fresh", 0, at(socket));
  CHECK(fresh.next(20000).count() == 4);
  // Once their consumers are gone, the drained jobs are removed: status lists each name once.
  REQUIRE(eventually(socket, [](const Json& st) {
    return job_entries(st, "gone").empty() && job_entries(st, "change").size() == 1;
  }));
  const Json st = status_json(socket);
  CHECK(job_entries(st, "change")[0]["state"] == "serving");
  CHECK(job_entries(st, "change")[0]["batch_size"] == 2);
  CHECK_THAT(d.log(), Catch::Contains("1 job(s) added, 1 restarted, 1 removed, 1 unchanged"));
}

TEST_CASE("a bad config on SIGHUP is refused with file and line, and every job keeps serving",
          "[integration][reload]") {
  TempDir dir;
  const auto socket = (dir.path() / "s.sock").string();
  const auto config = write_config(dir.path(), {spec("keep", 4)}, 2);
  Daemon d(config, socket);
  stoker::Client keep("keep", 0, at(socket));
  std::uint64_t next = 0;
  { stoker::Batch b = keep.next(20000); next = b.index() + 1; }

  std::ofstream(config) << "jobs:\n  keep:\n    source: {root: \"" + data_dir() + "/demo\"}\n    batch_size: -3\n";
  REQUIRE(::kill(d.pid(), SIGHUP) == 0);
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (d.log().find("reload refused") == std::string::npos && std::chrono::steady_clock::now() < end) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  CHECK_THAT(d.log(), Catch::Contains("reload refused, the running jobs keep serving: " + config.string() + ":4:") &&
                          Catch::Contains("jobs.keep.batch_size"));
  for (int i = 0; i < 6; ++i) {
    stoker::Batch b = keep.next(20000);
    CHECK(b.index() == next);
    next = b.last_in_epoch() ? 0 : b.index() + 1;
  }
  CHECK(job_entries(status_json(socket), "keep")[0]["state"] == "serving");
}

TEST_CASE("stokerctl drain ends a job after the batches already planned, and refuses an unknown job",
          "[integration][reload]") {
  TempDir dir;
  const auto socket = (dir.path() / "s.sock").string();
  Daemon d(write_config(dir.path(), {spec("a", 4), spec("b", 4)}, 2), socket);
  stoker::Client a("a", 0, at(socket));
  stoker::Client b("b", 0, at(socket));
  { stoker::Batch x = a.next(20000); }

  std::string out;
  REQUIRE(run_program({bin("stokerctl"), "drain", "a", "--socket", socket}, out) == 0);
  CHECK_THAT(out, Catch::Contains("job a draining: 1 consumer(s)"));
  const auto [n, why] = take_until_dropped(a);
  CHECK(n <= 2);
  CHECK_THAT(why, Catch::Contains("drained by stokerctl drain"));
  // A new consumer of a drained job is refused while it drains, or finds it gone.
  try {
    stoker::Client again("a", 0, at(socket));
    FAIL("a consumer attached to a drained job");
  } catch (const stoker::Error& e) {
    // Draining: told so (drained); already removed: an unknown job.
    CHECK((e.status() == STOKER_ERR_DISCONNECTED || e.status() == STOKER_ERR_REFUSED));
  }
  REQUIRE(eventually(socket, [](const Json& st) { return job_entries(st, "a").empty(); }));
  // The other job never noticed.
  for (int i = 0; i < 4; ++i) CHECK(b.next(20000).count() == 4);

  CHECK(run_program({bin("stokerctl"), "drain", "--help"}, out) == 0);
  CHECK_THAT(out, Catch::Contains("usage: stokerctl drain JOB"));
  CHECK(run_program({bin("stokerctl"), "drain", "nosuch", "--socket", socket}, out) == 1);
  CHECK_THAT(out, Catch::Contains("no serving job 'nosuch'; jobs: b"));
}

TEST_CASE("a job defined by clients is shared by definition, validated like the YAML, removed when unused",
          "[integration][reload]") {
  TempDir dir;
  const auto socket = (dir.path() / "s.sock").string();
  Daemon d(write_config(dir.path(), {spec("base", 4)}, 2, "  client_job_linger_s: 1\n"), socket);
  const std::string body = "jobs:\n  mine:\n    source: {type: imagefolder, root: \"" + data_dir() + "/demo\"}\n"
                           "    batch_size: 5\n    shuffle: false\n    pipeline:\n      - decode: {}\n"
                           "      - resize: {size: 16}\n      - center_crop: {size: 16}\n";
  const Json r1 = Json::parse(command(socket, {{"op", "define_job"}, {"config", body}}));
  REQUIRE(r1["ok"] == true);
  CHECK(r1["created"] == true);
  const std::string name = r1["job"];
  CHECK_THAT(name, Catch::StartsWith("py-"));
  const Json r2 = Json::parse(command(socket, {{"op", "define_job"}, {"config", body}}));
  CHECK(r2["job"] == name);
  CHECK(r2["created"] == false);

  auto c = std::make_unique<stoker::Client>(name, 0, at(socket));
  stoker::Batch b = c->next(20000);
  CHECK(b.count() == 5);
  CHECK(b.ids()[0] == 0);  // shuffle: false
  const Json st = status_json(socket);
  REQUIRE(job_entries(st, name).size() == 1);
  CHECK(job_entries(st, name)[0]["defined_by_client"] == true);

  // Same validation and texts as a config file, with where it came from.
  std::string bad = body;
  bad.replace(bad.find("batch_size: 5"), 13, "batch_size: 0");
  const Json r3 = Json::parse(command(socket, {{"op", "define_job"}, {"config", bad}}));
  CHECK(r3["ok"] == false);
  CHECK_THAT(r3["error"].get<std::string>(),
             Catch::Contains("<job defined by client pid") && Catch::Contains(":4:") && Catch::Contains("jobs.mine.batch_size"));
  const Json r4 = Json::parse(command(socket, {{"op", "define_job"}, {"config", "server: {workers: 1}\n" + body}}));
  CHECK(r4["ok"] == false);
  CHECK_THAT(r4["error"].get<std::string>(), Catch::Contains("cannot set server keys"));

  // Unused for client_job_linger_s (1 s) after its consumer leaves: removed.
  b = stoker::Batch();
  c.reset();
  REQUIRE(eventually(socket, [&](const Json& s) { return job_entries(s, name).empty(); }));
  CHECK_THAT(d.log(), Catch::Contains("client-defined job unused for 1 s"));
}

TEST_CASE("malformed commands get a clear refusal and the daemon keeps serving", "[integration][reload]") {
  TempDir dir;
  const auto socket = (dir.path() / "s.sock").string();
  Daemon d(write_config(dir.path(), {spec("a", 4)}, 2), socket);
  auto refusal = [&](const std::string& text) {
    const Json r = Json::parse(command_text(socket, text));
    CHECK(r["ok"] == false);
    return r["error"].get<std::string>();
  };
  CHECK_THAT(refusal("not json {"), Catch::Contains("a command is a JSON object with a string \"op\""));
  CHECK_THAT(refusal("{\"op\": 5}"), Catch::Contains("string \"op\""));
  CHECK_THAT(refusal("{\"op\": \"explode\"}"), Catch::Contains("unknown command \"explode\" (known: define_job, drain, prepare, reload, samples)"));
  CHECK_THAT(refusal("{\"op\": \"define_job\"}"), Catch::Contains("needs \"config\""));
  CHECK_THAT(refusal("{\"op\": \"define_job\", \"config\": \"jobs: [\"}"), Catch::Contains("<job defined by client"));
  CHECK_THAT(refusal("{\"op\": \"samples\", \"job\": \"nosuch\"}"), Catch::Contains("no serving job 'nosuch'"));
  // Still serving, and the samples page of the real job is its list.
  const Json page = Json::parse(command(socket, {{"op", "samples"}, {"job", "a"}, {"offset", 60}, {"count", 10}}));
  CHECK(page["total"] == 64);
  CHECK(page["samples"].size() == 4);
  stoker::Client c("a", 0, at(socket));
  CHECK(c.next(20000).count() == 4);
}

TEST_CASE("a stokerd with jobs: {} starts and serves a job a client defines", "[integration][reload]") {
  TempDir dir;
  const auto socket = (dir.path() / "s.sock").string();
  // The shipped configs/client-jobs.yaml, with the test's own socket and two workers.
  const auto config = dir.path() / "client-jobs.yaml";
  std::ofstream(config) << "server: {workers: 2}\njobs: {}\n";
  Daemon d(config, socket);
  CHECK(status_json(socket)["jobs"].empty());
  const std::string body = "jobs:\n  mine:\n    source: {type: imagefolder, root: \"" + data_dir() + "/demo\"}\n"
                           "    batch_size: 6\n    shuffle: false\n    pipeline:\n      - decode: {}\n"
                           "      - resize: {size: 16}\n      - center_crop: {size: 16}\n";
  const Json r = Json::parse(command(socket, {{"op", "define_job"}, {"config", body}}));
  REQUIRE(r["ok"] == true);
  const std::string name = r["job"];
  stoker::Client c(name, 0, at(socket));
  for (int i = 0; i < 3; ++i) {
    stoker::Batch b = c.next(20000);
    CHECK(b.count() == 6);
    CHECK(b.ids()[0] == 6 * i);  // shuffle: false: dataset order
  }
}
