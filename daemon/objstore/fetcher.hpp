// Fetches objects over HTTP(S) with libcurl's multi interface: one thread drives every
// transfer of a Fetcher, so connections to the endpoint are kept and reused between requests,
// and any number of reader threads wait on their own request at once.
//
// Faults are not bad files (ARCHITECTURE.md, "three kinds of failure"): an HTTP 5xx, a 429 or
// SlowDown (Retry-After honoured), a reset connection, a timeout or a body shorter than asked
// are retried with exponential backoff and jitter, at most Options::max_attempts times, each
// retry counted; only then is the request transient. 404 is not-found (the object is gone: a
// missing file), 401/403 denied; both name the URL and where the credentials came from,
// never a credential.
//
// s3:// requests go to the endpoint with path-style addressing (ENDPOINT/BUCKET/KEY, what a
// loopback MinIO or Ceph needs) and are signed with SigV4 by libcurl (CURLOPT_AWS_SIGV4) when
// there are credentials. http(s):// URLs are fetched as they are, unsigned.
//
// Threads: every method may be called from any thread; the counters are atomics.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/status.hpp"
#include "objstore/credentials.hpp"
#include "objstore/list_xml.hpp"
#include "objstore/object_cache.hpp"
#include "objstore/object_url.hpp"
#include "objstore/sink_watch.hpp"

namespace stoker::objstore {

enum class FetchError : std::uint8_t { kNone, kTransient, kNotFound, kDenied, kOther };

struct FetchResult {
  FetchError error = FetchError::kNone;
  long http_status = 0;  // the last attempt's; 0 when no answer came
  std::string message;   // for a person: the URL and what went wrong, never a credential
  std::vector<std::uint8_t> body;
  std::uint64_t size = 0;  // head(): the object's Content-Length
  std::int64_t mtime = -1;  // head(): Last-Modified as Unix seconds, -1 when not given
  bool ok() const { return error == FetchError::kNone; }
};

// Counters since the Fetcher was made; what status and /metrics show per source.
struct FetchStats {
  std::atomic<std::uint64_t> requests{0};    // attempts sent, retries included
  std::atomic<std::uint64_t> bytes{0};       // body bytes received
  std::atomic<std::uint64_t> retries{0};     // attempts repeated after a transient fault
  std::atomic<std::uint64_t> transient{0};   // requests that failed after every retry
  std::atomic<std::uint64_t> not_found{0};
  std::atomic<std::uint64_t> denied{0};
  std::atomic<std::uint64_t> other_errors{0};
  std::atomic<std::uint64_t> cache_hits{0};  // reads a local cache answered (no request)
  std::atomic<std::uint64_t> credential_reloads{0};  // credentials re-read and found changed
  std::atomic<std::int64_t> in_flight{0};
  // Each answered attempt's time from start to end, in power-of-two buckets of microseconds
  // (bucket i: [2^i, 2^(i+1)) us; 0 also takes under 1 us): quantiles to a factor of two,
  // with no lock and no memory growth.
  static constexpr int kLatencyBuckets = 32;
  std::array<std::atomic<std::uint64_t>, kLatencyBuckets> latency{};
  void record_latency(std::chrono::microseconds d);
  // The upper bound of the bucket holding quantile q (0.5: p50) in milliseconds; 0 when none.
  double latency_quantile_ms(double q) const;
};

// How an s3:// URL's bucket is addressed: in the path (ENDPOINT/BUCKET/KEY: MinIO, Ceph, a
// loopback server) or in the host name (BUCKET.ENDPOINT-HOST/KEY: AWS, where path-style is
// deprecated). A source's `addressing:`; by default virtual-host for AWS's own endpoint and
// path-style for any endpoint given.
enum class Addressing : std::uint8_t { kPath, kVirtualHost };

class Fetcher {
 public:
  struct Options {
    std::string endpoint;  // for s3:// URLs, e.g. "http://127.0.0.1:9000"; no trailing '/'
    Addressing addressing = Addressing::kPath;
    std::string region = "us-east-1";
    Credentials credentials;
    // Re-reads the credentials (job_factory: the same chain as at start). Called by the
    // fetcher's thread when credentials.file changed (looked at every credentials_check at
    // most: a refreshed session token written by a helper) or when a store answers that the
    // credentials expired (ExpiredToken and the like; the request is then sent once more,
    // signed anew). Null: the credentials are never re-read.
    std::function<base::Result<Credentials>()> reload_credentials;
    std::chrono::milliseconds credentials_check{2000};
    int max_attempts = 8;
    std::chrono::milliseconds first_backoff{50};
    std::chrono::milliseconds max_backoff{5000};
    std::chrono::milliseconds max_retry_after{30000};  // a longer Retry-After is cut to this
    long connect_timeout_ms = 5000;
    long stall_seconds = 30;  // a transfer moving under 1 byte/s this long is a timeout
    // A local cache of what get() and get_range() fetch (a source's `cache:`); null: none.
    // A hit sends no request and counts in cache_hits.
    std::shared_ptr<ObjectCache> cache;
  };

