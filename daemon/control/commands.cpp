#include "control/commands.hpp"

#include <algorithm>
#include <thread>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "log/log.hpp"
#include "control/client_job_access.hpp"
#include "control/command_reply.hpp"
#include "control/sessions.hpp"
#include "job/job.hpp"
#include "jobs/job_loader.hpp"
#include "jobs/job_table.hpp"

namespace stoker::control {

using job::Job;
using jobs::LoadResult;
using Json = nlohmann::json;

Commands::Commands(jobs::JobTable& jobs, Sessions& sessions, const JobSources& sources, std::function<void()> wake)
    : jobs_(jobs),
      sessions_(sessions),
      sources_(sources),
      wake_(std::move(wake)),
      loader_(std::make_unique<jobs::JobLoader>(wake_)),
      reloads_(*loader_, jobs, sessions, sources, [this](Job* job, const std::string& reason) { drain_job(job, reason); }),
      definitions_(*loader_, jobs, sessions, sources) {}

Commands::~Commands() { stop_loads(); }

void Commands::stop_loads() { loader_.reset(); }

bool Commands::handle(Session& s, const std::uint8_t* data, std::size_t n) {
  auto reply = [&](const std::string& json) { return sessions_.send_json(s, json, proto::MsgType::kStatusReply); };
  const std::string text(reinterpret_cast<const char*>(data) + sizeof(proto::MessageHeader),
                         n - sizeof(proto::MessageHeader));
  const Json req = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (req.is_discarded() || !req.is_object() || !req.contains("op") || !req["op"].is_string()) {
    return reply(reply_error("a command is a JSON object with a string \"op\""));
  }
  if (s.command_pending) return reply(reply_error("one command at a time per connection"));
  const std::string op = req["op"].get<std::string>();
  const std::string who = "pid " + std::to_string(s.peer_pid) + " uid " + std::to_string(s.peer_uid);
  if (op == "drain") {
    if (s.peer_uid != ::geteuid() && s.peer_uid != 0) {
      stoker::log::warn("refused drain from {}: only stokerd's own user or root may drain jobs", who);
      return reply(reply_error("only stokerd's own user (uid " + std::to_string(::geteuid()) +
                               ") or root may drain jobs"));
    }
    const std::string name = req.contains("job") && req["job"].is_string() ? req["job"].get<std::string>() : "";
    Job* job = jobs_.serving(name);
    if (job == nullptr) {
      std::string names;
      for (Job* j : jobs_.serving_jobs()) names += (names.empty() ? "" : ", ") + j->name();
      return reply(reply_error("no serving job '" + name + "'; jobs: " + names));
    }
    const std::size_t consumers = sessions_.consumers_of(job);
    drain_job(job, "drained by stokerctl drain from " + who);
    return reply(Json{{"ok", true}, {"job", name}, {"consumers", consumers}}.dump());
  }
  if (op == "prepare") {
    // Fills the job's decoded store ahead of training (stokerctl prepare); the progress is in
    // status (decoded_store.prepare). Same peers as drain: it costs the daemon's CPU.
    if (s.peer_uid != ::geteuid() && s.peer_uid != 0) {
      return reply(reply_error("only stokerd's own user (uid " + std::to_string(::geteuid()) +
                               ") or root may prepare a job's store"));
    }
    const std::string name = req.contains("job") && req["job"].is_string() ? req["job"].get<std::string>() : "";
    Job* job = jobs_.serving(name);
    if (job == nullptr) return reply(reply_error("no serving job '" + name + "'"));
    const unsigned threads = req.contains("threads") && req["threads"].is_number_unsigned()
                                 ? req["threads"].get<unsigned>()
                                 : std::max(1u, std::thread::hardware_concurrency());
    if (!job->start_prepare(threads)) {
      return reply(reply_error("job '" + name + "' has no decoded_store (the job key decoded_store: {max_side, "
                               "path, bytes})"));
    }
    return reply(Json{{"ok", true}, {"job", name}, {"samples", job->dataset().samples.size()}}.dump());
  }
  if (op == "reload") {
    // Through the socket, never by a pid: a pid read from status names another process in
    // another PID namespace (stokerd as PID 1 of its container). Same peers as drain.
    if (s.peer_uid != ::geteuid() && s.peer_uid != 0) {
      stoker::log::warn("refused reload from {}: only stokerd's own user or root may reload its config", who);
      return reply(reply_error("only stokerd's own user (uid " + std::to_string(::geteuid()) +
                               ") or root may reload its config"));
    }
    if (sources_.config_file.empty()) return reply(reply_error("this stokerd has no config file to re-read"));
    reloads_.request(who, &s);  // answered once applied or refused
    return true;
  }
  if (op == "define_job") {
    if (!sources_.client_jobs) {
      return reply(reply_error("this stokerd does not take jobs from clients (server.client_jobs: false in " +
                               sources_.config_file.string() + "); define the job in its config"));
    }
    if (s.peer_uid != ::geteuid() && s.peer_uid != 0 && !sources_.client_jobs_for_group) {
      // Other users' jobs are read with their own permissions (job_definitions.cpp), but each
      // still costs the daemon memory and workers: not for other users unless allowed.
      return reply(reply_error("only stokerd's own user (uid " + std::to_string(::geteuid()) +
                               ") or root may define jobs; other users (server.group) may when the config says "
                               "server.client_jobs_for_group: true"));
    }
    if (!req.contains("config") || !req["config"].is_string()) {
      return reply(reply_error("define_job needs \"config\": the job's YAML text"));
    }
    return definitions_.define(s, req["config"].get<std::string>(), who);
  }
  if (op == "samples") {
    // The job's samples as [path, label] by id, a page at a time (a million samples would
    // exceed a client's reply backlog in one): loader.dataset.samples is exactly the
    // daemon's list, whatever the source type.
    constexpr std::uint64_t kMaxPage = 100000;
    const std::string name = req.contains("job") && req["job"].is_string() ? req["job"].get<std::string>() : "";
    const Job* job = jobs_.serving(name);
    if (job == nullptr) return reply(reply_error("no serving job '" + name + "'"));
    if (const base::Status access = client_job_access(jobs_, s.peer_uid, job); !access) {
      return reply(reply_error(access.message()));
    }
    const auto& dataset = job->dataset();
    const auto& samples = dataset.samples;
    const std::uint64_t offset =
        req.contains("offset") && req["offset"].is_number_unsigned() ? req["offset"].get<std::uint64_t>() : 0;
    std::uint64_t count =
        req.contains("count") && req["count"].is_number_unsigned() ? req["count"].get<std::uint64_t>() : kMaxPage;
    count = std::min({count, kMaxPage, offset < samples.size() ? samples.size() - offset : 0});
    Json page = Json::array();
    for (std::uint64_t i = offset; i < offset + count; ++i) page.push_back({dataset.path(i), samples[i].label});
    return reply(
        Json{{"ok", true}, {"total", samples.size()}, {"offset", offset}, {"samples", std::move(page)}}.dump());
  }
  return reply(reply_error("unknown command \"" + op + "\" (known: define_job, drain, prepare, reload, samples)"));
}

void Commands::apply_loaded() {
  for (LoadResult& r : loader_->take_done()) {
    if (r.kind == LoadResult::Kind::kReload) {
      reloads_.apply(r);
    } else {
      definitions_.apply(r);
    }
  }
}

void Commands::drain_job(Job* job, const std::string& reason) {
  jobs_.drain(job, reason);
  wake_();  // consumers waiting for a batch that will not come are told on the next turn
}

void Commands::settle_draining() {
  sessions_.evict_overdue_drains(sources_.drain_timeout_s);
  jobs_.collect([this](const Job* job) { return sessions_.serves(job); }, sources_.client_job_linger_s);
}

}  // namespace stoker::control
