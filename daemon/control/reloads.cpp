#include "control/reloads.hpp"

#include <map>

#include <nlohmann/json.hpp>

#include "log/log.hpp"
#include "control/command_reply.hpp"
#include "control/sessions.hpp"
#include "core/check.hpp"
#include "job/job.hpp"
#include "jobs/job_loader.hpp"
#include "jobs/job_table.hpp"

namespace stoker::control {

using job::Job;
using jobs::LoadResult;

Reloads::Reloads(jobs::JobLoader& loader, jobs::JobTable& jobs, Sessions& sessions, const JobSources& sources,
                 std::function<void(Job*, const std::string&)> drain)
    : loader_(loader), jobs_(jobs), sessions_(sessions), sources_(sources), drain_(std::move(drain)) {}

const char* Reloads::state() const { return queued_ ? "loading, one more queued" : running_ ? "loading" : "idle"; }

void Reloads::request(const std::string& requested_by, Session* waiter) {
  if (sources_.config_file.empty()) {
    stoker::log::warn("received SIGHUP but this stokerd has no config file to re-read");
    return;
  }
  if (waiter != nullptr) waiter->command_pending = true;
  if (running_) {
    // The running load may have read the file before this request's edit: read it again
    // after. Any number of requests meanwhile are one queued reload.
    if (waiter != nullptr) queued_waiters_.push_back({waiter->fd, waiter->token});
    stoker::log::info("reload requested by {} while one is loading; {}", requested_by,
                      queued_ ? "joins the one queued" : "queued, starts when that one is applied");
    queued_requested_by_ = queued_ ? queued_requested_by_ + ", " + requested_by : requested_by;
    queued_ = true;
    return;
  }
  if (waiter != nullptr) running_waiters_.push_back({waiter->fd, waiter->token});
  running_requested_by_ = requested_by;
  start();
}

void Reloads::start() {
  std::map<std::string, std::string> serving;
  for (Job* j : jobs_.serving_jobs()) {
    if (!jobs_.entry(j)->defined_by_client) serving[j->name()] = j->config().definition;
  }
  // running_ is false here, and JobLoader's own flag clears before its result is applied, so
  // this never finds a reload in progress.
  if (loader_.reload(sources_.config_file, sources_.state_dir, std::move(serving))) {
    running_ = true;
    stoker::log::info("reload requested by {}: re-reading {}", running_requested_by_, sources_.config_file.string());
  } else {
    finish(false, "a reload was still loading; try again");
  }
}

void Reloads::apply(LoadResult& r) {
  running_ = false;
  if (!r.error.empty()) {
    stoker::log::error("reload refused, the running jobs keep serving: {}", r.error);
    finish(false, "reload refused, the running jobs keep serving: " + r.error);
  } else {
    STOKER_CHECK(r.config.has_value() && r.prepared.size() == r.config->jobs.size(),
                 "a reload's result holds {} prepared job(s) for its config's {}", r.prepared.size(),
                 r.config ? r.config->jobs.size() : 0);
    const config::Config& cfg = *r.config;
    std::size_t added = 0, restarted = 0, unchanged = 0, removed = 0;
    std::string failed;  // jobs the new config names that could not start
    for (Job* j : jobs_.serving_jobs()) {
      if (jobs_.entry(j)->defined_by_client) continue;
      bool kept = false;
      for (const auto& jc : cfg.jobs) kept = kept || jc.name == j->name();
      if (!kept) {
        drain_(j, "removed from the config by a reload");
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
        drain_(old, "changed in the config; restarted by a reload");
        ++restarted;
      } else {
        ++added;
      }
      try {
        jobs_.add(std::move(*r.prepared[i]));
      } catch (const std::exception& e) {
        stoker::log::error("reload: job {} could not start: {}", cfg.jobs[i].name, e.what());
        failed += (failed.empty() ? "" : "; ") + ("job " + cfg.jobs[i].name + " could not start: " + e.what());
      }
    }
    const std::string summary = "reload of " + cfg.file.string() + " applied: " + std::to_string(added) +
                                " job(s) added, " + std::to_string(restarted) + " restarted, " +
                                std::to_string(removed) + " removed, " + std::to_string(unchanged) + " unchanged";
    stoker::log::info("{} (server settings are read at start only)", summary);
    finish(failed.empty(), failed.empty() ? summary : summary + "; " + failed);
  }
  if (queued_) {  // the last request's edit is read now
    queued_ = false;
    running_waiters_ = std::move(queued_waiters_);
    queued_waiters_.clear();
    running_requested_by_ = std::move(queued_requested_by_);
    queued_requested_by_.clear();
    start();
  }
}

void Reloads::finish(bool ok, const std::string& message) {
  last_ = Outcome{std::chrono::system_clock::now(), ok, message, running_requested_by_};
  const std::string reply = ok ? nlohmann::json{{"ok", true}, {"message", message}}.dump() : reply_error(message);
  const auto now = std::chrono::steady_clock::now();
  for (const Waiter& w : running_waiters_) {
    Session* s = sessions_.find(w.fd, w.token);
    if (s == nullptr) continue;  // it left meanwhile
    s->command_pending = false;
    s->last_message = now;  // idle from the reply on, not from the request
    if (!sessions_.send_json(*s, reply, proto::MsgType::kStatusReply)) sessions_.doom(w.fd);
  }
  running_waiters_.clear();
}

}  // namespace stoker::control
