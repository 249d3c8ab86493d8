// Unit tier of running stokerd as a system service: who may connect (the decision and the
// /proc status parsing), where clients look for the socket, where state lives, and the
// server.group key.
#include <catch2/catch.hpp>

#include <filesystem>
#include <grp.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "config/config.hpp"
#include "daemon_fixture.hpp"
#include "control/peer_access.hpp"
#include "app/state_dir.hpp"
#include "stoker/proto/names.hpp"

using stoker::control::PeerCredentials;
using stoker::control::PeerPolicy;
using stoker::control::decide_peer_access;

namespace {

PeerPolicy group_policy(gid_t g) {
  PeerPolicy p;
  p.owner = 1000;
  p.group = g;
  p.group_name = "trainers";
  return p;
}

// A listening socket file at `path` (what a running daemon leaves there).
struct SocketFile {
  explicit SocketFile(const std::string& path) : path_(path) {
    std::filesystem::create_directories(std::filesystem::path(path).parent_path());
    fd_ = ::socket(AF_UNIX, SOCK_SEQPACKET, 0);
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::snprintf(a.sun_path, sizeof a.sun_path, "%s", path.c_str());
    REQUIRE(::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  }
  ~SocketFile() {
    ::close(fd_);
    ::unlink(path_.c_str());
  }
  std::string path_;
  int fd_ = -1;
};

}  // namespace

TEST_CASE("peer access: owner and root always, group members only when server.group is set", "[unit][service]") {
  PeerPolicy owner_only;
  owner_only.owner = 1000;
  CHECK(decide_peer_access(owner_only, {1, 1000, 1000}, {}).allowed);
  CHECK(decide_peer_access(owner_only, {1, 0, 0}, {}).why == "root");
  const auto other = decide_peer_access(owner_only, {1, 1001, 500}, {500});
  CHECK_FALSE(other.allowed);
  CHECK_THAT(other.why, Catch::Contains("uid 1001") && Catch::Contains("sets no server.group"));

  const PeerPolicy p = group_policy(500);
  CHECK(decide_peer_access(p, {1, 1001, 500}, {}).allowed);       // primary group
  CHECK(decide_peer_access(p, {1, 1001, 1001}, {27, 500}).allowed);  // supplementary group
  CHECK(decide_peer_access(p, {1, 1001, 1001}, {27, 500}).why == "member of group trainers");
  const auto stranger = decide_peer_access(p, {1, 1002, 1002}, {27, 501});
  CHECK_FALSE(stranger.allowed);
  CHECK_THAT(stranger.why, Catch::Contains("access denied") && Catch::Contains("'trainers' (server.group)"));
}

TEST_CASE("socket resolution: a daemon creates at its default, a client takes the first socket that exists",
          "[unit][service]") {
  using namespace stoker::proto;
  // $STOKER_SOCKET wins alone, on both sides.
  CHECK(daemon_socket_path_for("/x/s.sock", "/run/user/5", 5) == "/x/s.sock");
  CHECK(client_socket_path_for("/x/s.sock", "/run/user/5", 5) == "/x/s.sock");
  // The daemon: XDG, else /run/stoker for root, else /tmp/stoker-<uid>.
  CHECK(daemon_socket_path_for("", "/run/user/5", 5) == "/run/user/5/stoker/stoker.sock");
  CHECK(daemon_socket_path_for("", "", 0) == "/run/stoker/stoker.sock");
  CHECK(daemon_socket_path_for("", "", 5) == "/tmp/stoker-5/stoker.sock");
  // Every user's candidates include the system socket, between XDG and /tmp.
  CHECK(socket_candidates("", "/run/user/5", 5) ==
        std::vector<std::string>{"/run/user/5/stoker/stoker.sock", "/run/stoker/stoker.sock", "/tmp/stoker-5/stoker.sock"});
  CHECK(socket_candidates("", "", 0) == std::vector<std::string>{"/run/stoker/stoker.sock"});

  // With real files: a uid nobody has, so /tmp/stoker-<uid> is this test's alone.
  if (is_socket_file(kSystemSocketPath)) {
    WARN("a system stokerd listens on /run/stoker/stoker.sock here: the part with real files is left out");
    return;
  }
  stoker::test::TempDir xdg;
  const unsigned uid = 3000000000u + static_cast<unsigned>(::getpid());
  const std::string tmp_sock = "/tmp/stoker-" + std::to_string(uid) + "/stoker.sock";
  const std::string xdg_sock = (xdg.path() / "stoker/stoker.sock").string();
  // Nothing exists: where this user's daemon would be (the error then names that path).
  CHECK(client_socket_path_for("", xdg.path().string(), uid) == xdg_sock);
  {
    SocketFile t(tmp_sock);
    CHECK(client_socket_path_for("", xdg.path().string(), uid) == tmp_sock);  // XDG has none: the next
    SocketFile x(xdg_sock);
    CHECK(client_socket_path_for("", xdg.path().string(), uid) == xdg_sock);  // XDG first
  }
  std::filesystem::remove_all("/tmp/stoker-" + std::to_string(uid));
  // A plain file where a socket should be is not a socket.
  std::filesystem::create_directories(xdg.path() / "stoker");
  { std::FILE* f = std::fopen(xdg_sock.c_str(), "w"); std::fclose(f); }
  CHECK_FALSE(is_socket_file(xdg_sock));
}

TEST_CASE("state dir: --state-dir, then server.state_dir, then $STATE_DIRECTORY, then the socket's folder",
          "[unit][service]") {
  using stoker::app::resolve_state_dir;
  CHECK(resolve_state_dir("/opt/s", "/cfg", "/run/x/s.sock", "/var/lib/stoker") == "/opt/s");
  CHECK(resolve_state_dir("", "/cfg", "/run/x/s.sock", "/var/lib/stoker") == "/cfg");
  CHECK(resolve_state_dir("", "", "/run/x/s.sock", "/var/lib/stoker") == "/var/lib/stoker");
  CHECK(resolve_state_dir("", "", "/run/x/s.sock", "/var/lib/stoker:/var/lib/other") == "/var/lib/stoker");
  CHECK(resolve_state_dir("", "", "/run/x/s.sock", "") == "/run/x");
}

TEST_CASE("config: server.group takes a group name or gid that exists, and refuses others with the line",
          "[unit][service][config]") {
  using stoker::config::parse_config;
  const std::string job =
      "jobs:\n  j:\n    source: {root: .}\n    batch_size: 4\n"
      "    pipeline:\n      - decode: {}\n      - random_resized_crop: {size: 8}\n"
      "    output: {dtype: uint8, layout: NCHW}\n";
  const group* g = ::getgrgid(0);
  REQUIRE(g != nullptr);
  const std::string root_group = g->gr_name;
  auto cfg = parse_config("server: {group: " + root_group + "}\n" + job, "t.yaml", "/");
  CHECK(cfg.server.group == root_group);
  CHECK(cfg.server.group_id == 0);
  cfg = parse_config("server: {group: 0}\n" + job, "t.yaml", "/");
  CHECK(cfg.server.group == root_group);
  cfg = parse_config(job, "t.yaml", "/");
  CHECK(cfg.server.group.empty());  // default: owner only
  try {
    parse_config("server:\n  group: no-such-group-xq\n" + job, "t.yaml", "/");
    FAIL("an unknown group was accepted");
  } catch (const stoker::config::ConfigError& e) {
    CHECK_THAT(e.what(), Catch::StartsWith("t.yaml:2:10: server.group: no group 'no-such-group-xq'"));
  }
  CHECK_THROWS_WITH(parse_config("server: {group: \"\"}\n" + job, "t.yaml", "/"),
                    Catch::Contains("server.group: must not be empty"));
}
