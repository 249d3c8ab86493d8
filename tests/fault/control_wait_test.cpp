// Fault tier: the control socket under slow loads and foreign PID namespaces (issue #24).
// A command whose answer takes long (a job definition scanning a slow dataset, a reload
// loading one) keeps its connection and gets its answer; reloads asked for while one loads
// are not lost; `stokerctl reload` reaches stokerd through the socket, never by the pid its
// status reports (which names another process across PID namespaces).
#include <catch2/catch.hpp>

#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <string>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "batch_copy.hpp"
#include "daemon_fixture.hpp"
#include "scoped_env.hpp"
#include "status_json.hpp"
#include "stoker/stoker.hpp"

using namespace stoker::test;
namespace fs = std::filesystem;
using Json = nlohmann::json;

namespace {


bool has_job(const Json& st, const std::string& name) {
  for (const auto& j : st["jobs"]) {
    if (j["name"] == name && j["state"] == "serving") return true;
  }
  return false;
}

// A file list of the demo images (relative to tests/data/demo) at `path`; the name carries
// "slowlist" so the slow-read shim delays exactly its reads.
void write_demo_list(const fs::path& path) {
  std::ofstream out(path);
  for (const auto& cls : fs::directory_iterator(data_dir() + "/demo")) {
    if (!cls.is_directory()) continue;
    for (const auto& f : fs::directory_iterator(cls.path())) {
      out << cls.path().filename().string() << "/" << f.path().filename().string() << "\n";
    }
  }
}

JobSpec slow_list_job(const std::string& name, const fs::path& list) {
  JobSpec j;
  j.name = name;
  j.batch_size = 4;
  j.prefetch = 2;
  j.source = "{type: filelist, list: \"" + list.string() + "\", root: \"" + data_dir() + "/demo\"}";
  return j;
}

JobSpec plain_job(const std::string& name) {
  JobSpec j;
  j.name = name;
  j.batch_size = 4;
  j.prefetch = 2;
  return j;
}

// True once process `pid` holds a descriptor whose target contains `part` (it is inside the
// slow read of that file).
bool eventually_opens(int pid, const std::string& part, double seconds = 60) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < end) {
    std::error_code ec;
    for (const auto& e : fs::directory_iterator("/proc/" + std::to_string(pid) + "/fd", ec)) {
      std::error_code lec;
      if (fs::read_symlink(e.path(), lec).string().find(part) != std::string::npos) return true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

std::size_t occurrences(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (auto at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

}  // namespace

TEST_CASE("a job definition whose scan outlasts idle_timeout_s is answered, not cut off", "[fault][control]") {
  TempDir dir;
  const auto socket = (dir.path() / "s.sock").string();
  const fs::path list = dir.path() / "slowlist.txt";
  write_demo_list(list);
  std::unique_ptr<Daemon> d;
  {
    ScopedEnvironment env;
    env.preload(STOKER_SLOW_READ_LIB);
    env.set("STOKER_SLOW_READ", "slowlist:3000000");  // each read of the list: 3 s
    d = std::make_unique<Daemon>(write_config(dir.path(), {plain_job("base")}, 2, "  idle_timeout_s: 0.5\n"), socket);
  }
  const std::string body = "jobs:\n  mine:\n    source: {type: filelist, list: \"" + list.string() + "\", root: \"" +
                           data_dir() + "/demo\"}\n    batch_size: 4\n    shuffle: false\n    pipeline:\n"
                           "      - decode: {}\n      - resize: {size: 16}\n      - center_crop: {size: 16}\n";
  const std::string request = Json{{"op", "define_job"}, {"config", body}}.dump();
  const auto t0 = std::chrono::steady_clock::now();
  char* reply = nullptr;
  const stoker_status st = stoker_daemon_command(socket.c_str(), request.c_str(), 120000, &reply);
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  INFO(d->log());
  REQUIRE(st == STOKER_OK);  // on the old daemon: disconnected after idle_timeout_s
  const Json r = Json::parse(reply);
  stoker_free(reply);
  // The scan really outlasted the idle timeout (the shim sleeps 3 s in the list's read).
  CHECK(waited > 0.5);
  REQUIRE(r["ok"] == true);
  CHECK(r["created"] == true);
  // The job was kept and serves.
  stoker::Client c(r["job"].get<std::string>(), 0, at(socket));
  CHECK(c.next(20000).count() == 4);
}

TEST_CASE("stokerctl reload reaches stokerd through the socket when status names another process's pid",
          "[fault][control]") {
  TempDir dir;
  const auto socket = (dir.path() / "s.sock").string();
  // A process that a SIGHUP would kill: stokerd reports its pid as its own, as stokerd in
  // another PID namespace reports a number that is some other process out here.
  const int bystander = start_program({"/bin/sleep", "600"}, dir.path() / "sleep.log");
  REQUIRE(bystander > 0);
  struct Reaper {
    int pid;
    ~Reaper() {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
    }
  } reaper{bystander};
  const fs::path config = write_config(dir.path(), {plain_job("base")}, 2);
  std::unique_ptr<Daemon> d;
  {
    ScopedEnvironment env;
    env.preload(STOKER_FAKE_PID_LIB);
    env.set("STOKER_FAKE_PID", std::to_string(bystander));
    d = std::make_unique<Daemon>(config, socket);
  }
  REQUIRE(status_json(socket)["pid"] == bystander);  // the premise: status names the bystander

  write_config(dir.path(), {plain_job("base"), plain_job("fresh")}, 2);
  std::string out;
  const int rc = run_program({bin("stokerctl"), "reload", "--socket", socket}, out);
  INFO(out << "\n" << d->log());
  CHECK(rc == 0);
  CHECK_THAT(out, Catch::Contains("1 job(s) added"));
  // The bystander is untouched and the daemon did reload.
  CHECK(::waitpid(bystander, nullptr, WNOHANG) == 0);
  CHECK(::kill(bystander, 0) == 0);
  CHECK(has_job(status_json(socket), "fresh"));
}

TEST_CASE("reloads asked for while one loads are queued as one, so the last edit applies", "[fault][control]") {
  TempDir dir;
  const auto socket = (dir.path() / "s.sock").string();
  const fs::path list = dir.path() / "slowlist.txt";
  const fs::path gate = dir.path() / "gate";  // the list's reads wait until it exists
  write_demo_list(list);
  const fs::path config = write_config(dir.path(), {plain_job("base")}, 2);
  std::unique_ptr<Daemon> d;
  {
    ScopedEnvironment env;
    env.preload(STOKER_SLOW_READ_LIB);
    env.set("STOKER_SLOW_READ", "slowlist:1000");
    env.set("STOKER_SLOW_READ_GATE", gate.string());
    d = std::make_unique<Daemon>(config, socket);
  }
  // First edit: a job whose list loads slowly. While that reload is held inside the list's
  // read (so it has read the config), the second edit is written and asked for three times.
  write_config(dir.path(), {plain_job("base"), slow_list_job("slow", list)}, 2);
  REQUIRE(::kill(d->pid(), SIGHUP) == 0);
  REQUIRE(eventually_opens(d->pid(), "slowlist"));
  write_config(dir.path(), {plain_job("base"), slow_list_job("slow", list), plain_job("third")}, 2);
  // (Signals pending together are one: each SIGHUP is sent once the previous one is seen.)
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  auto wait_for_requests = [&](std::size_t n) {
    while (occurrences(d->log(), "while one is loading") < n && std::chrono::steady_clock::now() < end) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  };
  REQUIRE(::kill(d->pid(), SIGHUP) == 0);
  wait_for_requests(1);
  REQUIRE(::kill(d->pid(), SIGHUP) == 0);
  wait_for_requests(2);
  const int ctl = start_program({bin("stokerctl"), "reload", "--socket", socket}, dir.path() / "ctl.log");
  wait_for_requests(3);  // stokerctl's request has arrived
  std::ofstream(gate) << "open\n";  // the first reload's load ends
  const int rc = wait_program(ctl, 120);
  std::ifstream log(dir.path() / "ctl.log");
  const std::string out((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>());
  INFO(out << "\n" << d->log());
  CHECK(occurrences(d->log(), "while one is loading") == 3);
  // stokerctl is answered by the queued reload: it read the second edit, in which only
  // `third` is new (`slow` came with the first and is unchanged).
  CHECK(rc == 0);
  CHECK_THAT(out, Catch::Contains("1 job(s) added, 0 restarted, 0 removed, 2 unchanged"));
  const Json st = status_json(socket);
  CHECK(has_job(st, "slow"));
  CHECK(has_job(st, "third"));
  // Four requests, two reloads: the three that came during the first were one, none is left.
  CHECK(st["reload"]["state"] == "idle");
  CHECK(occurrences(d->log(), "applied: ") == 2);
}
