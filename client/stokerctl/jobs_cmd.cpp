// stokerctl drain / reload: jobs coming and going in a running stokerd (Command messages).
#include <cstdio>
#include <cstring>
#include <string>

#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "stoker/stoker.h"

namespace stoker::ctl {
namespace {

using Json = nlohmann::json;

// Reads "--socket PATH" and one positional argument (may be absent); false on a bad option.
bool parse(int argc, char** argv, const char* cmd, std::string& socket, std::string& positional) {
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--socket") == 0 && i + 1 < argc) {
      socket = argv[++i];
    } else if (argv[i][0] != '-' && positional.empty()) {
      positional = argv[i];
    } else {
      std::fprintf(stderr, "stokerctl %s: bad option %s\n", cmd, argv[i]);
      return false;
    }
  }
  return true;
}

}  // namespace

int drain_main(int argc, char** argv) {
  std::string socket, job;
  if (!parse(argc, argv, "drain", socket, job)) return 2;
  if (job.empty()) {
    std::fprintf(stderr, "stokerctl drain: which job? usage: stokerctl drain JOB [--socket PATH]\n");
    return 2;
  }
  const std::string request = Json{{"op", "drain"}, {"job", job}}.dump();
  char* reply = nullptr;
  if (stoker_daemon_command(socket.empty() ? nullptr : socket.c_str(), request.c_str(), 10000, &reply) != STOKER_OK) {
    std::fprintf(stderr, "stokerctl drain: %s\n", stoker_last_error());
    return 1;
  }
  const Json r = Json::parse(reply, nullptr, false);
  stoker_free(reply);
  if (r.is_discarded() || !r.is_object()) {
    std::fprintf(stderr, "stokerctl drain: the daemon's reply is not JSON\n");
    return 1;
  }
  if (!r.value("ok", false)) {
    std::fprintf(stderr, "stokerctl drain: %s\n", r.value("error", std::string("refused")).c_str());
    return 1;
  }
  std::printf("job %s draining: %d consumer(s) get the batches already planned, then are told; "
              "the job is removed once they are gone\n",
              job.c_str(), r.value("consumers", 0));
  return 0;
}

int reload_main(int argc, char** argv) {
  std::string socket, extra;
  if (!parse(argc, argv, "reload", socket, extra) || !extra.empty()) {
    if (!extra.empty()) std::fprintf(stderr, "stokerctl reload: takes no argument (got '%s')\n", extra.c_str());
    return 2;
  }
  // A `reload` command on the control socket, answered once the new config is applied or
  // refused. Never a signal to the pid in status: in another PID namespace (stokerd as PID 1
  // of its container) that number is another process. The wait covers loading the datasets
  // of new and changed jobs (a first scan or tar index of a large one takes minutes).
  constexpr int kWaitMs = 30 * 60 * 1000;
  char* reply = nullptr;
  if (stoker_daemon_command(socket.empty() ? nullptr : socket.c_str(), Json{{"op", "reload"}}.dump().c_str(), kWaitMs,
                            &reply) != STOKER_OK) {
    std::fprintf(stderr, "stokerctl reload: %s\n", stoker_last_error());
    return 1;
  }
  const Json r = Json::parse(reply, nullptr, false);
  stoker_free(reply);
  if (r.is_discarded() || !r.is_object()) {
    std::fprintf(stderr, "stokerctl reload: the daemon's reply is not JSON\n");
    return 1;
  }
  if (!r.value("ok", false)) {
    // The refusal as the daemon logged it: FILE:LINE:COL: KEY: message.
    std::fprintf(stderr, "stokerctl reload: %s\n", r.value("error", std::string("refused")).c_str());
    return 1;
  }
  std::printf("%s\n", r.value("message", std::string("reload applied")).c_str());
  return 0;
}

}  // namespace stoker::ctl
