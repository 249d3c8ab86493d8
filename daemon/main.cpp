// stokerd: parse the options, run, exit. Everything else lives in daemon/app and below.
#include "app/daemon.hpp"
#include "app/worker_main.hpp"

int main(int argc, char** argv) {
  if (stoker::app::wants_worker(argc, argv)) return stoker::app::run_worker(argc, argv);
  stoker::app::DaemonOptions options;
  int exit_code = 0;
  if (!stoker::app::parse_daemon_args(argc, argv, options, exit_code)) return exit_code;
  return stoker::app::run_daemon(options);
}
