// ControlServer's part in jobs coming and going while the daemon runs: reloads (SIGHUP, or
// the `reload` command of `stokerctl reload`, which is told the outcome), the Command message
// (a client defines a job; `stokerctl drain`), draining and removal.
// Loading (a scan, a tar index) happens on JobLoader's threads; everything here runs on the
// control thread, so the jobs that are not touched keep being served throughout.
#include <algorithm>
#include <cstdio>
#include <memory>
#include <unistd.h>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "control/control_server.hpp"
#include "job/job.hpp"
#include "jobs/job_loader.hpp"
#include "jobs/job_table.hpp"
#include "control/peer_access.hpp"
#include "source/read_access.hpp"

namespace stoker::control {

using delivery::DeviceDelivery;
using delivery::DeviceRing;
using delivery::PeerProcess;
using job::Job;
using job::AttachResult;
using job::JobStats;
using job::ReaderStatus;
using job::RingStatus;
using job::WorkerPool;
using jobs::JobLoader;
using jobs::JobTable;
using jobs::LoadResult;
namespace {

using Json = nlohmann::json;

std::string reply_error(const std::string& why) { return Json{{"ok", false}, {"error", why}}.dump(); }

// "py-<12 hex>": a client-defined job's name, from its definition, so every rank that sends
// the same definition gets the same job.
std::string client_job_name(const std::string& definition) {
  std::uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a
  for (const char c : definition) h = (h ^ static_cast<unsigned char>(c)) * 0x100000001b3ull;
  char name[24];
  std::snprintf(name, sizeof name, "py-%012llx", static_cast<unsigned long long>(h & 0xffffffffffffull));
  return name;
}

}  // namespace

bool ControlServer::handle_command(Session& s, const std::uint8_t* data, std::size_t n) {
  const std::string text(reinterpret_cast<const char*>(data) + sizeof(proto::MessageHeader),
                         n - sizeof(proto::MessageHeader));
  const Json req = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (req.is_discarded() || !req.is_object() || !req.contains("op") || !req["op"].is_string()) {
    return send_json(s, reply_error("a command is a JSON object with a string \"op\""), proto::MsgType::kStatusReply);
  }
  if (s.command_pending) {
    return send_json(s, reply_error("one command at a time per connection"), proto::MsgType::kStatusReply);
  }
  const std::string op = req["op"].get<std::string>();
  const std::string who = "pid " + std::to_string(s.peer_pid) + " uid " + std::to_string(s.peer_uid);
  if (op == "drain") {
    if (s.peer_uid != ::geteuid() && s.peer_uid != 0) {
      spdlog::warn("refused drain from {}: only stokerd's own user or root may drain jobs", who);
      return send_json(s, reply_error("only stokerd's own user (uid " + std::to_string(::geteuid()) +
                                      ") or root may drain jobs"),
                       proto::MsgType::kStatusReply);
    }
    const std::string name = req.contains("job") && req["job"].is_string() ? req["job"].get<std::string>() : "";
    Job* job = jobs_.serving(name);
    if (job == nullptr) {
      std::string names;
      for (Job* j : jobs_.serving_jobs()) names += (names.empty() ? "" : ", ") + j->name();
      return send_json(s, reply_error("no serving job '" + name + "'; jobs: " + names), proto::MsgType::kStatusReply);
    }
    std::size_t consumers = 0;
    for (const auto& [fd, other] : sessions_) consumers += other.job == job ? 1 : 0;
    drain_job(job, "drained by stokerctl drain from " + who);
    return send_json(s, Json{{"ok", true}, {"job", name}, {"consumers", consumers}}.dump(), proto::MsgType::kStatusReply);
  }
  if (op == "reload") {
    // Through the socket, never by a pid: a pid read from status names another process in
    // another PID namespace (stokerd as PID 1 of its container). Same peers as drain.
    if (s.peer_uid != ::geteuid() && s.peer_uid != 0) {
      spdlog::warn("refused reload from {}: only stokerd's own user or root may reload its config", who);
      return send_json(s, reply_error("only stokerd's own user (uid " + std::to_string(::geteuid()) +
                                      ") or root may reload its config"),
                       proto::MsgType::kStatusReply);
    }
    if (sources_.config_file.empty()) {
      return send_json(s, reply_error("this stokerd has no config file to re-read"), proto::MsgType::kStatusReply);
    }
    request_reload(who, &s);  // answered by finish_reload once applied or refused
    return true;
  }
  if (op == "define_job") {
    if (!sources_.client_jobs) {
      return send_json(s, reply_error("this stokerd does not take jobs from clients (server.client_jobs: false in " +
                                      sources_.config_file.string() + "); define the job in its config"),
                       proto::MsgType::kStatusReply);
    }
    if (s.peer_uid != ::geteuid() && s.peer_uid != 0 && !sources_.client_jobs_for_group) {
      // Other users' jobs are read with their own permissions (below), but each still costs
      // the daemon memory and workers: not for other users unless allowed.
      return send_json(s, reply_error("only stokerd's own user (uid " + std::to_string(::geteuid()) +
                                      ") or root may define jobs; other users (server.group) may when the config says "
                                      "server.client_jobs_for_group: true"),
                       proto::MsgType::kStatusReply);
    }
    if (!req.contains("config") || !req["config"].is_string()) {
      return send_json(s, reply_error("define_job needs \"config\": the job's YAML text"), proto::MsgType::kStatusReply);
    }
    const std::string origin = "<job defined by client " + who + ">";
    config::JobConfig jc;
    try {
      jc = config::parse_client_job(req["config"].get<std::string>(), origin);
    } catch (const config::ConfigError& e) {
      return send_json(s, reply_error(e.what()), proto::MsgType::kStatusReply);
    }
    // Shared by definition among the clients of one uid (the ranks of a training run): the
    // name the client chose is not part of it, the uid is, since what a job may read depends
    // on who defined it.
    const std::uint32_t uid = s.peer_uid;
    const std::string key = "uid " + std::to_string(uid) + "\n" + jc.definition;
    if (Job* same = jobs_.defined(key)) {
      return send_json(s, Json{{"ok", true}, {"job", same->name()}, {"created", false}}.dump(),
                       proto::MsgType::kStatusReply);
    }
    if (auto it = defining_.find(key); it != defining_.end()) {
      // Already loading (another rank sent it first): wait for that load, start no other.
      it->second.waiters.emplace_back(s.fd, s.token);
      s.command_pending = true;
      return true;
    }
    // The caps count loads in flight as well as serving jobs: checked and taken here, on the
    // control thread, before the load starts, so no number of concurrent definitions passes.
    std::size_t total = defining_.size(), mine = 0;
    for (const auto& [k, d] : defining_) mine += d.uid == uid ? 1 : 0;
    for (Job* j : jobs_.serving_jobs()) {
      const JobTable::Entry* e = jobs_.entry(j);
      if (!e->defined_by_client) continue;
      ++total;
      mine += e->defined_by_uid == uid ? 1 : 0;
    }
    if (total >= sources_.max_client_jobs) {
      return send_json(s, reply_error("this stokerd already serves or loads " + std::to_string(total) +
                                      " client-defined jobs (at most " + std::to_string(sources_.max_client_jobs) +
                                      "); close unused loaders or define the job in the config"),
                       proto::MsgType::kStatusReply);
    }
    if (mine >= sources_.client_jobs_per_user) {
      return send_json(s, reply_error("uid " + std::to_string(uid) + " already has " + std::to_string(mine) +
                                      " client-defined jobs serving or loading (at most " +
                                      std::to_string(sources_.client_jobs_per_user) +
                                      " per user, server.client_jobs_per_user); close unused loaders"),
                       proto::MsgType::kStatusReply);
    }
    // Another user's job reads only what that user could (source/read_access.hpp): stokerd's
    // own user and root read as stokerd.
    std::shared_ptr<const source::ReadAs> read_as;
    if (uid != ::geteuid() && uid != 0) {
      const PeerCredentials peer{s.peer_pid, uid, s.peer_gid};
      read_as = std::make_shared<const source::ReadAs>(source::ReadAs{uid, s.peer_gid, peer_groups(peer)});
    }
    jc.name = client_job_name(key);
    spdlog::info("job {}: defined by client {}; loading its dataset{}", jc.name, who,
                 read_as ? " with that user's permissions" : "");
    s.command_pending = true;
    defining_[key] = Defining{uid, {{s.fd, s.token}}};
    loader_->define(key, std::move(jc), sources_.state_dir, origin, std::move(read_as));
    return true;
  }
  if (op == "samples") {
    // The job's samples as [path, label] by id, a page at a time (a million samples would
    // exceed a client's reply backlog in one): loader.dataset.samples is exactly the
    // daemon's list, whatever the source type.
    constexpr std::uint64_t kMaxPage = 100000;
    const std::string name = req.contains("job") && req["job"].is_string() ? req["job"].get<std::string>() : "";
    const Job* job = jobs_.serving(name);
    if (job == nullptr) return send_json(s, reply_error("no serving job '" + name + "'"), proto::MsgType::kStatusReply);
    if (const std::string why = client_job_refusal(s, job); !why.empty()) {
      return send_json(s, reply_error(why), proto::MsgType::kStatusReply);
    }
    const auto& dataset = job->dataset();
    const auto& samples = dataset.samples;
    const std::uint64_t offset = req.contains("offset") && req["offset"].is_number_unsigned() ? req["offset"].get<std::uint64_t>() : 0;
    std::uint64_t count = req.contains("count") && req["count"].is_number_unsigned() ? req["count"].get<std::uint64_t>() : kMaxPage;
    count = std::min({count, kMaxPage, offset < samples.size() ? samples.size() - offset : 0});
    Json page = Json::array();
    for (std::uint64_t i = offset; i < offset + count; ++i) page.push_back({dataset.path(i), samples[i].label});
    return send_json(s, Json{{"ok", true}, {"total", samples.size()}, {"offset", offset}, {"samples", std::move(page)}}.dump(),
                     proto::MsgType::kStatusReply);
  }
  return send_json(s, reply_error("unknown command \"" + op + "\" (known: define_job, drain, reload, samples)"),
                   proto::MsgType::kStatusReply);
}

std::string ControlServer::client_job_refusal(const Session& s, const Job* job) const {
  const JobTable::Entry* e = jobs_.entry(job);
  if (e == nullptr || !e->defined_by_client || e->defined_by_uid == s.peer_uid || s.peer_uid == ::geteuid() ||
      s.peer_uid == 0) {
    return {};
  }
  return "job '" + job->name() + "' was defined by another user (uid " + std::to_string(e->defined_by_uid) +
         ") and is theirs alone: define the job yourself (a client-defined job is shared only among the clients of "
         "one uid)";
}

void ControlServer::request_reload(const std::string& requested_by, Session* waiter) {
  if (sources_.config_file.empty()) {
    spdlog::warn("received SIGHUP but this stokerd has no config file to re-read");
    return;
  }
  if (waiter != nullptr) waiter->command_pending = true;
  if (reload_running_) {
    // The running load may have read the file before this request's edit: read it again
    // after. Any number of requests meanwhile are one queued reload.
    if (waiter != nullptr) queued_waiters_.push_back({waiter->fd, waiter->token});
    spdlog::info("reload requested by {} while one is loading; {}", requested_by,
                 reload_queued_ ? "joins the one queued" : "queued, starts when that one is applied");
    queued_requested_by_ = reload_queued_ ? queued_requested_by_ + ", " + requested_by : requested_by;
    reload_queued_ = true;
    return;
  }
  if (waiter != nullptr) reload_waiters_.push_back({waiter->fd, waiter->token});
  running_requested_by_ = requested_by;
  start_reload();
}

void ControlServer::start_reload() {
  std::map<std::string, std::string> serving;
  for (Job* j : jobs_.serving_jobs()) {
    if (!jobs_.entry(j)->defined_by_client) serving[j->name()] = j->config().definition;
  }
  // reload_running_ is false here, and JobLoader's own flag clears before its result is
  // applied, so this never finds a reload in progress.
  if (loader_->reload(sources_.config_file, sources_.state_dir, std::move(serving))) {
    reload_running_ = true;
    spdlog::info("reload requested by {}: re-reading {}", running_requested_by_, sources_.config_file.string());
  } else {
    finish_reload(false, "a reload was still loading; try again");
  }
}

void ControlServer::apply_loaded() {
  for (LoadResult& r : loader_->take_done()) {
    if (r.kind == LoadResult::Kind::kReload) {
      apply_reload(r);
      if (reload_queued_) {  // the last request's edit is read now
        reload_queued_ = false;
        reload_waiters_ = std::move(queued_waiters_);
        queued_waiters_.clear();
        running_requested_by_ = std::move(queued_requested_by_);
        queued_requested_by_.clear();
        start_reload();
      }
    } else {
      apply_define(r);
    }
  }
}

void ControlServer::apply_reload(LoadResult& r) {
  reload_running_ = false;
  if (!r.error.empty()) {
    spdlog::error("reload refused, the running jobs keep serving: {}", r.error);
    finish_reload(false, "reload refused, the running jobs keep serving: " + r.error);
    return;
  }
  const config::Config& cfg = *r.config;
  std::size_t added = 0, restarted = 0, unchanged = 0, removed = 0;
  std::string failed;  // jobs the new config names that could not start
  for (Job* j : jobs_.serving_jobs()) {
    if (jobs_.entry(j)->defined_by_client) continue;
    bool kept = false;
    for (const auto& jc : cfg.jobs) kept = kept || jc.name == j->name();
    if (!kept) {
      drain_job(j, "removed from the config by a reload");
      ++removed;
    }
  }
  for (std::size_t i = 0; i < cfg.jobs.size(); ++i) {
    if (!r.prepared[i]) {
      ++unchanged;
      continue;
    }
    Job* old = jobs_.serving(cfg.jobs[i].name);
    if (old != nullptr) {
      drain_job(old, "changed in the config; restarted by a reload");
      ++restarted;
    } else {
      ++added;
    }
    try {
      jobs_.add(std::move(*r.prepared[i]));
    } catch (const std::exception& e) {
      spdlog::error("reload: job {} could not start: {}", cfg.jobs[i].name, e.what());
      failed += (failed.empty() ? "" : "; ") + ("job " + cfg.jobs[i].name + " could not start: " + e.what());
    }
  }
  const std::string summary = "reload of " + cfg.file.string() + " applied: " + std::to_string(added) +
                              " job(s) added, " + std::to_string(restarted) + " restarted, " + std::to_string(removed) +
                              " removed, " + std::to_string(unchanged) + " unchanged";
  spdlog::info("{} (server settings are read at start only)", summary);
  finish_reload(failed.empty(), failed.empty() ? summary : summary + "; " + failed);
}

void ControlServer::finish_reload(bool ok, const std::string& message) {
  last_reload_ = ReloadOutcome{std::chrono::system_clock::now(), ok, message, running_requested_by_};
  const std::string reply = ok ? Json{{"ok", true}, {"message", message}}.dump() : reply_error(message);
  const auto now = std::chrono::steady_clock::now();
  for (const Waiter& w : reload_waiters_) {
    auto it = sessions_.find(w.fd);
    if (it == sessions_.end() || it->second.token != w.token) continue;  // it left meanwhile
    it->second.command_pending = false;
    it->second.last_message = now;  // idle from the reply on, not from the request
    if (!send_json(it->second, reply, proto::MsgType::kStatusReply)) doomed_.push_back(w.fd);
  }
  reload_waiters_.clear();
}

void ControlServer::apply_define(LoadResult& r) {
  auto node = defining_.extract(r.definition);  // the load no longer counts as in flight
  const auto now = std::chrono::steady_clock::now();
  if (node.empty()) return;
  std::vector<Session*> waiting;
  for (const auto& [fd, token] : node.mapped().waiters) {
    auto it = sessions_.find(fd);
    if (it != sessions_.end() && it->second.token == token) {
      it->second.command_pending = false;
      it->second.last_message = now;  // idle from the reply on
      waiting.push_back(&it->second);
    }
  }
  if (waiting.empty()) return;  // every client that asked left while its job loaded: nothing is kept
  std::string reply;
  if (!r.error.empty()) {
    reply = reply_error(r.error);
  } else if (Job* same = jobs_.defined(r.definition)) {
    reply = Json{{"ok", true}, {"job", same->name()}, {"created", false}}.dump();
  } else if (jobs_.serving(r.job->config.name) != nullptr) {
    reply = reply_error("a job named '" + r.job->config.name + "' is already served");
  } else {
    try {
      Job* job = jobs_.add(std::move(*r.job), /*defined_by_client=*/true, r.definition, node.mapped().uid);
      reply = Json{{"ok", true}, {"job", job->name()}, {"created", true}}.dump();
    } catch (const std::exception& e) {
      reply = reply_error(e.what());
    }
  }
  for (Session* s : waiting) {
    if (!send_json(*s, reply, proto::MsgType::kStatusReply)) doomed_.push_back(s->fd);
  }
}

void ControlServer::drain_job(Job* job, const std::string& reason) {
  jobs_.drain(job, reason);
  notify();  // consumers waiting for a batch that will not come are told on the next turn
}

void ControlServer::settle_draining() {
  const auto now = std::chrono::steady_clock::now();
  for (auto& [fd, s] : sessions_) {
    if (s.job == nullptr || !s.job->draining()) continue;
    const JobTable::Entry* e = jobs_.entry(s.job);
    if (e == nullptr || std::chrono::duration<double>(now - e->drain_started).count() < sources_.drain_timeout_s) {
      continue;
    }
    send_error(s, proto::ErrorCode::kJobDrained,
               "job '" + s.job->name() + "' was drained (" + e->drain_reason + ") and this consumer did not finish its " +
                   "batches within " + std::to_string(static_cast<int>(sources_.drain_timeout_s)) + " s");
    doomed_.push_back(fd);
  }
  jobs_.collect(
      [this](const Job* job) {
        for (const auto& [fd, s] : sessions_) {
          if (s.job == job) return true;
        }
        return false;
      },
      sources_.client_job_linger_s);
}

}  // namespace stoker::control
