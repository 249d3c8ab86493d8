// stokerd's command line: what it may say (DaemonOptions) and how it is read (CLI11, in
// options.cpp). Kept apart from run_daemon so the daemon's life reads without argv handling.
#pragma once

#include <string>

namespace stoker::app {

struct DaemonOptions {
  std::string config_path;   // --config / -c; required
  std::string socket_path;   // --socket; empty: config, then environment
  int workers = -1;          // --workers 1..1024; <0: from the config
  std::string log_level;     // --log-level trace|debug|info|warn|error; empty: from the config
  std::string state_dir;     // --state-dir; empty: config, then $STATE_DIRECTORY, then the socket's folder
};

// Parses argv. On --help/--version prints to stdout and returns false with exit_code 0; on a
// usage error prints "stokerd: <what, naming the option>" to stderr and returns false with
// exit_code 2. Otherwise fills `out` and returns true.
bool parse_daemon_args(int argc, char** argv, DaemonOptions& out, int& exit_code);

}  // namespace stoker::app
