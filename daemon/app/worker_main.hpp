// `stokerd --worker --listen HOST:PORT --allow-root DIR ...`: the remote-worker mode (issue
// #27; daemon/remote/). A stateless process that decodes and augments samples for GPU nodes'
// stokerd over gRPC; it serves no socket, segment or job of its own.
#pragma once

namespace stoker::app {

// True when argv asks for the worker mode (`--worker` anywhere).
bool wants_worker(int argc, char** argv);
// Parses the worker's options, runs until SIGTERM/SIGINT; the process's exit code (2: usage).
int run_worker(int argc, char** argv);

}  // namespace stoker::app
