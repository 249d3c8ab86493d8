#include "control/job_definitions.hpp"

#include <cstdio>
#include <memory>
#include <new>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "log/log.hpp"
#include "control/command_reply.hpp"
#include "control/peer_access.hpp"
#include "control/sessions.hpp"
#include "core/check.hpp"
#include "job/job.hpp"
#include "jobs/job_loader.hpp"
#include "jobs/job_table.hpp"
#include "source/read_access.hpp"

namespace stoker::control {

using job::Job;
using jobs::JobTable;
using jobs::LoadResult;
using Json = nlohmann::json;

namespace {

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

JobDefinitions::JobDefinitions(jobs::JobLoader& loader, JobTable& jobs, Sessions& sessions, const JobSources& sources)
    : loader_(loader), jobs_(jobs), sessions_(sessions), sources_(sources) {}

bool JobDefinitions::define(Session& s, const std::string& config, const std::string& who) {
  const std::string origin = "<job defined by client " + who + ">";
  config::JobConfig jc;
  try {
    jc = config::parse_client_job(config, origin, sources_.client_job_buckets);
  } catch (const config::ConfigError& e) {
    return sessions_.send_json(s, reply_error(e.what()), proto::MsgType::kStatusReply);
  }
  // Shared by definition among the clients of one uid (the ranks of a training run): the
  // name the client chose is not part of it, the uid is, since what a job may read depends
  // on who defined it.
  const std::uint32_t uid = s.peer_uid;
  const std::string key = "uid " + std::to_string(uid) + "\n" + jc.definition;
  if (Job* same = jobs_.defined(key)) {
    return sessions_.send_json(s, Json{{"ok", true}, {"job", same->name()}, {"created", false}}.dump(),
                               proto::MsgType::kStatusReply);
  }
  if (auto it = defining_.find(key); it != defining_.end()) {
    // Already loading (another rank sent it first): wait for that load, start no other.
    it->second.waiters.emplace_back(s.fd, s.token);
    s.command_pending = true;
    return true;
  }
  std::size_t total = defining_.size(), mine = 0;
  for (const auto& [k, d] : defining_) mine += d.uid == uid ? 1 : 0;
  for (Job* j : jobs_.serving_jobs()) {
    const JobTable::Entry* e = jobs_.entry(j);
    if (!e->defined_by_client) continue;
    ++total;
    mine += e->defined_by_uid == uid ? 1 : 0;
  }
  if (total >= sources_.max_client_jobs) {
    return sessions_.send_json(s, reply_error("this stokerd already serves or loads " + std::to_string(total) +
                                              " client-defined jobs (at most " +
                                              std::to_string(sources_.max_client_jobs) +
                                              "); close unused loaders or define the job in the config"),
                               proto::MsgType::kStatusReply);
  }
  if (mine >= sources_.client_jobs_per_user) {
    return sessions_.send_json(s, reply_error("uid " + std::to_string(uid) + " already has " + std::to_string(mine) +
                                              " client-defined jobs serving or loading (at most " +
                                              std::to_string(sources_.client_jobs_per_user) +
                                              " per user, server.client_jobs_per_user); close unused loaders"),
                               proto::MsgType::kStatusReply);
  }
  // Another user's job reads only what that user could (source/read_access.hpp): stokerd's
  // own user and root read as stokerd.
  std::shared_ptr<const source::ReadAs> read_as;
  if (uid != ::geteuid() && uid != 0) {
    // The groups the kernel gave at connect (SO_PEERGROUPS), kept with the session: nothing
    // about the peer is read from /proc now (its pid may be another process's by now).
    read_as = std::make_shared<const source::ReadAs>(source::ReadAs{uid, s.peer_gid, s.peer_groups});
  }
  const std::string written_name = jc.name;
  jc.name = client_job_name(key);
  stoker::log::info("job {}: defined by client {}; loading its dataset{}", jc.name, who,
                    read_as ? " with that user's permissions" : "");
  s.command_pending = true;
  defining_[key] = Defining{uid, {{s.fd, s.token}}, written_name, jc.name};
  loader_.define(key, std::move(jc), sources_.state_dir, origin, std::move(read_as));
  return true;
}

void JobDefinitions::apply(LoadResult& r) {
  auto node = defining_.extract(r.definition);  // the load no longer counts as in flight
  const auto now = std::chrono::steady_clock::now();
  if (node.empty()) return;
  std::vector<Session*> waiting;
  for (const auto& [fd, token] : node.mapped().waiters) {
    if (Session* s = sessions_.find(fd, token)) {
      s->command_pending = false;
      s->last_message = now;  // idle from the reply on
      waiting.push_back(s);
    }
  }
  if (waiting.empty()) return;  // every client that asked left while its job loaded: nothing is kept
  std::string reply;
  STOKER_CHECK(!r.error.empty() || r.job.has_value(), "definition load of {} neither failed nor made a job",
               r.definition);
  if (!r.error.empty()) {
    std::string error = r.error;
    const std::string given = "jobs." + node.mapped().given_name + ".", written = "jobs." + node.mapped().written_name + ".";
    for (std::size_t at = error.find(given); at != std::string::npos; at = error.find(given, at + written.size())) {
      error.replace(at, given.size(), written);
    }
    reply = reply_error(error);
  } else if (Job* same = jobs_.defined(r.definition)) {
    reply = Json{{"ok", true}, {"job", same->name()}, {"created", false}}.dump();
  } else if (jobs_.serving(r.job->config.name) != nullptr) {
    reply = reply_error("a job named '" + r.job->config.name + "' is already served");
  } else {
    const std::string name = r.job->config.name;  // r.job is moved from below
    try {
      Job* job = jobs_.add(std::move(*r.job), /*defined_by_client=*/true, r.definition, node.mapped().uid);
      reply = Json{{"ok", true}, {"job", job->name()}, {"created", true}}.dump();
    } catch (const std::bad_alloc&) {  // a client's request is refused, never the daemon's end
      reply = reply_error(jobs::client_job_out_of_memory(name));
    } catch (const std::exception& e) {
      reply = reply_error(e.what());
    }
  }
  for (Session* s : waiting) {
    if (!sessions_.send_json(*s, reply, proto::MsgType::kStatusReply)) sessions_.doom(s->fd);
  }
}

}  // namespace stoker::control
