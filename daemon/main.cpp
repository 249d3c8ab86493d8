// stokerd: parse the options, run, exit. Everything else lives in daemon/app and below.
#include "app/daemon.hpp"

int main(int argc, char** argv) {
  stoker::app::DaemonOptions options;
  int exit_code = 0;
  if (!stoker::app::parse_daemon_args(argc, argv, options, exit_code)) return exit_code;
  return stoker::app::run_daemon(options);
}
