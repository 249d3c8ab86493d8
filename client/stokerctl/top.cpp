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
namespace {

struct TopArgs {
  std::string socket;
  double interval_s = 2.0;
  long iterations = 0;  // 0: until interrupted
  bool clear = false;   // when given; otherwise: when stdout is a terminal
  CLI::Option* clear_given = nullptr;
};

int run_top(const TopArgs& a) {
  const std::string& socket = a.socket;
  const double interval_s = a.interval_s;
  const long iterations = a.iterations;
  const bool clear = a.clear_given->count() != 0 ? a.clear : ::isatty(STDOUT_FILENO) != 0;
  nlohmann::json previous;  // the last frame's status: rates are differences of its counters
  std::chrono::steady_clock::time_point previous_at;
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
    const auto now = std::chrono::steady_clock::now();
    const std::string frame_text =
        render_top_frame(st, frame != 0 ? &previous : nullptr, std::chrono::duration<double>(now - previous_at).count());
    previous = std::move(st);
    previous_at = now;
    std::fputs(clear ? "\x1b[H\x1b[2J" : (frame != 0 ? "\n" : ""), stdout);
    std::fputs(frame_text.c_str(), stdout);
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace

Command add_top(CLI::App& root) {
  CLI::App* cmd = describe(root.add_subcommand("top", "live view of jobs and consumers (rate, trainer wait %, ring "
                                                      "occupancy, errors),\nrefreshed every -d seconds (2); -n N: N "
                                                      "frames then exit (0: until ^C)"),
                           "top [-d SECONDS] [-n N] [--clear | --no-clear] [--socket PATH]");
  auto a = std::make_shared<TopArgs>();
  cmd->add_option("-d,--interval", a->interval_s, "seconds between frames, 0.1..3600 (default 2)")
      ->check(CLI::Validator(
          [](std::string& v) -> std::string {
            // strtod, as before: "nan" and "inf" are numbers to it, and fail the range (NaN
            // would pass CLI::Range, whose comparisons are all false for it).
            char* end = nullptr;
            const double x = std::strtod(v.c_str(), &end);
            if (v.empty() || *end != '\0' || !(x >= 0.1 && x <= 3600)) return "must be 0.1..3600 seconds, got '" + v + "'";
            return {};
          },
          "", "seconds"))
      ->option_text("SECONDS");
  cmd->add_option("-n,--iterations", a->iterations, "N frames, then exit (default 0: until interrupted)")
      ->transform(whole_number())
      ->option_text("N");
  // One flag, two spellings: the last one given wins; neither: clear when stdout is a terminal.
  a->clear_given = cmd->add_flag("--clear,!--no-clear", a->clear,
                                 "clear the screen before each frame, or separate frames by a blank line");
  add_socket_option(*cmd, a->socket);
  return {cmd, [a] { return run_top(*a); }};
}

}  // namespace stoker::ctl
