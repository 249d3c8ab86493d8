// Jobs that clients define (`define_job`: stoker.Loader.from_folder and friends). The
// definition is parsed and checked on the control thread, its dataset loads on JobLoader's
// threads, and the job is added here once loaded; every connection that sent the same
// definition (the ranks of one training run) waits for that one load and gets the same job.
//
// Caps (server.max_client_jobs, server.client_jobs_per_user) count loads in flight as well as
// serving jobs: checked and taken before a load starts, so no number of concurrent
// definitions passes them.
// Threads: the control thread only; no lock.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "control/forward.hpp"
#include "control/settings.hpp"

namespace stoker::control {

class JobDefinitions {
 public:
  JobDefinitions(jobs::JobLoader& loader, jobs::JobTable& jobs, Sessions& sessions, const JobSources& sources);

  // `config`: the job's YAML as the client sent it; `who`: the peer ("pid P uid U"). The
  // caller has checked that this peer may define jobs at all. Answers at once (an error, or
  // the same definition already serving) or once the load is done. false: evict the client.
  bool define(Session& s, const std::string& config, const std::string& who);
  // A definition's load finished (JobLoader::take_done): adds the job, answers who waits.
  void apply(jobs::LoadResult& r);

 private:
  // Loading, by key (uid + definition): who defined it and the connections (fd, token)
  // waiting for its reply. One load per key, however many ranks send it.
  struct Defining {
    std::uint32_t uid = 0;
    std::vector<std::pair<int, std::uint64_t>> waiters;
    // The job's name as the client wrote it, and the one stokerd gave it: a load error names
    // keys as the client wrote them ("jobs.<written>.source.root"), as a parse error does.
    std::string written_name, given_name;
  };
  jobs::JobLoader& loader_;
  jobs::JobTable& jobs_;
  Sessions& sessions_;
  const JobSources& sources_;  // ControlServer's, which outlives this
  std::map<std::string, Defining> defining_;
};

}  // namespace stoker::control
