// stokerd's whole life: options -> config -> datasets -> lock -> segments -> socket -> serve.
// Everything that can fail because of the user's input fails before the lock is taken or
// the first segment exists, so a refused start leaves nothing behind.
#pragma once

#include "app/options.hpp"

namespace stoker::app {

// Runs the daemon until SIGINT/SIGTERM. Returns the process exit code; never throws.
int run_daemon(const DaemonOptions& options);

}  // namespace stoker::app
