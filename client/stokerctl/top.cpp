// `stokerctl top`: a live view of a running stokerd in 80 columns, refreshed like top(1).
// Reads the same JSON as `stokerctl status` (one StatusQuery per frame, nothing else).
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "stoker/stoker.h"
#include "top_render.hpp"

namespace stoker::ctl {

int top_main(int argc, char** argv) {
  std::string socket;
  double interval_s = 2.0;
  long iterations = 0;  // 0: until interrupted
  int clear = -1;       // -1: when stdout is a terminal
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    if (k == "--clear") { clear = 1; continue; }
    if (k == "--no-clear") { clear = 0; continue; }
    if (i + 1 >= argc) {
      std::fprintf(stderr, "stokerctl top: %s needs a value\n", k.c_str());
      return 2;
    }
    const char* v = argv[++i];
    char* end = nullptr;
    if (k == "--socket") {
      socket = v;
    } else if (k == "-d" || k == "--interval") {
      interval_s = std::strtod(v, &end);
      if (*end != '\0' || !(interval_s >= 0.1 && interval_s <= 3600)) {
        std::fprintf(stderr, "stokerctl top: %s must be 0.1..3600 seconds, got '%s'\n", k.c_str(), v);
        return 2;
      }
    } else if (k == "-n" || k == "--iterations") {
      iterations = std::strtol(v, &end, 10);
      if (*end != '\0' || iterations < 0) {
        std::fprintf(stderr, "stokerctl top: %s must be a count >= 0 (0: forever), got '%s'\n", k.c_str(), v);
        return 2;
      }
    } else {
      std::fprintf(stderr, "stokerctl top: bad option %s\n", k.c_str());
      return 2;
    }
  }
  if (clear < 0) clear = ::isatty(STDOUT_FILENO) ? 1 : 0;
  for (long frame = 0; iterations == 0 || frame < iterations; ++frame) {
    if (frame != 0) std::this_thread::sleep_for(std::chrono::duration<double>(interval_s));
    char* text = nullptr;
    if (stoker_daemon_status(socket.empty() ? nullptr : socket.c_str(), &text) != STOKER_OK) {
      std::fprintf(stderr, "stokerctl top: %s\n", stoker_last_error());
      return 1;
    }
    nlohmann::json st = nlohmann::json::parse(text, nullptr, false);
    stoker_free(text);
    if (st.is_discarded() || !st.is_object()) {
      std::fprintf(stderr, "stokerctl top: stokerd sent a status that is not JSON\n");
      return 1;
    }
    // ANSI: cursor home + clear screen, as top does; frames are separated by a blank line
    // when the output is not a terminal (scripts, tests).
    const std::string frame_text = render_top_frame(st);
    std::fputs(clear ? "\x1b[H\x1b[2J" : (frame != 0 ? "\n" : ""), stdout);
    std::fputs(frame_text.c_str(), stdout);
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace stoker::ctl
