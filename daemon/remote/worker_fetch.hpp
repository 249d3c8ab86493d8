// A `stokerd --worker` reading a job's source in object storage itself (issue #35): an Item
// whose path is a URL (s3://, https://) is fetched here, with the worker's OWN credentials
// (its environment or AWS files, resolved once at start; the GPU node never sends any) and
// endpoint (the job's source `endpoint:`, else the worker's AWS_ENDPOINT_URL).
//
// What comes back is checked, not believed: a tar member must be exactly the `size` bytes
// asked for; a whole object at most kMaxReadBytes. Faults are the Fetcher's (retried there);
// whatever still fails — a store away after every retry, a 403, a 404 — is a read failure of
// this worker (the item's result error kIo, its reason naming the URL and where the worker's
// credentials came from, never a value): the GPU node makes the sample itself, with its own
// read rules, so a worker's missing permission never quarantines a good file.
//
// Concurrency: fetches run on the reader's own threads (Fetcher calls block the caller; its
// one libcurl multi handle carries all of them at once over kept connections). A stream
// starts the fetches of the next items it holds ahead of its decode threads (worker_stream's
// fetch window), so a decode thread finds its bytes waiting instead of paying a round trip
// per sample. Threads: every method may be called from any thread.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "base/mutex.hpp"
#include "base/status.hpp"
#include "objstore/credentials.hpp"
#include "objstore/fetcher.hpp"
#include "objstore/object_url.hpp"

namespace stoker::remote {

// An item's bytes from object storage, or why there are none (a message for the GPU node).
struct Fetched {
  base::Status status;
  std::vector<std::uint8_t> bytes;
};

// What to fetch for one item: the whole object, or `size` bytes at `offset` (a tar member).
struct ObjectRead {
  objstore::ObjectUrl url;
  std::string endpoint;  // resolved (WorkerObjects::endpoint_for)
  objstore::Addressing addressing = objstore::Addressing::kPath;  // WorkerObjects::addressing_for
  bool member = false;
  std::uint64_t offset = 0, size = 0;
};

class WorkerObjects {
 public:
  // At most this many endpoints are kept (a Fetcher and its thread each): a node naming more
  // gets read errors, not a worker that grows without bound.
  static constexpr std::size_t kMaxEndpoints = 16;

  // `env`: the worker's own environment (objstore::process_env() in stokerd --worker).
  // `threads`: fetches in flight at once, across every stream.
  WorkerObjects(const objstore::EnvLookup& env, unsigned threads);
  ~WorkerObjects();
  WorkerObjects(const WorkerObjects&) = delete;
  WorkerObjects& operator=(const WorkerObjects&) = delete;

  // The endpoint s3:// URLs of a source go to: its `endpoint:` when the job gives one, else
  // this worker's AWS_ENDPOINT_URL, else AWS's regional one (objstore::resolve_endpoint).
  std::string endpoint_for(const std::string& configured) const;
  // A source's `addressing:` ("path", "virtual", "") for requests to `endpoint` (resolved): the
  // rule stokerd's own fetchers follow (objstore::choose_addressing), so a worker addresses a bucket
  // as the node does: virtual-host for AWS's own endpoint unless told, else path-style.
  objstore::Addressing addressing_for(const std::string& configured, const std::string& endpoint) const;
  // Where this worker's credentials come from (what logs say; never a value).
  std::string credentials() const;

  // Starts fetching on one of the reader's threads; the future holds the answer.
  std::shared_future<Fetched> start(ObjectRead read);
  // Fetches on the calling thread (an item no stream fetched ahead).
  Fetched fetch(const ObjectRead& read);
  // Stopping: requests waiting for a retry are answered at once, queued ones are not started.
  void give_up();

  // One line per endpoint used: "ENDPOINT: N requests, B bytes, R retries, F failed" ("" when
  // none was used), for the worker's log.
  std::string summary() const;

  // Each endpoint's fetcher counters (those used so far, by name), for the worker's /metrics.
  // The callback runs under this object's lock: it must not call back into it.
  void each_endpoint(const std::function<void(const std::string& endpoint, const objstore::FetchStats&)>& f) const;

 private:
  // The endpoint's fetcher (one per endpoint and addressing), made on first use; an error past
  // kMaxEndpoints.
  base::Result<std::shared_ptr<objstore::Fetcher>> fetcher(const std::string& endpoint, objstore::Addressing addressing);
  void run();

  const std::string region_;
  const objstore::EnvLookup env_;
  // Resolved once at start: an error (a key id without its secret, a named profile missing) is
  // every URL item's answer, so a worker serving only files still starts. The fetchers re-read
  // them by the same chain when their file changes or a store says they expired.
  base::Result<objstore::Credentials> creds_;

  mutable base::Mutex mu_;
  std::map<std::string, std::shared_ptr<objstore::Fetcher>> fetchers_ STOKER_GUARDED_BY(mu_);
  std::deque<std::function<void()>> queue_ STOKER_GUARDED_BY(mu_);
  bool stop_ STOKER_GUARDED_BY(mu_) = false;
  base::CondVar cv_;
  std::vector<std::thread> threads_;
};

}  // namespace stoker::remote
