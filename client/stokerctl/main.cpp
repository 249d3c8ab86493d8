// stokerctl: look at and consume from a running stokerd.
#include <cstdio>
#include <cstring>
#include <string>

#include "commands.hpp"
#include "stoker/stoker.h"

namespace {

constexpr const char* kUsage =
    "usage: stokerctl <command> [options]\n"
    "  consume --job NAME [--rank R] [--batches N | --epochs E] [--ids] [--dump DIR]\n"
    "          [--start-epoch E] [--start-batch B] [--hold-ms MS] [--timeout-ms MS] [--socket PATH]\n"
    "          [--device cuda[:N]]  take device batches; --dump then reads them back from the GPU\n"
    "      connect as a real consumer; one JSON line per batch, then a throughput line\n"
    "  status [--socket PATH]\n"
    "      jobs, consumers, ring occupancy, images/s and error counts as JSON\n";

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "-h") == 0) {
    std::fputs(kUsage, argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  const std::string cmd = argv[1];
  if (cmd == "consume") return stoker::ctl::consume_main(argc - 1, argv + 1);
  if (cmd == "status") return stoker::ctl::status_main(argc - 1, argv + 1);
  std::fprintf(stderr, "stokerctl: unknown command '%s'\n%s", cmd.c_str(), kUsage);
  return 2;
}
