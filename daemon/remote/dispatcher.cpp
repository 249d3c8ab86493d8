// The dispatcher (dispatcher.hpp): one Link per worker endpoint (dispatcher_link.hpp), kept
// in step with what the job's `workers` entries resolve to.

#include "remote/dispatcher.hpp"

#include <algorithm>
#include <chrono>
#include <map>
#include <random>
#include <set>

#include "base/thread_name.hpp"
#include "log/log.hpp"
#include "remote/dispatcher_link.hpp"
#include "remote/endpoints.hpp"
#include "remote/receive_memory.hpp"
#include "sched/work_queue.hpp"

namespace stoker::remote {

namespace {

constexpr auto kResolveEvery = std::chrono::seconds(15);

}  // namespace

Dispatcher::Dispatcher(job::Job& job, sched::WorkQueue& queue, const config::RemoteConfig& cfg)
    : job_(job),
      queue_(queue),
      cfg_(cfg),
      verify_key_((std::uint64_t{std::random_device{}()} << 32) ^ std::random_device{}()) {
  // Results arrive in malloc'd slices: keep their pages mapped between messages (issue #36).
  keep_receive_memory_mapped();
  // Names are resolved on the resolver thread, never here: this runs on the control thread,
  // and a lookup can take seconds.
  resolver_ = std::thread([this] {
    base::name_this_thread("remote-resolve");
    resolve_loop();
  });
}

Dispatcher::~Dispatcher() {
  {
    base::MutexLock lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  resolver_.join();
  std::vector<std::unique_ptr<Link>> links;
  {
    base::MutexLock lock(mu_);
    links.swap(links_);
  }
  for (auto& l : links) l->stop();  // each hands its items back
  queue_.set_remote_only(job_.index(), false);
}

void Dispatcher::resolve_loop() {
  resolve_once();
  base::MutexLock lock(mu_);
  while (!stop_) {
    cv_.wait_for(lock, kResolveEvery);
    if (stop_) break;
    lock.unlock();
    resolve_once();
    lock.lock();
  }
}

void Dispatcher::resolve_once() {
  // Off the control thread (resolve_loop): a lookup can take seconds.
  const Endpoints found = resolve_workers(cfg_.workers);
  std::map<std::string, std::pair<std::string, std::string>> want = found.endpoints;
  const std::set<std::string>& unresolved = found.unresolved;
  std::vector<std::unique_ptr<Link>> gone;
  {
    base::MutexLock lock(mu_);
    if (stop_) return;
    // A name that does not resolve now keeps its links (a DNS hiccup must not drop workers).
    std::erase_if(links_, [&](std::unique_ptr<Link>& l) {
      if (want.count(l->endpoint()) != 0) {
        want.erase(l->endpoint());
        return false;
      }
      const std::string written = l->status().address;
      if (unresolved.count(written) != 0) return false;
      gone.push_back(std::move(l));
      return true;
    });
    for (auto& [endpoint, at] : want) {
      stoker::log::info("job {}: remote worker {} at {}", job_.name(), at.first, endpoint);
      links_.push_back(std::make_unique<Link>(*this, at.first, endpoint, at.second));
    }
    std::vector<std::string> still;
    for (const std::string& a : unresolved) {
      const bool has_link = std::any_of(links_.begin(), links_.end(),
                                        [&](const std::unique_ptr<Link>& l) { return l->status().address == a; });
      if (!has_link) still.push_back(a);
      // Logged when it starts failing, not every 15 s.
      if (std::find(unresolved_.begin(), unresolved_.end(), a) == unresolved_.end()) {
        stoker::log::warn(
            "job {}: remote worker {}: the name does not resolve (retried every 15 s; the local pool serves "
            "meanwhile)",
            job_.name(), a);
      }
    }
    unresolved_ = std::move(still);
  }
  for (auto& l : gone) {
    stoker::log::info("job {}: remote worker {} no longer resolves: stream closed", job_.name(), l->endpoint());
    l->stop();
  }
}

void Dispatcher::link_connected(bool up) {
  const int now = up ? ++connected_ : --connected_;
  if (!cfg_.local) queue_.set_remote_only(job_.index(), now > 0);
}

std::vector<WorkerLinkStatus> Dispatcher::status() const {
  std::vector<WorkerLinkStatus> out;
  {
    base::MutexLock lock(mu_);
    for (const auto& l : links_) out.push_back(l->status());
    for (const std::string& a : unresolved_) {
      WorkerLinkStatus w;
      w.address = a;
      w.last_error = "the name does not resolve (retried every 15 s)";
      out.push_back(std::move(w));
    }
  }
  // In the order the config lists the workers (then by endpoint for a name with several).
  auto rank = [this](const WorkerLinkStatus& w) {
    return std::find(cfg_.workers.begin(), cfg_.workers.end(), w.address) - cfg_.workers.begin();
  };
  std::stable_sort(out.begin(), out.end(), [&](const WorkerLinkStatus& a, const WorkerLinkStatus& b) {
    return std::make_pair(rank(a), a.endpoint) < std::make_pair(rank(b), b.endpoint);
  });
  return out;
}

}  // namespace stoker::remote
