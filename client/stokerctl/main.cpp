// stokerctl: look at and consume from a running stokerd. The command line is CLI11's: each
// command file adds its subcommand and options (commands.hpp); this file parses, turns CLI11's
// errors into "stokerctl COMMAND: message" with exit code 2, and runs the command parsed.
#include <cstdio>
#include <string>
#include <vector>

#include "commands.hpp"
#include "stoker/stoker.h"

namespace {

// Exit code of a command line stokerctl cannot use (usage errors), as before CLI11.
constexpr int kUsageError = 2;

}  // namespace

int main(int argc, char** argv) {
  using namespace stoker::ctl;
  CLI::App app("look at and consume from a running stokerd", "stokerctl");
  app.formatter(std::make_shared<SynopsisFormatter>("<command> [options]     (stokerctl --version, stokerctl COMMAND --help)"));
  // An option given twice: the last one counts (as before; CLI11's default refuses it).
  // Subcommands take their defaults from here, so this comes before them.
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  app.add_flag_callback(
      "--version",
      [] {
        std::printf("stokerctl %s (libstoker %s)\n", STOKER_VERSION, stoker_version());  // libstoker: the loaded one
        throw CLI::Success();
      },
      "print stokerctl's and the loaded libstoker's versions and exit");
  const std::vector<Command> commands = {add_consume(app), add_status(app),  add_top(app),
                                         add_preview(app), add_drain(app), add_reload(app), add_prepare(app)};
  app.footer("stokerctl COMMAND --help: that command's options");  // after them: subcommands copy the footer

  const auto usage_to_stderr = [&] {
    std::fputs(app.help().c_str(), stderr);
    return kUsageError;
  };
  if (argc < 2) return usage_to_stderr();
  const auto known = [&](const char* name) {
    for (const Command& c : commands) {
      if (c.app->get_name() == name) return true;
    }
    return false;
  };
  if (argv[1][0] != '-' && !known(argv[1])) {
    std::fprintf(stderr, "stokerctl: unknown command '%s'\n", argv[1]);
    return usage_to_stderr();
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help (of the command parsed) or --version
    // CLI11's message names the option ("--batches: must be a whole number >= 0, got 'abc'").
    const std::vector<CLI::App*> parsed = app.get_subcommands();
    const std::string who = parsed.empty() ? "stokerctl" : "stokerctl " + parsed.front()->get_name();
    std::fprintf(stderr, "%s: %s\nRun '%s --help' for the options.\n", who.c_str(), e.what(), who.c_str());
    return kUsageError;
  }
  for (const Command& c : commands) {
    if (c.app->parsed()) return c.run();
  }
  return usage_to_stderr();  // options but no command
}
