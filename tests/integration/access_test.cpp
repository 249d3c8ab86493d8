// Trainers of other users: with server.group, members connect and others are refused — by the
// socket's mode, and by the peer-credential check when the mode has been widened. Needs root
// (to become another uid in a forked child); exits 77 (ctest: Skipped) otherwise.
#include <catch2/catch.hpp>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <grp.h>
#include <string>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

#include "as_nobody.hpp"
#include "daemon_fixture.hpp"
#include "stoker/stoker.h"

using namespace stoker::test;

namespace {


struct Outcome {
  int status = -1;
  std::string message;  // stoker_last_error() on failure, the JSON on success
};

// stoker_daemon_status from a forked child running as uid/gid 65534 with `groups`.
Outcome status_as_nobody(const std::string& socket, const std::vector<gid_t>& groups) {
  const std::string text = in_child_as_nobody(
      groups,
      [&] {
        char* json = nullptr;
        const int rc = stoker_daemon_status(socket.c_str(), &json);
        return std::to_string(rc) + "\n" + (rc == 0 ? std::string(json) : stoker_last_error());
      },
      30);
  Outcome o;
  const auto nl = text.find('\n');
  REQUIRE(nl != std::string::npos);
  o.status = std::stoi(text.substr(0, nl));
  o.message = text.substr(nl + 1);
  return o;
}

}  // namespace

TEST_CASE("server.group: members of the group connect, others are refused with a reason", "[integration][access]") {
  skip_unless_root("connect as another uid");
  const group& g = *some_group();
  TempDir dir;
  const auto socket = (dir.path() / "s.sock").string();
  Daemon d(write_config(dir.path(), {JobSpec{}}, 1, std::string("  group: ") + g.gr_name + "\n"), socket);

  struct stat st {};
  REQUIRE(::stat(socket.c_str(), &st) == 0);
  CHECK((st.st_mode & 07777) == 0660);
  CHECK(st.st_gid == g.gr_gid);
  REQUIRE(::stat(dir.path().c_str(), &st) == 0);  // its stoker-test-* folder lets the group through
  CHECK((st.st_mode & 07777) == 0750);
  CHECK(st.st_gid == g.gr_gid);

  // A member (supplementary group) gets the status.
  const Outcome member = status_as_nobody(socket, {g.gr_gid});
  CHECK(member.status == STOKER_OK);
  CHECK_THAT(member.message, Catch::Contains("\"jobs\""));
  CHECK_THAT(d.log(), Catch::Contains("uid 65534") && Catch::Contains(std::string("admitted (member of group ") + g.gr_name));

  // A non-member is stopped by the file system first, and told whose the socket is.
  const Outcome outsider = status_as_nobody(socket, {});
  CHECK(outsider.status == STOKER_ERR_REFUSED);
  CHECK_THAT(outsider.message, Catch::Contains("permission denied on stokerd's socket"));

  // Widened by someone (modes are not the only guard): the peer check refuses it at accept.
  ::chmod(dir.path().c_str(), 0755);
  ::chmod(socket.c_str(), 0666);
  const Outcome widened = status_as_nobody(socket, {});
  CHECK(widened.status == STOKER_ERR_REFUSED);
  CHECK_THAT(widened.message, Catch::Contains("stokerd: access denied: uid 65534") &&
                                  Catch::Contains(std::string("member of group '") + g.gr_name + "' (server.group)"));
  CHECK_THAT(d.log(), Catch::Contains("uid 65534 (") && Catch::Contains(") refused: access denied"));

  // The owner (root here) is served as ever.
  char* json = nullptr;
  REQUIRE(stoker_daemon_status(socket.c_str(), &json) == STOKER_OK);
  stoker_free(json);
}

TEST_CASE("without server.group only stokerd's user and root connect, even through a widened socket",
          "[integration][access]") {
  skip_unless_root("connect as another uid");
  const group& g = *some_group();
  TempDir dir;
  const auto socket = (dir.path() / "s.sock").string();
  Daemon d(write_config(dir.path(), {JobSpec{}}, 1), socket);
  struct stat st {};
  REQUIRE(::stat(socket.c_str(), &st) == 0);
  CHECK((st.st_mode & 07777) == 0600);

  ::chmod(dir.path().c_str(), 0755);
  ::chmod(socket.c_str(), 0666);
  for (const auto& groups : {std::vector<gid_t>{}, std::vector<gid_t>{g.gr_gid}}) {
    const Outcome o = status_as_nobody(socket, groups);
    CHECK(o.status == STOKER_ERR_REFUSED);
    CHECK_THAT(o.message, Catch::Contains("access denied") && Catch::Contains("sets no server.group"));
  }
  char* json = nullptr;
  REQUIRE(stoker_daemon_status(socket.c_str(), &json) == STOKER_OK);
  stoker_free(json);
}
