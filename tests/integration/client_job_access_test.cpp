// Client-defined jobs (the define_job command) against a real stokerd, as a deliberate attack
// tried them (issue 24, C1 and C2): a client must not choose where stokerd writes, must not
// read stokerd's environment, must read only what its own user could (checked here as uid
// 65534 in a forked child, as root only: exits 77 otherwise), file names must not inject lines
// into the quarantine file, and concurrent definitions must not overshoot the caps.
#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <grp.h>
#include <sstream>
#include <string>
#include <sys/stat.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>
#include <vector>

#include <nlohmann/json.hpp>

#include "as_nobody.hpp"
#include "batch_copy.hpp"
#include "daemon_fixture.hpp"
#include "stoker/stoker.h"
#include "stoker/stoker.hpp"

using namespace stoker::test;
using Json = nlohmann::json;
namespace fs = std::filesystem;

namespace {

constexpr uid_t kNobody = 65534;

Json command(const std::string& socket, const Json& request) {
  char* reply = nullptr;
  if (stoker_daemon_command(socket.c_str(), request.dump().c_str(), 60000, &reply) != STOKER_OK) {
    return Json{{"ok", false}, {"error", std::string("command failed: ") + stoker_last_error()}};
  }
  Json out = Json::parse(reply);
  stoker_free(reply);
  return out;
}

Json define(const std::string& socket, const std::string& body) {
  return command(socket, {{"op", "define_job"}, {"config", body}});
}

// A job definition as Loader.from_folder sends one; `source` is the YAML mapping of its source.
std::string job_body(const std::string& source, const std::string& extra = "") {
  return "jobs:\n  mine:\n    source: " + source + "\n    batch_size: 4\n    shuffle: false\n" + extra +
         "    pipeline:\n      - decode: {}\n      - resize: {size: 16}\n      - center_crop: {size: 16}\n";
}

std::string folder(const fs::path& root) { return "{type: imagefolder, root: \"" + root.string() + "\"}"; }

// Copies `n` of the demo's flower photos into `dir` (created) as NAME_i.jpg.
void put_images(const fs::path& dir, const std::string& name, int n) {
  fs::create_directories(dir);
  for (int i = 0; i < n; ++i) {
    char src[64];
    std::snprintf(src, sizeof src, "flower/flower_%02d.jpg", i);
    fs::copy_file(fs::path(data_dir()) / "demo" / src, dir / (name + "_" + std::to_string(i) + ".jpg"),
                  fs::copy_options::overwrite_existing);
  }
}

// A command sent from a forked child running as uid/gid 65534, member of `gid`.
Json command_as_nobody(const std::string& socket, gid_t gid, const Json& request) {
  return Json::parse(stoker::test::in_child_as_nobody({gid}, [&] {
    char* reply = nullptr;
    const int rc = stoker_daemon_command(socket.c_str(), request.dump().c_str(), 60000, &reply);
    return rc == STOKER_OK ? std::string(reply)
                           : Json{{"ok", false}, {"error", std::string("command failed: ") + stoker_last_error()}}.dump();
  }));
}

std::size_t client_jobs_in_status(const std::string& socket) {
  const Json st = Json::parse(daemon_status_text(socket));
  std::size_t n = 0;
  for (const auto& j : st["jobs"]) n += j.value("defined_by_client", false) ? 1 : 0;
  return n;
}

}  // namespace

