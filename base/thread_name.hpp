// Names the calling thread, as `top -H`, `perf report --sort comm`, gdb and /proc/PID/task/*/comm
// show it (tests find the remote link's threads by name). Linux keeps 15 bytes: longer names
// are cut there, never refused.
#pragma once

#include <pthread.h>

#include <string>

namespace stoker::base {

inline void name_this_thread(const std::string& name) {
  ::pthread_setname_np(::pthread_self(), name.substr(0, 15).c_str());
}

}  // namespace stoker::base
