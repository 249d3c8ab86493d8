// Issue #34, D1: a peer's supplementary groups were read from /proc/<peer pid>/status when
// define_job ran, long after connect (the pid may be another process's by then, or the same
// process with other groups). Now they are SO_PEERGROUPS, read once when the connection is
// accepted (PeerGate::admit) and kept with the session.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <grp.h>
#include <signal.h>
#include <sstream>
#include <string>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

#include "control/peer_access.hpp"

using stoker::control::PeerGate;
using stoker::control::PeerPolicy;

TEST_CASE("peer credentials: SO_PEERCRED and SO_PEERGROUPS of a connected socket", "[unit][service]") {
  int sv[2];
  REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
  const auto peer = stoker::control::read_peer_credentials(sv[0]);
  REQUIRE(peer.has_value());
  CHECK(peer->pid == ::getpid());
  CHECK(peer->uid == ::geteuid());
  CHECK(peer->gid == ::getegid());
  std::vector<gid_t> mine(static_cast<std::size_t>(::getgroups(0, nullptr)));
  ::getgroups(static_cast<int>(mine.size()), mine.data());
  CHECK(std::is_permutation(peer->groups.begin(), peer->groups.end(), mine.begin(), mine.end()));
  ::close(sv[0]);
  ::close(sv[1]);
  // Not a socket: no credentials, and the gate refuses.
  const int not_socket = ::dup(0);
  CHECK_FALSE(stoker::control::read_peer_credentials(not_socket).has_value());
  PeerGate gate(PeerPolicy{::geteuid(), std::nullopt, ""});
  CHECK_FALSE(gate.admit(not_socket).allowed);
  ::close(not_socket);
}

TEST_CASE("peer credentials: the groups a client connected with decide, not what /proc says later",
          "[unit][service]") {
  if (::geteuid() != 0) {
    WARN("not root: a child cannot change its groups here");
    return;
  }
  char dir[] = "/tmp/stoker-peer-XXXXXX";
  REQUIRE(::mkdtemp(dir) != nullptr);
  const std::string path = std::string(dir) + "/s.sock";
  const int listener = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::snprintf(a.sun_path, sizeof a.sun_path, "%s", path.c_str());
  REQUIRE(::bind(listener, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  REQUIRE(::listen(listener, 4) == 0);
  ::chmod(dir, 0755);
  ::chmod(path.c_str(), 0777);
  int ready[2];
  REQUIRE(::pipe(ready) == 0);

  constexpr gid_t kAtConnect = 4242, kLater = 31337;
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    // A client (uid 1000) in group 4242 when it connects; in 31337 only, right after.
    // (The saved uid stays 0 until after the second setgroups.)
    const gid_t g1[] = {kAtConnect};
    if (::setgroups(1, g1) != 0 || ::setresgid(1000, 1000, 1000) != 0 || ::setresuid(1000, 1000, 0) != 0) _exit(2);
    const int c = ::socket(AF_UNIX, SOCK_STREAM, 0);
    if (::connect(c, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) _exit(3);
    const gid_t g2[] = {kLater};
    if (::seteuid(0) != 0 || ::setgroups(1, g2) != 0) _exit(4);
    if (::setresuid(1000, 1000, 1000) != 0) _exit(5);
    const char one = 1;
    if (::write(ready[1], &one, 1) != 1) _exit(6);
    ::pause();
    _exit(0);
  }
  ::close(ready[1]);
  const int fd = ::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
  REQUIRE(fd >= 0);
  char one = 0;
  REQUIRE(::read(ready[0], &one, 1) == 1);  // the child's groups have changed since it connected

  // What /proc says now: the later group only (what the old code decided on).
  std::ifstream status("/proc/" + std::to_string(child) + "/status");
  std::stringstream text;
  text << status.rdbuf();
  CHECK(text.str().find("\nGroups:\t" + std::to_string(kLater)) != std::string::npos);

  // The gate: a policy letting group 4242 in admits the client (it connected as a member) and
  // keeps the groups of that moment for the session.
  PeerGate gate(PeerPolicy{0, kAtConnect, "trainers"});
  const stoker::control::PeerVerdict v = gate.admit(fd);
  CHECK(v.allowed);
  CHECK(v.why == "member of group trainers");
  CHECK(v.peer.pid == child);
  CHECK(v.peer.uid == 1000u);
  CHECK(v.peer.gid == 1000u);
  CHECK(v.peer.groups == std::vector<gid_t>{kAtConnect});
  // And a policy for the later group refuses it: it was not a member when it connected.
  PeerGate later(PeerPolicy{0, kLater, "later"});
  CHECK_FALSE(later.admit(fd).allowed);

  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
  ::close(fd);
  ::close(listener);
  ::close(ready[0]);
  ::unlink(path.c_str());
  ::rmdir(dir);
}