TEST_CASE("a client-defined job cannot choose where stokerd writes nor read stokerd's environment",
          "[integration][client-jobs]") {
  TempDir dir;
  const auto socket = (dir.path() / "s.sock").string();
  // Whatever the daemon's environment holds must not reach a client: a made-up secret.
  ::setenv("STOKER_TEST_SECRET_PATH", "/nonexistent-secret-value-4711", 1);
  Daemon d(write_config(dir.path(), {JobSpec{}}, 1, "  state_dir: " + (dir.path() / "state").string() + "\n"), socket);
  ::unsetenv("STOKER_TEST_SECRET_PATH");
  const std::string demo = folder(fs::path(data_dir()) / "demo");

  const fs::path target = dir.path() / "chosen-by-client.quarantine";
  const Json q = define(socket, job_body(demo, "    quarantine: \"" + target.string() + "\"\n"));
  CHECK(q["ok"] == false);
  CHECK_THAT(q.value("error", ""), Catch::Contains("jobs.mine.quarantine") &&
                                       Catch::Contains("cannot choose its quarantine file"));
  CHECK_FALSE(fs::exists(target));

  const Json env = define(socket, job_body("{type: imagefolder, root: \"${STOKER_TEST_SECRET_PATH}/demo\"}"));
  CHECK(env["ok"] == false);
  CHECK_THAT(env.value("error", ""), Catch::Contains("jobs.mine.source.root") && Catch::Contains("cannot use ${"));
  CHECK_THAT(env.value("error", ""), !Catch::Contains("nonexistent-secret-value-4711"));

  // The same definition without them is served, its quarantine under the server's state_dir.
  const Json ok = define(socket, job_body(demo));
  REQUIRE(ok["ok"] == true);
}

TEST_CASE("a file name holding a newline and a tab is one escaped line of the quarantine file",
          "[integration][client-jobs]") {
  TempDir dir;
  const auto socket = (dir.path() / "s.sock").string();
  const fs::path data = dir.path() / "data";
  put_images(data / "a", "good", 3);
  put_images(data / "b", "good", 3);
  const std::string evil = "bad\nroot::0:0:injected::\tx.jpg";  // an /etc/passwd line, were it one
  { std::ofstream(data / "a" / evil) << "these bytes are no image"; }
  JobSpec j;
  j.name = "q";
  j.root = data.string();
  j.batch_size = 7;
  j.shuffle = false;
  const fs::path state = dir.path() / "state";
  Daemon d(write_config(dir.path(), {j}, 1, "  state_dir: " + state.string() + "\n"), socket);
  stoker::Client c("q", 0, at(socket));
  c.next(20000);  // the corrupt file is decoded (and skipped) while this batch is made

  std::string text;
  for (int i = 0; i < 200 && text.find("injected") == std::string::npos; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    for (const auto& f : quarantine_files(state, "q")) {
      std::ifstream in(f);
      std::stringstream ss;
      ss << in.rdbuf();
      text = ss.str();
    }
  }
  REQUIRE_THAT(text, Catch::Contains("injected"));
  std::vector<std::string> lines;
  for (std::size_t at = 0; at < text.size();) {
    const std::size_t nl = std::min(text.find('\n', at), text.size());
    lines.push_back(text.substr(at, nl - at));
    at = nl + 1;
  }
  REQUIRE(lines.size() == 1);  // no line of the file comes from the name
  CHECK_THAT(lines[0], Catch::StartsWith((data / "a").string() + "/bad\\nroot::0:0:injected::\\tx.jpg\t"));
  CHECK(std::count(lines[0].begin(), lines[0].end(), '\t') == 4);  // path, kind, reason, size, mtime
}

