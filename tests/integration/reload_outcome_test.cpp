// Integration tier: what a reload did and what each job is, seen from stokerctl (issue #24).
// `stokerctl reload` reports the outcome (exit 1 and the refusal with FILE:LINE when the new
// config is refused), `stokerctl status` shows the last reload's result and every job's
// definition as YAML, config-file jobs and client-defined ones alike.
#include <catch2/catch.hpp>

#include <csignal>
#include <fstream>
#include <grp.h>
#include <sys/wait.h>
#include <unistd.h>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "as_nobody.hpp"
#include "batch_copy.hpp"
#include "daemon_fixture.hpp"
#include "status_json.hpp"
#include "stoker/stoker.hpp"

using namespace stoker::test;

namespace {

const Json* find_job(const Json& st, const std::string& name) {
  for (const auto& j : st["jobs"]) {
    if (j["name"] == name) return &j;
  }
  return nullptr;
}

JobSpec spec(const std::string& name, int batch) {
  JobSpec j;
  j.name = name;
  j.batch_size = batch;
  j.prefetch = 2;
  return j;
}

}  // namespace

TEST_CASE("stokerctl reload exits 1 naming the file and line of a refused config, and status shows each reload's outcome",
          "[integration][reload]") {
  TempDir dir;
  const auto socket = (dir.path() / "s.sock").string();
  const auto config = write_config(dir.path(), {spec("keep", 4)}, 2);
  Daemon d(config, socket);
  CHECK(status_json(socket)["reload"]["last"].is_null());  // none yet
  CHECK(status_json(socket)["reload"]["config"] == config.string());

  std::ofstream(config) << "jobs:\n  keep:\n    source: {root: \"" + data_dir() + "/demo\"}\n    batch_size: -3\n";
  std::string out;
  CHECK(run_program({bin("stokerctl"), "reload", "--socket", socket}, out) == 1);
  CHECK_THAT(out, Catch::Contains("stokerctl reload: reload refused, the running jobs keep serving: " + config.string() +
                                  ":4:") &&
                      Catch::Contains("jobs.keep.batch_size"));
  Json last = status_json(socket)["reload"]["last"];
  CHECK(last["ok"] == false);
  CHECK(last["result"] == "refused");
  CHECK_THAT(last["message"].get<std::string>(), Catch::Contains(config.string() + ":4:"));
  CHECK_THAT(last["requested_by"].get<std::string>(), Catch::StartsWith("pid "));
  CHECK_THAT(last["at"].get<std::string>(), Catch::Matches("[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:]{8}Z"));
  CHECK(find_job(status_json(socket), "keep") != nullptr);  // still serving

  // Fixed: applied, said so, exit 0.
  write_config(dir.path(), {spec("keep", 4), spec("fresh", 4)}, 2);
  CHECK(run_program({bin("stokerctl"), "reload", "--socket", socket}, out) == 0);
  CHECK_THAT(out, Catch::Contains("reload of " + config.string() + " applied: 1 job(s) added, 0 restarted, 0 removed, 1 unchanged"));
  last = status_json(socket)["reload"]["last"];
  CHECK(last["ok"] == true);
  CHECK(last["result"] == "applied");
  CHECK(find_job(status_json(socket), "fresh") != nullptr);

  // A SIGHUP's outcome lands in status too (no one is waiting to be told).
  write_config(dir.path(), {spec("keep", 4)}, 2);
  REQUIRE(::kill(d.pid(), SIGHUP) == 0);
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (status_json(socket)["reload"]["last"]["requested_by"] != "SIGHUP" && std::chrono::steady_clock::now() < end) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  last = status_json(socket)["reload"]["last"];
  CHECK(last["requested_by"] == "SIGHUP");
  CHECK_THAT(last["message"].get<std::string>(), Catch::Contains("1 removed"));
  CHECK(status_json(socket)["reload"]["state"] == "idle");
}

