// The GPU node's side of remote workers, one Dispatcher per job with `remote:` (made and
// destroyed by jobs/job_table.cpp, before its Job). For every worker endpoint (a `workers`
// entry, or each address a name resolves to, re-resolved every 15 s) a Link keeps one gRPC
// stream open: it takes the job's items from the work queue (WorkQueue::pop_remote: local
// workers first unless remote.local is false), sends each sample's place and random stream,
// and writes the pixels that come back into the slot as a local worker would (Job::
// finish_remote), so batches are identical whichever machine made each sample.
//
// Failures: a worker that cannot be reached is retried with backoff while the local pool
// serves; one that disconnects, answers garbage (an unknown id, a wrong size, a bad frame) or
// leaves an item unanswered past remote.deadline_s (SIGSTOP, a dead link) has its stream
// cancelled and every item it held handed back to the queue, ahead of the rest (WorkQueue::
// push_front), counted as re-issued. Invariant: an item is ended exactly once — its entry
// leaves the link's table under the link's mutex either with its answer (finish_remote) or
// for re-issue, never both; a stream's replies are read only while the stream lives, so a
// late duplicate cannot arrive. A worker's read failure is made here (its storage may differ).
//
// A worker is not trusted with the job's data (issue #34): a "bad file" verdict is made again
// here and never quarantines on the worker's word; a 1.1 worker's answer must echo the epoch
// and draw sent under its id; remote.verify (default 0.01) makes that fraction of the answers
// again here, picked per (sample, epoch) by a key the worker never sees, and compares them byte
// for byte. A differing answer is served from this node's pixels, counted (status `mismatches`)
// and its worker dropped (its backoff grows). Hedging: an item outstanding past max(0.5 s, 4x the
// link's mean answer time) leaves the table (the same rule: it ends once) and is made here by
// the link's sending thread; the worker's late answer is discarded (status `hedged`), and the
// link takes no new items until its hedged ones are answered or its deadline passes.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "config/config.hpp"
#include "remote/link_status.hpp"
#include "base/mutex.hpp"

namespace stoker::job {
class Job;
}  // namespace stoker::job
namespace stoker::sched {
class WorkQueue;
}  // namespace stoker::sched

namespace stoker::remote {

class Dispatcher {
 public:
  Dispatcher(job::Job& job, sched::WorkQueue& queue, const config::RemoteConfig& cfg);
  ~Dispatcher();  // stops every link; items in flight go back to the queue
  Dispatcher(const Dispatcher&) = delete;
  Dispatcher& operator=(const Dispatcher&) = delete;

  std::vector<WorkerLinkStatus> status() const;

  class Link;  // one endpoint's stream (dispatcher_link.hpp)

 private:
  void resolve_loop();
  void resolve_once();
  void link_connected(bool up);  // remote.local false: local workers step aside while one is up

  job::Job& job_;
  sched::WorkQueue& queue_;
  const config::RemoteConfig cfg_;
  // remote.verify's key: which results are made again here is a function of it and the
  // sample's (id, epoch), drawn at start and never sent, so a worker cannot predict the picks.
  const std::uint64_t verify_key_;
  mutable base::Mutex mu_;
  base::CondVar cv_;
  std::vector<std::unique_ptr<Link>> links_ STOKER_GUARDED_BY(mu_);
  // `workers` entries whose name resolved to nothing at the last look and that have no link:
  // shown in status as not connected, with why (a typo must not vanish from the list).
  std::vector<std::string> unresolved_ STOKER_GUARDED_BY(mu_);
  bool stop_ STOKER_GUARDED_BY(mu_) = false;
  std::atomic<int> connected_{0};
  std::thread resolver_;
};

}  // namespace stoker::remote
