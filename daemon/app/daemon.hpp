// stokerd's whole life: options -> config -> datasets -> lock -> segments -> socket -> serve.
// Everything that can fail because of the user's input fails before the lock is taken or
// the first segment exists, so a refused start leaves nothing behind.
#pragma once

#include <string>
#include <vector>

namespace stoker::app {

struct DaemonOptions {
  std::string config_path;
  std::string socket_path;   // --socket; empty: config, then environment
  int workers = -1;          // --workers; <0: from the config
  std::string log_level;     // --log-level; empty: from the config
  std::string state_dir;     // --state-dir; empty: config, then $STATE_DIRECTORY, then the socket's folder
};

// Parses argv; on --help/--version or a usage error prints and returns false with exit_code set.
bool parse_daemon_args(int argc, char** argv, DaemonOptions& out, int& exit_code);

// Runs the daemon until SIGINT/SIGTERM. Returns the process exit code; never throws.
int run_daemon(const DaemonOptions& options);

}  // namespace stoker::app
