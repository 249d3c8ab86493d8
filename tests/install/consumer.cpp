// Links the installed libstoker through its C++ header and talks to (no) daemon.
#include <cstdio>

#include <stoker/stoker.hpp>

int main() {
  try {
    stoker::ClientOptions o;
    o.socket_path = "/nonexistent/stoker-install-check.sock";
    stoker::Client c("demo", 0, o);
    return 1;  // there is no daemon: this must not succeed
  } catch (const stoker::Error& e) {
    std::printf("installed libstoker answered: %s\n", e.what());
    return e.status() == STOKER_ERR_NO_DAEMON ? 0 : 1;
  }
}
