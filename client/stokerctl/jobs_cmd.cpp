// stokerctl drain / reload: jobs coming and going in a running stokerd (Command messages).
#include <cstdio>
#include <string>

#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "stoker/stoker.h"

namespace stoker::ctl {
namespace {

using Json = nlohmann::json;

int run_drain(const std::string& socket, const std::string& job) {
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

int run_reload(const std::string& socket) {
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

}  // namespace

Command add_drain(CLI::App& root) {
  CLI::App* cmd = describe(root.add_subcommand("drain", "stop planning JOB's batches; its consumers get those already "
                                                        "planned, then are told;\nthe job is removed (until a reload "
                                                        "or restart brings it back)"),
                           "drain JOB [--socket PATH]");
  struct Args {
    std::string socket, job;
  };
  auto a = std::make_shared<Args>();
  // Not ->required(): a missing JOB keeps its own message, which shows the synopsis.
  cmd->add_option("JOB", a->job, "the job to drain")->type_name("");
  add_socket_option(*cmd, a->socket);
  return {cmd, [a] { return run_drain(a->socket, a->job); }};
}

Command add_reload(CLI::App& root) {
  CLI::App* cmd = describe(root.add_subcommand("reload", "make stokerd re-read its config (over the control socket; "
                                                         "SIGHUP does the same): new jobs\nstart, changed ones restart, "
                                                         "removed ones drain, unchanged ones are not disturbed; waits\n"
                                                         "for the outcome and exits 1 with the refusal (FILE:LINE) when "
                                                         "the new config is refused"),
                           "reload [--socket PATH]");
  auto socket = std::make_shared<std::string>();
  add_socket_option(*cmd, *socket);
  return {cmd, [socket] { return run_reload(*socket); }};
}

}  // namespace stoker::ctl
