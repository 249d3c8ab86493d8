#include "remote/worker_fetch.hpp"

#include <algorithm>
#include <exception>
#include <string>
#include <utility>

#include "objstore/fetcher.hpp"
#include "remote/protocol.hpp"

namespace stoker::remote {

WorkerObjects::WorkerObjects(const objstore::EnvLookup& env, unsigned threads)
    : region_(objstore::resolve_region(env)), env_(env), creds_(objstore::resolve_credentials(env)) {
  for (unsigned i = 0; i < std::max(1u, threads); ++i) threads_.emplace_back([this] { run(); });
}

WorkerObjects::~WorkerObjects() {
  give_up();
  for (std::thread& t : threads_) t.join();
  // Fetchers go last: no thread of ours is inside one any more.
}

std::string WorkerObjects::endpoint_for(const std::string& configured) const {
  return objstore::resolve_endpoint(configured, region_, env_);
}

objstore::Addressing WorkerObjects::addressing_for(const std::string& configured, const std::string& endpoint) const {
  return objstore::choose_addressing(configured, endpoint, region_);
}

std::string WorkerObjects::credentials() const {
  return creds_ ? creds_->describe() : "unusable (" + creds_.status().message() + ")";
}

base::Result<std::shared_ptr<objstore::Fetcher>> WorkerObjects::fetcher(const std::string& endpoint,
                                                                        objstore::Addressing addressing) {
  if (!creds_) return base::Status::error("this worker's object storage credentials: " + creds_.status().message());
  const std::string key = endpoint + (addressing == objstore::Addressing::kVirtualHost ? " (virtual-host)" : "");
  base::MutexLock lock(mu_);
  if (stop_) return base::Status::error("the worker is stopping");  // no request is started any more
  if (auto it = fetchers_.find(key); it != fetchers_.end()) return it->second;
  if (fetchers_.size() >= kMaxEndpoints) {
    return base::Status::error("the job names more than " + std::to_string(kMaxEndpoints) +
                               " object storage endpoints; this worker reads from at most that many");
  }
  objstore::Fetcher::Options o;
  o.endpoint = endpoint;
  o.addressing = addressing;
  o.region = region_;
  o.credentials = *creds_;
  o.reload_credentials = [env = env_] { return objstore::resolve_credentials(env); };
  // The GPU node makes a sample itself when a worker cannot read it, with its own retries:
  // a worker waiting out a long outage only delays that. Fewer attempts than a node's own.
  o.max_attempts = 4;
  std::shared_ptr<objstore::Fetcher> f;
  try {
    f = std::make_shared<objstore::Fetcher>(std::move(o));
  } catch (const std::exception& e) {
    // Out of descriptors or threads (the fetcher's epoll, eventfd and thread): this item
    // fails and the node makes it; the next one tries again.
    return base::Status::error(std::string("cannot start an object storage fetcher: ") + e.what());
  }
  fetchers_.emplace(key, f);
  return f;
}

Fetched WorkerObjects::fetch(const ObjectRead& read) {
  Fetched out;
  base::Result<std::shared_ptr<objstore::Fetcher>> f = fetcher(read.endpoint, read.addressing);
  if (!f) {
    out.status = base::Status::error(read.url.text() + ": " + f.status().message());
    return out;
  }
  objstore::FetchResult got = read.member ? (*f)->get_range(read.url, read.offset, read.size)
                                          : (*f)->get(read.url, /*use_cache=*/false);
  if (!got.ok()) {
    // The Fetcher's message names the request and, for 401/403, the credentials' source; a
    // 404 says which credentials looked too (another worker's may see the object).
    std::string why = got.message;
    if (got.error == objstore::FetchError::kNotFound) {
      why += " (credentials: " + (*f)->options().credentials.describe() + ")";
    }
    out.status = base::Status::error(std::move(why));
    return out;
  }
  // The store's answer is checked, not believed: the Fetcher keeps only the bytes asked for,
  // and a member must be exactly `size` of them (what the GPU node indexed).
  if (read.member && got.body.size() != read.size) {
    out.status = base::Status::error(read.url.text() + " answered " +
                                     std::to_string(got.body.size()) + " bytes for a member of " +
                                     std::to_string(read.size));
    return out;
  }
  if (got.body.size() > kMaxReadBytes) {
    out.status = base::Status::error(read.url.text() + " is larger than 1 GiB");
    return out;
  }
  out.bytes = std::move(got.body);
  return out;
}

std::shared_future<Fetched> WorkerObjects::start(ObjectRead read) {
  auto task = std::make_shared<std::packaged_task<Fetched()>>([this, r = std::move(read)] { return fetch(r); });
  std::shared_future<Fetched> f = task->get_future().share();
  {
    base::MutexLock lock(mu_);
    if (!stop_) {
      queue_.emplace_back([task] { (*task)(); });
      cv_.notify_one();
      return f;
    }
  }
  (*task)();  // stopping: answered now (the fetcher refuses, the item fails as a read)
  return f;
}

void WorkerObjects::give_up() {
  std::deque<std::function<void()>> left;
  std::vector<std::shared_ptr<objstore::Fetcher>> fetchers;
  {
    base::MutexLock lock(mu_);
    stop_ = true;
    left.swap(queue_);
    for (auto& [e, f] : fetchers_) fetchers.push_back(f);
  }
  cv_.notify_all();
  for (auto& f : fetchers) f->give_up_retries();
  for (auto& t : left) t();  // each answered without a request (stop_: no fetcher is made)
}

void WorkerObjects::run() {
  for (;;) {
    std::function<void()> task;
    {
      base::MutexLock lock(mu_);
      while (!stop_ && queue_.empty()) cv_.wait(lock);
      if (queue_.empty()) return;  // stopping, and nothing left to answer
      task = std::move(queue_.front());
      queue_.pop_front();
    }
    task();
  }
}

void WorkerObjects::each_endpoint(
    const std::function<void(const std::string& endpoint, const objstore::FetchStats&)>& f) const {
  base::MutexLock lock(mu_);
  for (const auto& [endpoint, fetcher] : fetchers_) f(endpoint, fetcher->stats());
}

std::string WorkerObjects::summary() const {
  std::string out;
  base::MutexLock lock(mu_);
  for (const auto& [endpoint, f] : fetchers_) {
    objstore::FetchStats& s = f->stats();
    const std::uint64_t failed = s.transient.load() + s.not_found.load() + s.denied.load() + s.other_errors.load();
    if (!out.empty()) out += "; ";
    out += endpoint + ": " + std::to_string(s.requests.load()) + " requests, " + std::to_string(s.bytes.load()) +
           " bytes, " + std::to_string(s.retries.load()) + " retries, " + std::to_string(failed) + " failed";
  }
  return out;
}

}  // namespace stoker::remote