TEST_CASE("another user's client-defined job reads only what that user could read", "[integration][client-jobs]") {
  skip_unless_root("define jobs as another uid");
  const group* g = some_group();
  TempDir dir;
  const auto socket = (dir.path() / "s.sock").string();
  TempDir data_dir_holder;
  const fs::path data = data_dir_holder.path();
  ::chmod(data.c_str(), 0755);
  put_images(data / "pub" / "a", "open", 2);
  put_images(data / "pub" / "b", "open", 2);
  put_images(data / "priv" / "secret_class", "secret_name", 2);
  ::chmod((data / "priv").c_str(), 0700);
  put_images(data / "mixed" / "open_class", "open", 2);
  put_images(data / "mixed" / "hidden_class" / "deeper", "hidden_name", 2);
  ::chmod((data / "mixed" / "hidden_class").c_str(), 0700);
  { std::ofstream(data / "list.txt") << "/x/secret-line-1.jpg,0\n/x/secret-line-2.jpg,1\n"; }
  ::chmod((data / "list.txt").c_str(), 0600);
  for (const auto& e : fs::recursive_directory_iterator(data / "pub")) ::chmod(e.path().c_str(), e.is_directory() ? 0755 : 0644);

  Daemon d(write_config(dir.path(), {JobSpec{}}, 1,
                        std::string("  group: ") + g->gr_name + "\n  client_jobs_for_group: true\n  state_dir: " +
                            (dir.path() / "state").string() + "\n"),
           socket);
  auto as_nobody = [&](const std::string& body) {
    return command_as_nobody(socket, g->gr_gid, {{"op", "define_job"}, {"config", body}});
  };

  // What the user can read is served (the check is no blanket refusal).
  const Json pub = as_nobody(job_body(folder(data / "pub")));
  REQUIRE(pub["ok"] == true);

  // A root-only folder: refused, and the refusal lists nothing inside it.
  const Json priv = as_nobody(job_body(folder(data / "priv")));
  CHECK(priv["ok"] == false);
  CHECK_THAT(priv.value("error", ""), Catch::Contains("not readable by uid 65534") && !Catch::Contains("secret_class") &&
                                          !Catch::Contains("secret_name"));

  // A readable root with a root-only folder below it: refused at that folder, nothing of it listed.
  const Json mixed = as_nobody(job_body(folder(data / "mixed")));
  CHECK(mixed["ok"] == false);
  CHECK_THAT(mixed.value("error", ""), Catch::Contains("hidden_class") && Catch::Contains("not readable by uid 65534") &&
                                           !Catch::Contains("deeper") && !Catch::Contains("hidden_name"));

  // A root-only file list: refused, none of its lines disclosed (there is no job to ask `samples` of).
  const Json list = as_nobody(job_body("{type: filelist, list: \"" + (data / "list.txt").string() + "\"}"));
  CHECK(list["ok"] == false);
  CHECK_THAT(list.value("error", ""), Catch::Contains("not readable by uid 65534") && !Catch::Contains("secret-line"));

  // stokerd's own user (root here) reads as stokerd; its job is not the other user's either.
  const Json mine = define(socket, job_body(folder(data / "priv")));
  CHECK(mine["ok"] == true);
  const Json root_pub = define(socket, job_body(folder(data / "pub")));
  REQUIRE(root_pub["ok"] == true);
  CHECK(root_pub["job"] != pub["job"]);
  // A client-defined job is its user's: another uid may neither list its samples nor consume it.
  const Json peek = command_as_nobody(socket, g->gr_gid, {{"op", "samples"}, {"job", mine["job"]}});
  CHECK(peek["ok"] == false);
  CHECK_THAT(peek.value("error", ""), Catch::Contains("defined by another user") && !Catch::Contains("secret_name"));
  const Json own = command_as_nobody(socket, g->gr_gid, {{"op", "samples"}, {"job", pub["job"]}});
  CHECK(own["ok"] == true);
  CHECK(own["total"] == 4);
}