  explicit Fetcher(Options options);
  ~Fetcher();
  Fetcher(const Fetcher&) = delete;
  Fetcher& operator=(const Fetcher&) = delete;

  // The whole object, or `size` bytes at `offset` (one ranged GET). `use_cache` false: a read
  // done once (indexing a shard) that the cache would only be filled with.
  FetchResult get(const ObjectUrl& url, bool use_cache = true);
  FetchResult get_range(const ObjectUrl& url, std::uint64_t offset, std::uint64_t size);
  // get_range without a thread waiting on it: `done` gets the answer on the fetcher's thread
  // (so it must be quick and must not call back into this Fetcher's blocking methods). With a
  // cache, or for an empty range, it is get_range on this thread and `done` is called before
  // this returns. Read-ahead starts its object reads this way: a read in flight then costs no
  // thread of its own (read_ahead.hpp).
  using Done = std::function<void(FetchResult&&)>;
  void get_range_async(const ObjectUrl& url, std::uint64_t offset, std::uint64_t size, Done done);
  // The whole object written to `fd` (from offset 0; truncated and written again when a retry
  // starts over) instead of into memory: what indexing a large shard streams into. The
  // result's `size` is the bytes written; a failed write to `fd` is an error (kOther).
  // `watch`: told how far the body has come as it is written, so a reader can start on it
  // before the end (the caller calls watch->finished() when this returns); watch->cancel()
  // ends the transfer at its next write, as a failed write (kOther).
  FetchResult get_to_fd(const ObjectUrl& url, int fd, SinkWatch* watch = nullptr);
  // Size and Last-Modified, no body.
  FetchResult head(const ObjectUrl& url);
  // Every page of ListObjectsV2 for the s3:// URL's key as prefix; with `delimiter` "/" the
  // keys one level down and the prefixes ("folders") below it.
  base::Result<ListPage> list(const ObjectUrl& prefix, const std::string& delimiter);

  // From now on a failed attempt is not repeated, and requests waiting to be tried again are
  // answered transient at once: stokerd is stopping and must not wait out backoffs (up to
  // max_attempts of them, or a 30 s Retry-After) for a store that is away.
  void give_up_retries();

  FetchStats& stats() { return stats_; }
  const Options& options() const { return options_; }

  struct Request;  // fetcher.cpp's: one request as sent
  struct Driver;   // fetcher.cpp's: the thread driving libcurl's multi handle

 private:
  FetchResult run(Request request);
  void start(Request request, Done done);
  Request range_request(const ObjectUrl& url, std::uint64_t offset, std::uint64_t size) const;

  Options options_;
  FetchStats stats_;
  std::unique_ptr<Driver> driver_;
};

// Where requests for `bucket` go, without the trailing '/': ENDPOINT/BUCKET, or with virtual-host
// addressing SCHEME://BUCKET.HOST[:PORT] (a bucket whose name is no DNS label, e.g. one
// with dots, stays path-style, as AWS's SDKs do).
std::string bucket_base(const Fetcher::Options& o, const std::string& bucket);
// A source's `addressing:` ("path", "virtual", or "": virtual-host for AWS's own endpoint in
// `region`, path-style for any endpoint given) for requests to `endpoint` (resolved). The one
// rule stokerd's fetchers and a remote worker's follow, so both address a bucket alike.
Addressing choose_addressing(const std::string& configured, const std::string& endpoint, const std::string& region);
bool virtual_host_bucket(const std::string& bucket);

// The delay before retry `attempt` (1 = the first retry): first_backoff * 2^(attempt-1) capped
// at max_backoff, times a jitter factor in [0.5, 1]; a Retry-After (seconds) replaces it, cut
// to max_retry_after. `unit` in [0, 1) picks the jitter (tests pass their own).
std::chrono::milliseconds retry_delay(const Fetcher::Options& o, int attempt, std::optional<long> retry_after_s,
                                      double unit);

}  // namespace stoker::objstore
