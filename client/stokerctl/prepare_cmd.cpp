// stokerctl prepare JOB: fills the job's decoded store ahead of training (the daemon's
// threads do the work; this follows their progress in status and prints it on one line:
// samples/s and ETA). Resumable: samples already stored are skipped, so running it again after
// an interruption (of stokerctl or of the daemon) continues where it was.
#include <chrono>
#include <cstdio>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "stoker/stoker.h"

namespace stoker::ctl {
namespace {

using Json = nlohmann::json;

bool call(const std::string& socket, const Json& request, Json& reply) {
  char* text = nullptr;
  if (stoker_daemon_command(socket.empty() ? nullptr : socket.c_str(), request.dump().c_str(), 10000, &text) !=
      STOKER_OK) {
    std::fprintf(stderr, "stokerctl prepare: %s\n", stoker_last_error());
    return false;
  }
  reply = Json::parse(text, nullptr, false);
  stoker_free(text);
  if (reply.is_discarded() || !reply.is_object()) {
    std::fprintf(stderr, "stokerctl prepare: the daemon's reply is not JSON\n");
    return false;
  }
  return true;
}

// The job's decoded_store.prepare object from status, or null.
Json progress(const std::string& socket, const std::string& job) {
  char* text = nullptr;
  if (stoker_daemon_status(socket.empty() ? nullptr : socket.c_str(), &text) != STOKER_OK) return nullptr;
  const Json st = Json::parse(text, nullptr, false);
  stoker_free(text);
  if (st.is_discarded() || !st.contains("jobs")) return nullptr;
  for (const auto& j : st["jobs"]) {
    if (j.value("name", "") == job && j.contains("decoded_store")) return j["decoded_store"]["prepare"];
  }
  return nullptr;
}

std::string duration(double s) {
  const auto t = static_cast<long>(s + 0.5);
  char b[32];
  std::snprintf(b, sizeof b, "%ld:%02ld:%02ld", t / 3600, t / 60 % 60, t % 60);
  return b;
}

int run_prepare(const std::string& socket, const std::string& job, unsigned threads) {
  if (job.empty()) {
    std::fprintf(stderr, "stokerctl prepare: which job? usage: stokerctl prepare JOB [--threads N] [--socket PATH]\n");
    return 2;
  }
  Json request{{"op", "prepare"}, {"job", job}};
  if (threads > 0) request["threads"] = threads;
  Json r;
  if (!call(socket, request, r)) return 1;
  if (!r.value("ok", false)) {
    std::fprintf(stderr, "stokerctl prepare: %s\n", r.value("error", std::string("refused")).c_str());
    return 1;
  }
  const bool tty = isatty(fileno(stdout)) != 0;
  const auto start = std::chrono::steady_clock::now();
  // The rate is measured from the first progress read on (what was done before it took an
  // unknown time): until a second read there is no rate, and the line says "starting".
  std::optional<std::pair<std::chrono::steady_clock::time_point, std::uint64_t>> first;
  std::uint64_t done = 0, total = 0, stored = 0, failed = 0;
  bool printed = false;  // a progress line (a tty's \r line needs a newline after it)
  for (;;) {
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    const Json p = progress(socket, job);
    if (p.is_null()) {
      std::fprintf(stderr, "\nstokerctl prepare: job %s is gone (daemon stopped or job drained); run it again to "
                           "resume\n", job.c_str());
      return 1;
    }
    done = p.value("done", std::uint64_t{0});
    total = p.value("total", std::uint64_t{0});
    stored = p.value("stored", std::uint64_t{0});
    failed = p.value("failed", std::uint64_t{0});
    const bool running = p.value("running", false);
    const auto now = std::chrono::steady_clock::now();
    std::string speed = "starting";
    if (!first) {
      first.emplace(now, done);
    } else {
      const double s = std::chrono::duration<double>(now - first->first).count();
      const double rate = s > 0 ? static_cast<double>(done - std::min(done, first->second)) / s : 0;
      const std::string eta = rate > 0 && total > done ? duration(static_cast<double>(total - done) / rate) : "-";
      char b[96];
      std::snprintf(b, sizeof b, "%.0f samples/s, ETA %s", rate, eta.c_str());
      speed = b;
    }
    if (!running) break;  // the last line below says what was done
    std::printf("%sprepare %s: %llu/%llu samples (%.0f%%), %s, stored %llu, not stored %llu%s", tty ? "\r" : "",
                job.c_str(), static_cast<unsigned long long>(done), static_cast<unsigned long long>(total),
                total ? 100.0 * done / total : 100.0, speed.c_str(), static_cast<unsigned long long>(stored),
                static_cast<unsigned long long>(failed), tty ? "   " : "\n");
    std::fflush(stdout);
    printed = true;
  }
  // A sample looked at that this fill neither stored nor failed was in the store already.
  const std::uint64_t already = done - std::min(done, stored + failed);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("%sprepare %s: done in %.1f s: %llu/%llu samples; %llu stored now (%.0f samples/s), %llu already "
              "stored, %llu not stored (unreadable, undecodable or no room)\n",
              tty && printed ? "\n" : "", job.c_str(), s, static_cast<unsigned long long>(done),
              static_cast<unsigned long long>(total), static_cast<unsigned long long>(stored),
              s > 0 ? static_cast<double>(stored + failed) / s : 0.0, static_cast<unsigned long long>(already),
              static_cast<unsigned long long>(failed));
  return 0;
}

}  // namespace

Command add_prepare(CLI::App& root) {
  CLI::App* cmd = describe(root.add_subcommand("prepare", "fill JOB's decoded store (job key decoded_store) ahead of "
                                                          "training, showing samples/s and ETA;\nresumable: samples "
                                                          "already stored are skipped"),
                           "prepare JOB [--threads N] [--socket PATH]");
  struct Args {
    std::string socket, job;
    unsigned threads = 0;
  };
  auto a = std::make_shared<Args>();
  cmd->add_option("JOB", a->job, "the job whose store to fill")->type_name("");
  cmd->add_option("--threads", a->threads, "decoding threads in stokerd (default: one per core)")
      ->transform(whole_number())
      ->option_text("N");
  add_socket_option(*cmd, a->socket);
  return {cmd, [a] { return run_prepare(a->socket, a->job, a->threads); }};
}

}  // namespace stoker::ctl