TEST_CASE("concurrent definitions never exceed the client job caps", "[integration][client-jobs]") {
  TempDir dir;
  // Many files, so a scan lasts long enough for definitions to arrive while others load.
  const fs::path data = dir.path() / "many";
  for (const char* cls : {"a", "b"}) {
    fs::create_directories(data / cls);
    // Hard links of one small photo: real images (the jobs decode them), no disk to speak of.
    for (int i = 0; i < 4000; ++i) {
      fs::create_hard_link(fs::path(data_dir()) / "demo" / "flower" / "flower_00.jpg",
                           data / cls / ("f" + std::to_string(i) + ".jpg"));
    }
  }
  auto define_at_once = [&](const std::string& socket, int n) {
    std::atomic<int> created{0}, refused{0};
    std::vector<std::string> errors(static_cast<std::size_t>(n));
    std::vector<std::thread> threads;
    for (int i = 0; i < n; ++i) {
      threads.emplace_back([&, i] {
        const Json r = define(socket, job_body(folder(data), "    seed: " + std::to_string(i + 1) + "\n"));
        (r["ok"] == true ? created : refused).fetch_add(1);
        errors[static_cast<std::size_t>(i)] = r.value("error", "");
      });
    }
    for (auto& t : threads) t.join();
    return std::tuple{created.load(), refused.load(), errors};
  };

  SECTION("the default settings: 8 per user, however many arrive at once") {
    // Before loads in flight were counted, 40 at once made 24 to 38 jobs of a cap of 16.
    const auto socket = (dir.path() / "s.sock").string();
    Daemon d(write_config(dir.path(), {JobSpec{}}, 2, "  client_job_linger_s: 600\n"), socket);
    const auto [created, refused, errors] = define_at_once(socket, 40);
    CHECK(created == 8);
    CHECK(refused == 32);
    CHECK(client_jobs_in_status(socket) == 8);
  }
  SECTION("all users: at most 16") {
    const auto socket = (dir.path() / "s.sock").string();
    Daemon d(write_config(dir.path(), {JobSpec{}}, 2, "  client_jobs_per_user: 16\n  client_job_linger_s: 600\n"),
             socket);
    const auto [created, refused, errors] = define_at_once(socket, 40);
    CHECK(created == 16);
    CHECK(refused == 24);
    CHECK(client_jobs_in_status(socket) == 16);
    std::size_t told = 0;
    for (const auto& e : errors) told += e.find("(at most 16)") != std::string::npos ? 1 : 0;
    CHECK(told == 24);
  }
  SECTION("one user: at most server.client_jobs_per_user") {
    const auto socket = (dir.path() / "s.sock").string();
    Daemon d(write_config(dir.path(), {JobSpec{}}, 2, "  client_jobs_per_user: 3\n  client_job_linger_s: 600\n"),
             socket);
    const auto [created, refused, errors] = define_at_once(socket, 40);
    CHECK(created == 3);
    CHECK(refused == 37);
    CHECK(client_jobs_in_status(socket) == 3);
    bool named = false;
    for (const auto& e : errors) named = named || e.find("server.client_jobs_per_user") != std::string::npos;
    CHECK(named);
  }
  SECTION("the same definition sent at once by many ranks is loaded once and counted once") {
    const auto socket = (dir.path() / "s.sock").string();
    Daemon d(write_config(dir.path(), {JobSpec{}}, 2, "  client_jobs_per_user: 1\n"), socket);
    std::vector<std::thread> threads;
    std::vector<Json> replies(16);
    for (std::size_t i = 0; i < replies.size(); ++i) {
      threads.emplace_back([&, i] { replies[i] = define(socket, job_body(folder(data))); });
    }
    for (auto& t : threads) t.join();
    for (const auto& r : replies) {
      REQUIRE(r["ok"] == true);
      CHECK(r["job"] == replies[0]["job"]);
    }
    CHECK(client_jobs_in_status(socket) == 1);
  }
}

