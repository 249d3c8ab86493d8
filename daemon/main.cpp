// stokerd: parse the options, run, exit. Everything else lives in daemon/server.
#include "server/daemon.hpp"

int main(int argc, char** argv) {
  stoker::server::DaemonOptions options;
  int exit_code = 0;
  if (!stoker::server::parse_daemon_args(argc, argv, options, exit_code)) return exit_code;
  return stoker::server::run_daemon(options);
}
