#include "control/client_job_access.hpp"

#include <string>
#include <unistd.h>

#include "job/job.hpp"
#include "jobs/job_table.hpp"

namespace stoker::control {

base::Status client_job_access(const jobs::JobTable& jobs, std::uint32_t peer_uid, const job::Job* job) {
  const jobs::JobTable::Entry* e = jobs.entry(job);
  if (e == nullptr || !e->defined_by_client || e->defined_by_uid == peer_uid || peer_uid == ::geteuid() ||
      peer_uid == 0) {
    return {};
  }
  return base::Status::error("job '" + job->name() + "' was defined by another user (uid " +
                             std::to_string(e->defined_by_uid) +
                             ") and is theirs alone: define the job yourself (a client-defined job is shared only "
                             "among the clients of one uid)");
}

}  // namespace stoker::control
