// What stokerctl's commands share for their command lines (CLI11): the Command each command
// file adds to the top-level app, a whole-number check that keeps numbers decimal, and a help
// layout that starts with the command's synopsis (`usage: stokerctl consume --job NAME ...`).
#pragma once

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>

#include <CLI/CLI.hpp>

namespace stoker::ctl {

// One subcommand: its CLI11 app (options bound to the command's own arguments) and what runs
// it once a parse has selected it. Returns the process exit code.
struct Command {
  CLI::App* app = nullptr;
  std::function<int()> run;
};

// A whole non-negative decimal number that fits 64 bits; false for anything else ("-1", "3x").
inline bool parse_u64(const char* s, std::uint64_t& out) {
  char* end = nullptr;
  errno = 0;
  const unsigned long long v = std::strtoull(s, &end, 10);
  if (errno != 0 || end == s || *end != '\0' || s[0] == '-' || s[0] == '+' || s[0] == ' ') return false;
  out = v;
  return true;
}

// An integer option's ->transform() (not ->check(): CLI11 hands a check a copy, so its rewrite
// would be lost; transforms run before the checks). CLI11 converts with strtoull(base 0): "010"
// would be 8, "0x10" 16, and "-1" would wrap to 2^64-1. This admits plain decimal digits that
// fit 64 bits only and hands on the number without leading zeros, so a value means what it
// always meant; the conversion then refuses what does not fit the option's type.
inline CLI::Validator whole_number() {
  return CLI::Validator(
      [](std::string& v) -> std::string {
        std::uint64_t n = 0;
        if (!parse_u64(v.c_str(), n)) return "must be a whole number >= 0, got '" + v + "'";
        v = std::to_string(n);
        return {};
      },
      "", "whole_number");
}

// Help that reads like a man page's synopsis: "usage: stokerctl SYNOPSIS", the description,
// then CLI11's generated list of arguments, options and subcommands.
class SynopsisFormatter : public CLI::Formatter {
 public:
  explicit SynopsisFormatter(std::string synopsis) : synopsis_(std::move(synopsis)) { column_width(26); }
  std::string make_help(const CLI::App* app, std::string name, CLI::AppFormatMode mode) const override {
    if (mode == CLI::AppFormatMode::Sub) return CLI::Formatter::make_help(app, std::move(name), mode);
    return "usage: stokerctl " + synopsis_ + "\n" + make_description(app) + make_positionals(app) +
           make_groups(app, mode) + make_subcommands(app, mode) + make_footer(app);
  }

 private:
  std::string synopsis_;
};

// Gives `sub` its synopsis line(s) for --help (continuation lines indented under the first).
inline CLI::App* describe(CLI::App* sub, std::string synopsis) {
  sub->formatter(std::make_shared<SynopsisFormatter>(std::move(synopsis)));
  return sub;
}

// --socket PATH, which every command takes; empty: the client library's search.
inline CLI::Option* add_socket_option(CLI::App& cmd, std::string& socket) {
  return cmd
      .add_option("--socket", socket,
                  "stokerd's control socket; default: $STOKER_SOCKET, else the first\n"
                  "that exists of $XDG_RUNTIME_DIR/stoker/stoker.sock,\n"
                  "/run/stoker/stoker.sock, /tmp/stoker-<uid>/stoker.sock")
      ->option_text("PATH");
}

}  // namespace stoker::ctl
