// Out of descriptors, for a test's fault injection: while a NoFreeDescriptors lives, the
// process's RLIMIT_NOFILE is the lowest free descriptor number, so every open, socket, epoll
// or eventfd fails with EMFILE; the limit is put back when it goes (restore() to do so sooner).
#pragma once

#include <sys/resource.h>
#include <unistd.h>

#include <catch2/catch.hpp>

namespace stoker::test {

class NoFreeDescriptors {
 public:
  NoFreeDescriptors() {
    REQUIRE(::getrlimit(RLIMIT_NOFILE, &saved_) == 0);
    const int lowest_free = ::dup(0);
    REQUIRE(lowest_free >= 0);
    ::close(lowest_free);
    rlimit low = saved_;
    low.rlim_cur = static_cast<rlim_t>(lowest_free);  // every descriptor number below is taken
    REQUIRE(::setrlimit(RLIMIT_NOFILE, &low) == 0);
  }
  ~NoFreeDescriptors() { restore(); }
  NoFreeDescriptors(const NoFreeDescriptors&) = delete;
  NoFreeDescriptors& operator=(const NoFreeDescriptors&) = delete;

  void restore() {
    if (restored_) return;
    restored_ = true;
    CHECK(::setrlimit(RLIMIT_NOFILE, &saved_) == 0);  // CHECK, not REQUIRE: may run in the destructor
  }

 private:
  rlimit saved_{};
  bool restored_ = false;
};

}  // namespace stoker::test