namespace {

// The status document as uid 65534 (a member of `gid`) sees it.
Json status_seen_by_nobody(const std::string& socket, gid_t gid) {
  return Json::parse(stoker::test::in_child_as_nobody({gid}, [&] {
    char* json = nullptr;
    if (stoker_daemon_status(socket.c_str(), &json) != STOKER_OK) return std::string("{\"jobs\": null}");
    std::string s = json;
    stoker_free(json);
    return s;
  }));
}

std::vector<std::string> client_job_names(const Json& status) {
  std::vector<std::string> out;
  for (const auto& j : status["jobs"]) {
    if (j.value("defined_by_client", false)) out.push_back(j["name"]);
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::size_t lines_containing(const std::string& text, const std::string& part) {
  std::size_t n = 0;
  for (std::size_t at = 0; at < text.size();) {
    const std::size_t nl = std::min(text.find('\n', at), text.size());
    n += text.substr(at, nl - at).find(part) != std::string::npos ? 1 : 0;
    at = nl + 1;
  }
  return n;
}

}  // namespace

TEST_CASE("a client-defined job with an epoch_size past the machine's memory is refused naming the key, and "
          "stokerd keeps serving (issue #34 C1)",
          "[integration][client-jobs][bounds]") {
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
  const std::uint64_t most = static_cast<std::uint64_t>(pages) * static_cast<std::uint64_t>(page) / 4 / 10;
  if (most >= 4294967295u) {
    WARN("this machine holds an epoch of 4294967295 positions: nothing to refuse");
    return;
  }
  TempDir dir;
  const auto socket = (dir.path() / "s.sock").string();
  Daemon d(write_config(dir.path(), {JobSpec{}}, 1), socket);
  const std::string body = "jobs:\n  mine:\n    sources:\n      - {type: imagefolder, root: \"" +
                           (fs::path(data_dir()) / "demo").string() +
                           "\", weight: 1}\n    epoch_size: 4294967295\n    batch_size: 4\n    shuffle: false\n"
                           "    pipeline:\n      - decode: {}\n      - resize: {size: 16}\n"
                           "      - center_crop: {size: 16}\n";
  // Before: accepted, and the first epoch's order (~26 GB) ended in std::bad_alloc or the OOM killer.
  const Json huge = define(socket, body);
  CHECK(huge["ok"] == false);
  CHECK_THAT(huge.value("error", ""),
             Catch::Contains(":5:") && Catch::Contains("jobs.mine.epoch_size: must be at most") &&
                 Catch::Contains("got 4294967295") && Catch::Contains("quarter of this machine's memory"));
  // Still serving: its own job, and a client's job that fits.
  stoker::Client c("demo", 0, at(socket));
  CHECK(c.next(20000).count() > 0);
  std::string fits = body;
  fits.replace(fits.find("4294967295"), 10, "1000");
  const Json ok = define(socket, fits);
  CHECK(ok["ok"] == true);
  CHECK(client_jobs_in_status(socket) == 1);
}

TEST_CASE("a file its user may not read is named once per job run, then counted in one line per epoch "
          "(issue #34 D3)",
          "[integration][client-jobs]") {
  skip_unless_root("define a job as another uid over files it may not read");
  const group* g = some_group();
  TempDir dir;
  const auto socket = (dir.path() / "s.sock").string();
  TempDir data_holder;
  const fs::path data = data_holder.path();
  put_images(data / "a", "open", 3);
  put_images(data / "b", "open", 3);
  put_images(data / "a", "closed_a", 1);
  put_images(data / "b", "closed_b", 1);
  for (const auto& e : fs::recursive_directory_iterator(data)) ::chmod(e.path().c_str(), e.is_directory() ? 0755 : 0644);
  ::chmod(data.c_str(), 0755);
  ::chmod((data / "a" / "closed_a_0.jpg").c_str(), 0600);  // root's alone: listed, not readable by 65534
  ::chmod((data / "b" / "closed_b_0.jpg").c_str(), 0600);
  Daemon d(write_config(dir.path(), {JobSpec{}}, 1,
                        std::string("  group: ") + g->gr_name + "\n  client_jobs_for_group: true\n  state_dir: " +
                            (dir.path() / "state").string() + "\n"),
           socket);
  const Json def = command_as_nobody(socket, g->gr_gid, {{"op", "define_job"}, {"config", job_body(folder(data))}});
  REQUIRE(def["ok"] == true);
  const std::string job = def["job"];
  // 8 samples, 2 unreadable: batches of 4 (a short one where the 2 are dropped). Root may consume.
  stoker::Client c(job, 0, at(socket));
  std::uint64_t epochs_done = 0;
  while (epochs_done < 4) {
    stoker::Batch b = c.next(30000);
    if (b.last_in_epoch()) ++epochs_done;
  }
  std::string log;
  for (int i = 0; i < 100 && lines_containing(log, ": epoch 3: ") == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    log = d.log();
  }
  INFO(log);
  // Each file once, not once an epoch (before: one line per file per epoch).
  CHECK(lines_containing(log, "closed_a_0.jpg") == 1);
  CHECK(lines_containing(log, "closed_b_0.jpg") == 1);
  for (int e = 0; e < 4; ++e) {
    CHECK(lines_containing(log, "job " + job + ": epoch " + std::to_string(e) + ": 2 read(s) of missing") == 1);
  }
}

TEST_CASE("status shows a user only their own uid's client-defined jobs, root sees all, and a refusal does not tell "
          "what a folder the user cannot list holds (issue #34 D4)",
          "[integration][client-jobs]") {
  skip_unless_root("ask the status as another uid");
  const group* g = some_group();
  TempDir dir;
  const auto socket = (dir.path() / "s.sock").string();
  TempDir data_holder;
  const fs::path data = data_holder.path();
  ::chmod(data.c_str(), 0755);
  put_images(data / "pub" / "a", "open", 2);
  put_images(data / "pub" / "b", "open", 2);
  for (const auto& e : fs::recursive_directory_iterator(data / "pub")) ::chmod(e.path().c_str(), e.is_directory() ? 0755 : 0644);
  put_images(data / "priv" / "exists", "secret", 2);
  ::chmod((data / "priv").c_str(), 0700);
  Daemon d(write_config(dir.path(), {JobSpec{}}, 1,
                        std::string("  group: ") + g->gr_name + "\n  client_jobs_for_group: true\n  state_dir: " +
                            (dir.path() / "state").string() + "\n"),
           socket);
  const Json theirs = command_as_nobody(socket, g->gr_gid, {{"op", "define_job"}, {"config", job_body(folder(data / "pub"))}});
  REQUIRE(theirs["ok"] == true);
  const Json roots = define(socket, job_body(folder(data / "pub"), "    seed: 11\n"));
  REQUIRE(roots["ok"] == true);
  REQUIRE(roots["job"] != theirs["job"]);

  // Before: every group member saw every client job, its roots and pipeline.
  const Json as_nobody = status_seen_by_nobody(socket, g->gr_gid);
  CHECK(client_job_names(as_nobody) == std::vector<std::string>{theirs["job"]});
  CHECK(as_nobody.dump().find(roots["job"].get<std::string>()) == std::string::npos);
  bool config_job_shown = false;  // jobs of the config file stay everyone's
  for (const auto& j : as_nobody["jobs"]) config_job_shown = config_job_shown || j["name"] == "demo";
  CHECK(config_job_shown);
  std::vector<std::string> both{theirs["job"], roots["job"]};
  std::sort(both.begin(), both.end());
  CHECK(client_job_names(Json::parse(daemon_status_text(socket))) == both);

  // A folder nobody cannot list: a path in it that exists and one that does not are refused alike.
  auto refusal = [&](const std::string& leaf) {
    const Json r = command_as_nobody(socket, g->gr_gid,
                                     {{"op", "define_job"}, {"config", job_body(folder(data / "priv" / leaf))}});
    CHECK(r["ok"] == false);
    std::string text = r.value("error", "");
    // From the key on (the origin names the client's pid, the job its definition); the path the
    // client gave is the same apart from its leaf.
    if (const auto key = text.find("source.root: "); key != std::string::npos) text.erase(0, key);
    while (text.find(leaf) != std::string::npos) text.replace(text.find(leaf), leaf.size(), "LEAF");
    return text;
  };
  const std::string there = refusal("exists"), absent = refusal("never-was");
  CHECK(there == absent);
  CHECK_THAT(there, Catch::Contains("not found, or not readable by uid 65534") && !Catch::Contains("secret"));
}
