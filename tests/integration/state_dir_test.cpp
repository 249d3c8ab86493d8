// Where stokerd keeps its state: --state-dir, else $STATE_DIRECTORY (systemd's
// StateDirectory=), else the socket's folder; the quarantine file there is keyed by the dataset.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "daemon_fixture.hpp"
#include "stoker/stoker.hpp"

using namespace stoker::test;
namespace fs = std::filesystem;

namespace {

// The demo images plus one file that is not an image, so one epoch quarantines it.
fs::path dataset_with_a_bad_file(const fs::path& dir) {
  const fs::path root = dir / "data";
  fs::copy(fs::path(data_dir()) / "demo", root, fs::copy_options::recursive);
  std::ofstream(root / "flower" / "zz_not_an_image.jpg") << "this is not a JPEG";
  return root;
}

void consume_one_epoch(const std::string& socket) {
  stoker::ClientOptions o;
  o.socket_path = socket;
  stoker::Client c("demo", 0, o);
  for (;;) {
    stoker::Batch b = c.next(30000);
    if (b.last_in_epoch()) break;
  }
}

}  // namespace

TEST_CASE("the quarantine goes to --state-dir, else $STATE_DIRECTORY, not to the socket's folder", "[integration][state]") {
  TempDir dir;
  JobSpec j;
  j.root = dataset_with_a_bad_file(dir.path()).string();
  j.shuffle = false;
  j.on_error = "skip";
  const auto socket = (dir.path() / "s.sock").string();
  const auto cfg = write_config(dir.path(), {j}, 1);

  SECTION("--state-dir") {
    const fs::path state = dir.path() / "state-option";
    {
      Daemon d(cfg, socket, {"--state-dir", state.string()});
      consume_one_epoch(socket);
      CHECK(d.stop() == 0);
    }
    CHECK(quarantine_files(state, "demo").size() == 1);
    CHECK(quarantine_files(dir.path(), "demo").empty());
  }
  SECTION("$STATE_DIRECTORY, as systemd sets it") {
    const fs::path state = dir.path() / "state-env";
    fs::create_directories(state);
    ::setenv("STATE_DIRECTORY", state.c_str(), 1);  // the daemon inherits it
    {
      Daemon d(cfg, socket);
      ::unsetenv("STATE_DIRECTORY");
      consume_one_epoch(socket);
      CHECK(d.stop() == 0);
    }
    const auto files = quarantine_files(state, "demo");
    REQUIRE(files.size() == 1);
    std::ifstream f(files[0]);
    const std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    CHECK_THAT(text, Catch::Contains("zz_not_an_image.jpg"));
    CHECK(quarantine_files(dir.path(), "demo").empty());
  }
}
