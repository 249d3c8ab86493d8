// Runs a piece of a test as another user: a forked child drops to uid/gid 65534 (nobody) with
// the given supplementary groups, runs `body` and hands back the text it returns through a
// pipe. The checks stay in the parent (Catch cannot report from the child); a child that could
// not drop its credentials or did not finish fails the test here.
#pragma once

#include <grp.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

namespace stoker::test {

constexpr uid_t kNobody = 65534;

// Cases that become another uid need root; elsewhere they exit 77, which ctest reports Skipped.
inline void skip_unless_root(const char* to_do) {
  if (::geteuid() != 0) {
    std::printf("SKIPPED: needs root to %s (run the integration tier as root)\n", to_do);
    std::exit(77);
  }
}

// A group that exists here other than root's and nobody's (for server.group); exits 77 when
// the machine has none of the usual ones.
inline const group* some_group() {
  for (const char* n : {"users", "staff", "daemon", "sys", "adm"}) {
    if (const group* g = ::getgrnam(n); g != nullptr && g->gr_gid != 0 && g->gr_gid != kNobody) {
      static group found = *g;  // getgrnam's buffer is overwritten by the next lookup
      static std::string name = g->gr_name;
      found.gr_name = name.data();
      found.gr_mem = nullptr;
      found.gr_passwd = nullptr;
      return &found;
    }
  }
  std::printf("SKIPPED: no group users/staff/daemon/sys/adm on this machine\n");
  std::exit(77);
}

inline std::string in_child_as_nobody(const std::vector<gid_t>& groups, const std::function<std::string()>& body,
                                      unsigned alarm_s = 60) {
  int p[2];
  REQUIRE(::pipe(p) == 0);
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::close(p[0]);
    ::alarm(alarm_s);
    if (::setgroups(groups.size(), groups.data()) != 0 || ::setresgid(kNobody, kNobody, kNobody) != 0 ||
        ::setresuid(kNobody, kNobody, kNobody) != 0) {
      ::_exit(3);
    }
    const std::string text = body();
    [[maybe_unused]] ssize_t w = ::write(p[1], text.data(), text.size());
    ::_exit(0);
  }
  ::close(p[1]);
  std::string text;
  char buf[4096];
  for (ssize_t n; (n = ::read(p[0], buf, sizeof buf)) > 0;) text.append(buf, static_cast<std::size_t>(n));
  ::close(p[0]);
  int st = 0;
  ::waitpid(pid, &st, 0);
  REQUIRE(WIFEXITED(st));
  REQUIRE(WEXITSTATUS(st) == 0);
  return text;
}

}  // namespace stoker::test