TEST_CASE("status shows every job's definition as YAML, client-defined jobs included", "[integration][reload]") {
  TempDir dir;
  const auto socket = (dir.path() / "s.sock").string();
  JobSpec mixed = spec("mixed", 4);
  mixed.extra = "    mixup: {alpha: 0.4}\n    cutmix: {alpha: 1.0}\n    mix_switch_prob: 0.25\n";
  Daemon d(write_config(dir.path(), {mixed}, 2), socket);

  // A job a client defines (what stoker.Loader.from_folder sends).
  const std::string body = "jobs:\n  mine:\n    source: {type: imagefolder, root: \"" + data_dir() + "/demo\"}\n"
                           "    batch_size: 5\n    shuffle: false\n    pipeline:\n      - decode: {}\n"
                           "      - resize: {size: 18}\n      - center_crop: {size: 16}\n    mixup: {alpha: 0.3}\n";
  char* reply = nullptr;
  REQUIRE(stoker_daemon_command(socket.c_str(), Json{{"op", "define_job"}, {"config", body}}.dump().c_str(), 60000,
                                &reply) == STOKER_OK);
  const Json r = Json::parse(reply);
  stoker_free(reply);
  REQUIRE(r["ok"] == true);
  const std::string client_job = r["job"];

  const Json st = status_json(socket);
  const Json* m = find_job(st, "mixed");
  REQUIRE(m != nullptr);
  const std::string mdef = (*m)["definition"];
  CHECK_THAT(mdef, Catch::Contains("random_resized_crop") && Catch::Contains("mixup") && Catch::Contains("0.4") &&
                       Catch::Contains("cutmix") && Catch::Contains("mix_switch_prob: 0.25"));
  CHECK((*m)["mix"]["mixup_alpha"] == 0.4);
  CHECK((*m)["mix"]["cutmix_alpha"] == 1.0);
  CHECK((*m)["mix"]["switch_prob"] == 0.25);

  const Json* c = find_job(st, client_job);
  REQUIRE(c != nullptr);
  CHECK((*c)["defined_by_client"] == true);
  const std::string cdef = (*c)["definition"];
  CHECK_THAT(cdef, Catch::Contains("batch_size: 5") && Catch::Contains("center_crop") && Catch::Contains("size: 18") &&
                       Catch::Contains("mixup") && Catch::Contains("0.3"));
  CHECK((*c)["mix"]["mixup_alpha"] == 0.3);

  // stokerctl status prints the same (a JSON document; the definition is a YAML string in it).
  std::string out;
  REQUIRE(run_program({bin("stokerctl"), "status", "--socket", socket}, out) == 0);
  const Json printed = Json::parse(out);
  REQUIRE(find_job(printed, client_job) != nullptr);
  CHECK((*find_job(printed, client_job))["definition"] == cdef);
}

TEST_CASE("a reload command from a user other than stokerd's or root is refused", "[integration][reload]") {
  if (::geteuid() != 0) {
    WARN("not run: needs root to connect as another uid");
    return;
  }
  const group* g = nullptr;
  for (const char* n : {"users", "staff", "daemon", "sys", "adm"}) {
    if ((g = ::getgrnam(n)) != nullptr && g->gr_gid != 0) break;
  }
  if (g == nullptr) {
    WARN("not run: no group users/staff/daemon/sys/adm here");
    return;
  }
  const gid_t gid = g->gr_gid;
  TempDir dir;
  const auto socket = (dir.path() / "s.sock").string();
  const auto config = write_config(dir.path(), {spec("keep", 4)}, 1, std::string("  group: ") + g->gr_name + "\n");
  Daemon d(config, socket);
  write_config(dir.path(), {spec("keep", 4), spec("fresh", 4)}, 1, std::string("  group: ") + g->gr_name + "\n");
  // A member of server.group (uid 65534) may connect, but not reload the daemon's config.
  const std::string text = stoker::test::in_child_as_nobody({gid}, [&] {
    char* reply = nullptr;
    const int rc = stoker_daemon_command(socket.c_str(), "{\"op\": \"reload\"}", 30000, &reply);
    return rc == 0 ? std::string(reply) : std::string("error: ") + stoker_last_error();
  }, 30);
  INFO(text << "\n" << d.log());
  const Json r = Json::parse(text);
  CHECK(r["ok"] == false);
  CHECK_THAT(r["error"].get<std::string>(), Catch::Contains("only stokerd's own user") && Catch::Contains("may reload"));
  CHECK(status_json(socket)["reload"]["last"].is_null());  // nothing was reloaded
  CHECK(find_job(status_json(socket), "fresh") == nullptr);
}
