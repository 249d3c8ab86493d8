// stokerctl: look at and consume from a running stokerd.
#include <cstdio>
#include <cstring>
#include <string>

#include "commands.hpp"
#include "stoker/stoker.h"

namespace {

constexpr const char* kUsage =
    "usage: stokerctl <command> [options]     (stokerctl --version, stokerctl COMMAND --help)\n"
    "  consume --job NAME [--rank R] [--reader I] [--batches N | --epochs E] [--ids] [--dump DIR]\n"
    "          [--start-epoch E] [--start-batch B] [--hold-ms MS] [--timeout-ms MS] [--socket PATH]\n"
    "          [--device cuda[:N]]  take device batches; --dump then reads them back from the GPU\n"
    "      connect as a real consumer; one JSON line per batch, then a throughput line\n"
    "      (--reader I: reader I of the rank, for jobs with `readers: K`)\n"
    "  status [--socket PATH]\n"
    "      jobs (each with its definition as YAML), consumers, ring occupancy, images/s, error\n"
    "      counts and the last reload's outcome, as JSON\n"
    "  top [-d SECONDS] [-n N] [--clear | --no-clear] [--socket PATH]\n"
    "      live view of jobs and consumers (rate, trainer wait %, ring occupancy, errors),\n"
    "      refreshed every -d seconds (2); -n N: N frames then exit (0: until ^C)\n"
    "  preview JOB --out FILE.png [--rank R] [--reader I] [--epoch E] [--batch B] [--columns C]\n"
    "          [--socket PATH]\n"
    "      contact sheet of one real batch as the trainer gets it (float output de-normalized),\n"
    "      label under each tile; attaches as rank R's consumer (refused while a trainer has it)\n"
    "  drain JOB [--socket PATH]\n"
    "      stop planning JOB's batches; its consumers get those already planned, then are told;\n"
    "      the job is removed (until a reload or restart brings it back)\n"
    "  reload [--socket PATH]\n"
    "      make stokerd re-read its config (over the control socket; SIGHUP does the same): new jobs\n"
    "      start, changed ones restart, removed ones drain, unchanged ones are not disturbed; waits\n"
    "      for the outcome and exits 1 with the refusal (FILE:LINE) when the new config is refused\n";

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "-h") == 0) {
    std::fputs(kUsage, argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  if (std::strcmp(argv[1], "--version") == 0) {
    std::printf("stokerctl %s (libstoker %s)\n", STOKER_VERSION, stoker_version());  // libstoker: the loaded one
    return 0;
  }
  const std::string cmd = argv[1];
  if (argc == 3 && (std::strcmp(argv[2], "--help") == 0 || std::strcmp(argv[2], "-h") == 0)) {
    // The part of the usage that names this command.
    const std::string usage = kUsage;
    const auto at = usage.find("  " + cmd + " ");
    if (at == std::string::npos) {
      std::fprintf(stderr, "stokerctl: unknown command '%s'\n%s", cmd.c_str(), kUsage);
      return 2;
    }
    // Its first line and the more indented lines under it, up to the next command.
    std::size_t end = usage.find('\n', at);
    while (end != std::string::npos && usage.compare(end + 1, 3, "   ") == 0) end = usage.find('\n', end + 1);
    std::printf("usage: stokerctl%s\n", usage.substr(at + 1, end == std::string::npos ? std::string::npos : end - at - 1).c_str());
    return 0;
  }
  if (cmd == "consume") return stoker::ctl::consume_main(argc - 1, argv + 1);
  if (cmd == "status") return stoker::ctl::status_main(argc - 1, argv + 1);
  if (cmd == "drain") return stoker::ctl::drain_main(argc - 1, argv + 1);
  if (cmd == "reload") return stoker::ctl::reload_main(argc - 1, argv + 1);
  if (cmd == "top") return stoker::ctl::top_main(argc - 1, argv + 1);
  if (cmd == "preview") return stoker::ctl::preview_main(argc - 1, argv + 1);
  std::fprintf(stderr, "stokerctl: unknown command '%s'\n%s", cmd.c_str(), kUsage);
  return 2;
}
