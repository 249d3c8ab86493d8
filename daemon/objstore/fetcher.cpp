#include "objstore/fetcher.hpp"

#include <curl/curl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <charconv>
#include <cmath>
#include <future>
#include <mutex>
#include <optional>
#include <random>
#include <system_error>
#include <thread>
#include <unordered_map>
#include <utility>

#include "base/mutex.hpp"

namespace stoker::objstore {

namespace {

using Clock = std::chrono::steady_clock;

// SHA-256 of an empty payload: every request here has none, so this is its exact hash,
// whether libcurl signs the header we give or computes its own.
constexpr const char* kEmptyPayloadSha256 = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

void global_init() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

bool retryable_curl(CURLcode rc) {
  switch (rc) {
    case CURLE_COULDNT_CONNECT:
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_OPERATION_TIMEDOUT:
    case CURLE_RECV_ERROR:
    case CURLE_SEND_ERROR:
    case CURLE_PARTIAL_FILE:
    case CURLE_GOT_NOTHING:
    case CURLE_SSL_CONNECT_ERROR:
    case CURLE_HTTP2:
    case CURLE_HTTP2_STREAM:
    case CURLE_WEIRD_SERVER_REPLY:
      return true;
    default:
      return false;
  }
}

bool iequals_prefix(std::string_view line, std::string_view name) {
  if (line.size() < name.size()) return false;
  for (std::size_t i = 0; i < name.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(line[i])) != std::tolower(static_cast<unsigned char>(name[i]))) return false;
  }
  return true;
}

std::string s3_error_code(const std::vector<std::uint8_t>& body) {
  const std::string_view s(reinterpret_cast<const char*>(body.data()), body.size());
  const auto b = s.find("<Code>");
  const auto e = s.find("</Code>");
  if (b == std::string_view::npos || e == std::string_view::npos || e < b || e - b > 70) return "";
  return std::string(s.substr(b + 6, e - b - 6));
}

// What a store answers when the credentials were right but have run out (a session token's
// end): S3's ExpiredToken, STS-style variants, and what MinIO and Ceph send.
bool expired_credentials(const std::string& code) {
  return code == "ExpiredToken" || code == "ExpiredTokenException" || code == "TokenRefreshRequired" ||
         code == "InvalidToken" || code == "RequestExpired";
}

// A credentials file as it is now: inode, size and mtime ("" when it cannot be stat'ed).
std::string file_stamp(const std::string& path) {
  struct stat st {};
  if (path.empty() || ::stat(path.c_str(), &st) != 0) return {};
  return std::to_string(st.st_ino) + ":" + std::to_string(st.st_size) + ":" + std::to_string(st.st_mtim.tv_sec) + "." +
         std::to_string(st.st_mtim.tv_nsec);
}

}  // namespace

void FetchStats::record_latency(std::chrono::microseconds d) {
  std::uint64_t us = d.count() < 1 ? 1 : static_cast<std::uint64_t>(d.count());
  int b = 0;
  while (us > 1 && b < kLatencyBuckets - 1) {
    us >>= 1;
    ++b;
  }
  latency[static_cast<std::size_t>(b)].fetch_add(1, std::memory_order_relaxed);
}

double FetchStats::latency_quantile_ms(double q) const {
  std::array<std::uint64_t, kLatencyBuckets> n{};
  std::uint64_t total = 0;
  for (int i = 0; i < kLatencyBuckets; ++i) total += n[i] = latency[static_cast<std::size_t>(i)].load(std::memory_order_relaxed);
  if (total == 0) return 0;
  const auto want = static_cast<std::uint64_t>(std::ceil(q * static_cast<double>(total)));
  std::uint64_t seen = 0;
  for (int i = 0; i < kLatencyBuckets; ++i) {
    seen += n[static_cast<std::size_t>(i)];
    if (seen >= want) return static_cast<double>(std::uint64_t{2} << i) / 1000.0;
  }
  return static_cast<double>(std::uint64_t{1} << kLatencyBuckets) / 1000.0;
}

std::chrono::milliseconds retry_delay(const Fetcher::Options& o, int attempt, std::optional<long> retry_after_s,
                                      double unit) {
  if (retry_after_s && *retry_after_s >= 0) {
    return std::min(std::chrono::milliseconds(*retry_after_s * 1000), o.max_retry_after);
  }
  const int shift = std::clamp(attempt - 1, 0, 30);
  const auto base = std::min<std::int64_t>(o.first_backoff.count() << shift, o.max_backoff.count());
  return std::chrono::milliseconds(static_cast<std::int64_t>(static_cast<double>(base) * (0.5 + 0.5 * unit)));
}

struct Fetcher::Request {
  enum class Kind : std::uint8_t { kGet, kHead } kind = Kind::kGet;
  std::string url;   // what is sent, path-style for s3://
  std::string name;  // what messages say: "GET s3://b/k bytes 0-99"
  bool sign = false;
  bool ranged = false;
  std::uint64_t offset = 0, size = 0;
  int sink_fd = -1;  // >= 0: the body goes to this descriptor, not into memory
  SinkWatch* watch = nullptr;  // with sink_fd: told of each write and restart; may cancel
};

namespace fetch_detail {

// One request across its attempts; owned by the driver thread once submitted.
struct Transfer {
  Fetcher::Request req;
  int attempt = 0;  // attempts made
  // Called once with the answer, on the driver thread (with none of its locks held).
  std::function<void(FetchResult&&)> done;
  CURL* easy = nullptr;
  curl_slist* headers = nullptr;
  std::vector<std::uint8_t> body;
  std::optional<long> retry_after;
  std::optional<std::uint64_t> range_total;  // from Content-Range: bytes a-b/TOTAL
  Clock::time_point due{};
  Clock::time_point started{};  // this attempt's
  std::uint64_t sunk = 0;     // bytes written to req.sink_fd by this attempt
  bool sink_failed = false;
  int sink_errno = 0;
  bool creds_renewed = false;  // tried again once with re-read credentials after "expired"
  char errbuf[CURL_ERROR_SIZE] = {};
  FetchStats* stats = nullptr;

  void release() {
    if (headers != nullptr) curl_slist_free_all(headers);
    if (easy != nullptr) curl_easy_cleanup(easy);
    headers = nullptr;
    easy = nullptr;
  }
  ~Transfer() { release(); }
};

std::size_t on_body(char* data, std::size_t one, std::size_t n, void* user) {
  auto* t = static_cast<Transfer*>(user);
  const std::size_t bytes = one * n;
  t->stats->bytes.fetch_add(bytes, std::memory_order_relaxed);
  long code = 0;
  curl_easy_getinfo(t->easy, CURLINFO_RESPONSE_CODE, &code);
  if (t->req.sink_fd < 0 || (code != 200 && code != 206)) {
    // An error document stays in memory. As uint8_t: inserted from `char*`, libstdc++ copied
    // byte by byte (no memmove across element types).
    const auto* from = reinterpret_cast<const std::uint8_t*>(data);
    t->body.insert(t->body.end(), from, from + bytes);
    return bytes;
  }
  for (std::size_t at = 0; at < bytes;) {
    const ssize_t k = ::pwrite(t->req.sink_fd, data + at, bytes - at, static_cast<off_t>(t->sunk));
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) {
      t->sink_failed = true;
      t->sink_errno = k < 0 ? errno : ENOSPC;
      return 0;  // libcurl ends the transfer with CURLE_WRITE_ERROR
    }
    at += static_cast<std::size_t>(k);
    t->sunk += static_cast<std::uint64_t>(k);
  }
  if (t->req.watch != nullptr) {
    if (t->req.watch->cancelled()) {
      t->sink_failed = true;
      t->sink_errno = ECANCELED;
      return 0;  // the reader needs no more of it
    }
    t->req.watch->wrote(t->sunk);
  }
  return bytes;
}

std::size_t on_header(char* data, std::size_t one, std::size_t n, void* user) {
  auto* t = static_cast<Transfer*>(user);
  const std::string_view line(data, one * n);
  const auto value = [&](std::size_t name_len) {
    std::string_view v = line.substr(name_len);
    while (!v.empty() && (v.front() == ' ' || v.front() == '\t')) v.remove_prefix(1);
    while (!v.empty() && (v.back() == '\r' || v.back() == '\n' || v.back() == ' ')) v.remove_suffix(1);
    return v;
  };
  if (iequals_prefix(line, "retry-after:")) {
    // Only the delta-seconds form; an HTTP date falls back to our own backoff.
    const std::string_view v = value(12);
    long s = 0;
    const auto r = std::from_chars(v.data(), v.data() + v.size(), s);
    if (r.ec == std::errc() && r.ptr == v.data() + v.size()) t->retry_after = s;
  } else if (iequals_prefix(line, "content-range:")) {
    const std::string_view v = value(14);
    const auto slash = v.rfind('/');
    std::uint64_t total = 0;
    if (slash != std::string_view::npos) {
      const auto r = std::from_chars(v.data() + slash + 1, v.data() + v.size(), total);
      if (r.ec == std::errc()) t->range_total = total;
    }
  }
  return one * n;
}

}  // namespace fetch_detail

using fetch_detail::Transfer;

struct Fetcher::Driver {
  Fetcher& owner;
  CURLM* multi = nullptr;
  // The thread sleeps in epoll_wait on the transfers' sockets (libcurl says which through
  // on_socket) and on `wake_fd` (submit, give_up_retries, stop), and hands libcurl only the
  // sockets that are ready (curl_multi_socket_action). curl_multi_perform + curl_multi_poll
  // walked every transfer and polled every socket on each wake-up: with 128 ranged GETs in
  // flight over an 80 ms round trip that thread took 0.18 ms of CPU per image, 20% of the
  // decoding core (docs/PERFORMANCE.md).
  int epoll_fd = -1;
  int wake_fd = -1;
  base::Mutex mu;
  std::vector<std::unique_ptr<Transfer>> incoming STOKER_GUARDED_BY(mu);
  bool stop STOKER_GUARDED_BY(mu) = false;
  // Fetcher::give_up_retries(): no attempt is repeated any more, and those waiting for a
  // retry's time are answered at once.
  std::atomic<bool> no_retries{false};
  // The driver thread's own: transfers waiting for their (re)try's time, and those running.
  std::vector<std::unique_ptr<Transfer>> waiting;
  std::unordered_map<CURL*, std::unique_ptr<Transfer>> active;
  std::mt19937_64 rng{std::random_device{}()};
  // What requests are signed with; the driver thread's own. Options' at first, re-read
  // (Options::reload_credentials) when their file changes (looked at every
  // Options::credentials_check at most) or a store answers that they expired.
  Credentials creds;
  Clock::time_point creds_checked{};
  std::string creds_stamp;
  std::thread thread;

  explicit Driver(Fetcher& f) : owner(f), creds(f.options_.credentials), creds_stamp(file_stamp(creds.file)) {
    creds_checked = Clock::now();
    global_init();
    multi = curl_multi_init();
    epoll_fd = ::epoll_create1(EPOLL_CLOEXEC);
    wake_fd = epoll_fd < 0 ? -1 : ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (multi == nullptr || epoll_fd < 0 || wake_fd < 0) {
      release_unstarted();
      throw std::system_error(errno, std::generic_category(), "object storage fetcher: epoll/eventfd");
    }
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.fd = wake_fd;
    ::epoll_ctl(epoll_fd, EPOLL_CTL_ADD, wake_fd, &ev);
    curl_multi_setopt(multi, CURLMOPT_SOCKETFUNCTION, &Driver::on_socket);
    curl_multi_setopt(multi, CURLMOPT_SOCKETDATA, this);
    // Bounded: a burst of reads queues in libcurl rather than opening a connection each. As
    // many as a job's read-ahead may have in flight over a slow link (job_read.cpp's
    // kObjectReadsInFlight): HTTP/1.1 carries one request at a time per connection.
    curl_multi_setopt(multi, CURLMOPT_MAX_TOTAL_CONNECTIONS, 128L);
    // The driver takes no signal: stokerd's control loop takes them through a signalfd, and a
    // thread that left SIGTERM unblocked would let it kill the process (this one may be made
    // while a job loads, on a thread whatever its mask). Blocked here, inherited by the thread.
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old);
    try {
      thread = std::thread([this] { loop(); });
    } catch (...) {  // out of threads (EAGAIN)
      pthread_sigmask(SIG_SETMASK, &old, nullptr);
      release_unstarted();
      throw;
    }
    pthread_sigmask(SIG_SETMASK, &old, nullptr);
  }

  // A constructor that throws (out of descriptors, memory or threads) runs no destructor:
  // what it made is released here, so a fault of the machine leaks nothing.
  void release_unstarted() {
    const int err = errno;
    if (wake_fd >= 0) ::close(wake_fd);
    if (epoll_fd >= 0) ::close(epoll_fd);
    if (multi != nullptr) curl_multi_cleanup(multi);
    errno = err;
  }

  ~Driver() {
    {
      base::MutexLock lock(mu);
      stop = true;
    }
    wake();
    thread.join();
    curl_multi_cleanup(multi);
    ::close(wake_fd);
    ::close(epoll_fd);
  }

  void wake() {
    const std::uint64_t one = 1;
    // EAGAIN: the counter is full, so the thread has a wake-up pending anyway.
    while (::write(wake_fd, &one, sizeof one) < 0 && errno == EINTR) {
    }
  }

  // libcurl: watch socket `s` for `what` (CURL_POLL_IN/OUT/INOUT), or forget it (REMOVE).
  // `socketp` is what curl_multi_assign gave this socket: non-null once it is in the epoll set.
  static int on_socket(CURL*, curl_socket_t s, int what, void* self, void* socketp) {
    auto* d = static_cast<Driver*>(self);
    if (what == CURL_POLL_REMOVE) {
      ::epoll_ctl(d->epoll_fd, EPOLL_CTL_DEL, s, nullptr);  // ENOENT/EBADF: already gone
      curl_multi_assign(d->multi, s, nullptr);
      return 0;
    }
    epoll_event ev{};
    ev.events = (what & CURL_POLL_IN ? EPOLLIN : 0u) | (what & CURL_POLL_OUT ? EPOLLOUT : 0u);
    ev.data.fd = s;
    // MOD where this socket is known, ADD where not; each falls back to the other, so a
    // descriptor number libcurl closed and reused unseen cannot leave a socket unwatched.
    const bool known = socketp != nullptr;
    if (::epoll_ctl(d->epoll_fd, known ? EPOLL_CTL_MOD : EPOLL_CTL_ADD, s, &ev) != 0) {
      ::epoll_ctl(d->epoll_fd, known ? EPOLL_CTL_ADD : EPOLL_CTL_MOD, s, &ev);
    }
    if (!known) curl_multi_assign(d->multi, s, d);
    return 0;
  }

  void socket_action(curl_socket_t s, int flags) {
    int running = 0;
    curl_multi_socket_action(multi, s, flags, &running);
  }

  void submit(std::unique_ptr<Transfer> t) {
    bool wake = false;
    {
      base::MutexLock lock(mu);
      // One wake-up per batch: while `incoming` is not empty the thread has been woken for it
      // and not yet taken it (read-ahead submits dozens of reads back to back).
      wake = incoming.empty();
      incoming.push_back(std::move(t));
    }
    if (wake) this->wake();
  }

  // Re-reads the credentials when `force`d or their file changed; true when they changed.
  // A re-read that fails keeps the ones in use (a file caught half-written is read again at
  // the next look).
  bool refresh_credentials(bool force) {
    const Options& o = owner.options_;
    if (!o.reload_credentials) return false;
    const auto now = Clock::now();
    if (!force) {
      if (creds.file.empty() || now - creds_checked < o.credentials_check) return false;
      creds_checked = now;
      if (file_stamp(creds.file) == creds_stamp) return false;
    }
    creds_checked = now;
    base::Result<Credentials> fresh = o.reload_credentials();
    if (!fresh || fresh->empty()) return false;
    const bool changed = fresh->access_key != creds.access_key || fresh->secret_key != creds.secret_key ||
                         fresh->session_token != creds.session_token;
    creds = std::move(*fresh);
    creds_stamp = file_stamp(creds.file);
    if (changed) owner.stats_.credential_reloads.fetch_add(1, std::memory_order_relaxed);
    return changed;
  }

  void start(std::unique_ptr<Transfer> t) {
    const Options& o = owner.options_;
    t->release();
    t->body.clear();
    // A ranged GET's body size is known: one allocation, not a vector doubling (and copying)
    // its way up to a 100 KiB image in 16 KiB pieces.
    if (t->req.ranged && t->req.sink_fd < 0) t->body.reserve(t->req.size);
    t->retry_after.reset();
    t->range_total.reset();
    t->errbuf[0] = 0;
    t->sunk = 0;
    t->sink_failed = false;
    if (t->req.sink_fd >= 0) (void)::ftruncate(t->req.sink_fd, 0);  // a retry starts the object over
    if (t->req.watch != nullptr) t->req.watch->restarted();
    CURL* e = curl_easy_init();
    t->easy = e;
    curl_easy_setopt(e, CURLOPT_URL, t->req.url.c_str());
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(e, CURLOPT_FOLLOWLOCATION, 0L);  // a redirect must not carry a signature elsewhere
    curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, o.connect_timeout_ms);
    curl_easy_setopt(e, CURLOPT_LOW_SPEED_LIMIT, 1L);
    curl_easy_setopt(e, CURLOPT_LOW_SPEED_TIME, o.stall_seconds);
    curl_easy_setopt(e, CURLOPT_ERRORBUFFER, t->errbuf);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, fetch_detail::on_body);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, t.get());
    curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, fetch_detail::on_header);
    curl_easy_setopt(e, CURLOPT_HEADERDATA, t.get());
    if (t->req.kind == Request::Kind::kHead) {
      curl_easy_setopt(e, CURLOPT_NOBODY, 1L);
      curl_easy_setopt(e, CURLOPT_FILETIME, 1L);
    }
    std::string range;
    if (t->req.ranged) {
      range = std::to_string(t->req.offset) + "-" + std::to_string(t->req.offset + t->req.size - 1);
      curl_easy_setopt(e, CURLOPT_RANGE, range.c_str());  // copied by libcurl
    }
    if (t->req.sign) {
      refresh_credentials(false);
      const std::string provider = "aws:amz:" + o.region + ":s3";
      curl_easy_setopt(e, CURLOPT_AWS_SIGV4, provider.c_str());
      curl_easy_setopt(e, CURLOPT_USERNAME, creds.access_key.c_str());  // copied by libcurl
      curl_easy_setopt(e, CURLOPT_PASSWORD, creds.secret_key.c_str());
      t->headers = curl_slist_append(t->headers, (std::string("x-amz-content-sha256: ") + kEmptyPayloadSha256).c_str());
      if (!creds.session_token.empty()) {
        t->headers = curl_slist_append(t->headers, ("x-amz-security-token: " + creds.session_token).c_str());
      }
      curl_easy_setopt(e, CURLOPT_HTTPHEADER, t->headers);
    }
    ++t->attempt;
    t->started = Clock::now();
    owner.stats_.requests.fetch_add(1, std::memory_order_relaxed);
    curl_multi_add_handle(multi, e);
    active.emplace(e, std::move(t));
  }

  void finish(CURL* easy, CURLcode rc) {
    auto node = active.extract(easy);
    std::unique_ptr<Transfer> t = std::move(node.mapped());
    curl_multi_remove_handle(multi, easy);
    owner.stats_.record_latency(std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - t->started));
    const Options& o = owner.options_;
    long code = 0;
    curl_easy_getinfo(easy, CURLINFO_RESPONSE_CODE, &code);
    FetchResult r;
    r.http_status = code;
    bool retry = false;
    std::string what;
    if (rc != CURLE_OK && t->sink_failed) {
      what = std::string("cannot write what was fetched: ") + std::strerror(t->sink_errno);
      r.error = FetchError::kOther;
    } else if (rc != CURLE_OK) {
      retry = retryable_curl(rc);
      what = std::string(curl_easy_strerror(rc)) + (t->errbuf[0] != 0 ? std::string(" (") + t->errbuf + ")" : "");
      r.error = FetchError::kOther;
    } else if (code == 200 || code == 206) {
      if (t->req.kind == Request::Kind::kHead) {
        curl_off_t len = -1, mtime = -1;
        curl_easy_getinfo(easy, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &len);
        curl_easy_getinfo(easy, CURLINFO_FILETIME_T, &mtime);
        r.size = len < 0 ? 0 : static_cast<std::uint64_t>(len);
        r.mtime = mtime;
      } else if (t->req.sink_fd >= 0) {
        r.size = t->sunk;
      } else if (t->req.ranged) {
        if (code == 200 && t->body.size() >= t->req.offset + t->req.size) {
          // A server that ignores Range sent the whole object: keep the part asked for.
          t->body.erase(t->body.begin(), t->body.begin() + static_cast<std::ptrdiff_t>(t->req.offset));
          t->body.resize(t->req.size);
        } else if (t->body.size() != t->req.size) {
          if (t->range_total && *t->range_total < t->req.offset + t->req.size) {
            // The object is now shorter than what was indexed: it changed, as a shard
            // truncated on disk; retrying will not bring the bytes back.
            r.error = FetchError::kNotFound;
            what = "the object is now " + std::to_string(*t->range_total) + " bytes, shorter than indexed";
          } else {
            retry = true;
            what = "short body: " + std::to_string(t->body.size()) + " of " + std::to_string(t->req.size) + " bytes";
          }
        }
      }
      if (!retry && r.error == FetchError::kNone) r.body = std::move(t->body);
    } else if (code >= 500 || code == 429 || code == 408) {
      retry = true;
      what = "HTTP " + std::to_string(code);
    } else if (code == 404 || code == 410) {
      r.error = FetchError::kNotFound;
      what = "HTTP " + std::to_string(code) + " not found";
    } else if (code == 416) {
      r.error = FetchError::kNotFound;
      what = "HTTP 416: the object is now shorter than indexed";
    } else if ((code == 400 || code == 401 || code == 403) && t->req.sign &&
               expired_credentials(s3_error_code(t->body))) {
      if (!t->creds_renewed && refresh_credentials(true)) {
        // The file (or whatever refreshes it) holds new ones: once more, signed anew.
        t->creds_renewed = true;
        retry = true;
        what = "HTTP " + std::to_string(code) + " (credentials expired; re-read from " + creds.describe() + ")";
      } else {
        r.error = FetchError::kDenied;
        what = "HTTP " + std::to_string(code) + " the credentials expired (credentials: " + creds.describe() +
               "; renew them there)";
      }
    } else if (code == 401 || code == 403) {
      r.error = FetchError::kDenied;
      what = "HTTP " + std::to_string(code) + " access denied (credentials: " + creds.describe() + ")";
    } else {
      r.error = FetchError::kOther;
      what = "HTTP " + std::to_string(code);
    }
    if (!what.empty()) {
      if (const std::string c = s3_error_code(t->body); !c.empty() && rc == CURLE_OK) what += " " + c;
    }
    if (retry && t->attempt < o.max_attempts && !no_retries.load()) {
      owner.stats_.retries.fetch_add(1, std::memory_order_relaxed);
      const double unit = std::uniform_real_distribution<double>(0.0, 1.0)(rng);
      t->due = Clock::now() + retry_delay(o, t->attempt, t->retry_after, unit);
      t->release();
      waiting.push_back(std::move(t));
      return;
    }
    if (retry) {
      r.error = FetchError::kTransient;
      owner.stats_.transient.fetch_add(1, std::memory_order_relaxed);
      what += ", after " + std::to_string(t->attempt) + " attempt(s)";
    } else if (r.error == FetchError::kNotFound) {
      owner.stats_.not_found.fetch_add(1, std::memory_order_relaxed);
    } else if (r.error == FetchError::kDenied) {
      owner.stats_.denied.fetch_add(1, std::memory_order_relaxed);
    } else if (r.error == FetchError::kOther) {
      owner.stats_.other_errors.fetch_add(1, std::memory_order_relaxed);
    }
    if (!r.ok()) r.message = t->req.name + ": " + what;
    t->release();
    t->done(std::move(r));
  }

  void loop() {
    for (;;) {
      std::vector<std::unique_ptr<Transfer>> fresh;
      {
        base::MutexLock lock(mu);
        if (stop) break;
        fresh.swap(incoming);
      }
      for (auto& t : fresh) start(std::move(t));
      if (no_retries.load()) {
        // Those waiting to be tried again and those running (a store that accepted the
        // connection and went silent holds one up to stall_seconds) are answered now.
        auto give_up = [this](Transfer& t) {
          FetchResult r;
          r.error = FetchError::kTransient;
          r.message = t.req.name + ": given up (stokerd is stopping)";
          owner.stats_.transient.fetch_add(1, std::memory_order_relaxed);
          t.release();
          t.done(std::move(r));
        };
        for (auto& t : waiting) give_up(*t);
        waiting.clear();
        for (auto& [easy, t] : active) {
          curl_multi_remove_handle(multi, easy);
          give_up(*t);
        }
        active.clear();
      }
      const auto now = Clock::now();
      auto due_end = std::partition(waiting.begin(), waiting.end(), [&](const auto& t) { return t->due > now; });
      std::vector<std::unique_ptr<Transfer>> ready;
      for (auto it = due_end; it != waiting.end(); ++it) ready.push_back(std::move(*it));
      waiting.erase(due_end, waiting.end());
      for (auto& t : ready) start(std::move(t));

      // Sleep until a socket is ready, a submit wakes us, libcurl's deadline or the next retry
      // is due (at most 500 ms: the stop and give-up flags are looked at each turn). libcurl's
      // deadline (its connect and stall timeouts, a transfer just added, a connection freed
      // for one waiting on the cap) is asked each turn with curl_multi_timeout rather than
      // kept from CURLMOPT_TIMERFUNCTION, which is not called again while the earliest
      // deadline stays the same: a turn that woke a hair before it would forget it.
      const auto turn = Clock::now();
      long curl_ms = -1;
      curl_multi_timeout(multi, &curl_ms);
      const std::optional<Clock::time_point> curl_due =
          curl_ms < 0 ? std::nullopt : std::optional(turn + std::chrono::milliseconds(curl_ms));
      Clock::time_point until = turn + std::chrono::milliseconds(500);
      for (const auto& t : waiting) until = std::min(until, t->due);
      if (curl_due) until = std::min(until, *curl_due);
      const auto wait_ms = std::chrono::ceil<std::chrono::milliseconds>(until - Clock::now()).count();
      epoll_event events[64];
      const int n = ::epoll_wait(epoll_fd, events, 64, static_cast<int>(std::max<std::int64_t>(0, wait_ms)));
      for (int i = 0; i < n; ++i) {
        const int fd = events[i].data.fd;
        if (fd == wake_fd) {
          std::uint64_t count = 0;
          (void)!::read(wake_fd, &count, sizeof count);
          continue;
        }
        const std::uint32_t e = events[i].events;
        socket_action(fd, (e & EPOLLIN ? CURL_CSELECT_IN : 0) | (e & EPOLLOUT ? CURL_CSELECT_OUT : 0) |
                              (e & (EPOLLERR | EPOLLHUP) ? CURL_CSELECT_ERR : 0));
      }
      if (curl_due && Clock::now() >= *curl_due) socket_action(CURL_SOCKET_TIMEOUT, 0);
      int left = 0;
      while (CURLMsg* m = curl_multi_info_read(multi, &left)) {
        if (m->msg == CURLMSG_DONE) finish(m->easy_handle, m->data.result);
      }
    }
    // Stopping: whoever waits gets an answer (transient: the daemon is going away, not the file).
    auto fail = [](Transfer& t) {
      FetchResult r;
      r.error = FetchError::kTransient;
      r.message = t.req.name + ": stopped";
      t.done(std::move(r));
    };
    for (auto& [easy, t] : active) {
      curl_multi_remove_handle(multi, easy);
      fail(*t);
    }
    active.clear();
    for (auto& t : waiting) fail(*t);
    waiting.clear();
    base::MutexLock lock(mu);
    for (auto& t : incoming) fail(*t);
    incoming.clear();
  }
};

Fetcher::Fetcher(Options options) : options_(std::move(options)), driver_(std::make_unique<Driver>(*this)) {}

Fetcher::~Fetcher() = default;

void Fetcher::give_up_retries() {
  driver_->no_retries.store(true);
  driver_->wake();
}

void Fetcher::start(Request request, Done done) {
  auto t = std::make_unique<Transfer>();
  t->req = std::move(request);
  t->stats = &stats_;
  stats_.in_flight.fetch_add(1, std::memory_order_relaxed);
  t->done = [this, done = std::move(done)](FetchResult&& r) {
    stats_.in_flight.fetch_sub(1, std::memory_order_relaxed);
    done(std::move(r));
  };
  driver_->submit(std::move(t));
}

FetchResult Fetcher::run(Request request) {
  std::promise<FetchResult> answer;
  std::future<FetchResult> f = answer.get_future();
  start(std::move(request), [&answer](FetchResult&& r) { answer.set_value(std::move(r)); });
  return f.get();
}

Addressing choose_addressing(const std::string& configured, const std::string& endpoint, const std::string& region) {
  const std::string aws_own = resolve_endpoint("", region, [](const char*) { return std::optional<std::string>(); });
  return configured == "virtual" || (configured.empty() && endpoint == aws_own) ? Addressing::kVirtualHost
                                                                               : Addressing::kPath;
}

bool virtual_host_bucket(const std::string& bucket) {
  // DNS-safe: 3-63 of [a-z0-9-], not starting or ending with '-'. A bucket with dots would
  // break TLS's name check under https (*.s3... covers one label), so it stays path-style.
  if (bucket.size() < 3 || bucket.size() > 63 || bucket.front() == '-' || bucket.back() == '-') return false;
  return std::all_of(bucket.begin(), bucket.end(),
                     [](char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-'; });
}

std::string bucket_base(const Fetcher::Options& o, const std::string& bucket) {
  const std::size_t host = o.endpoint.find("://");
  if (o.addressing == Addressing::kVirtualHost && host != std::string::npos && virtual_host_bucket(bucket)) {
    return o.endpoint.substr(0, host + 3) + bucket + "." + o.endpoint.substr(host + 3);
  }
  return o.endpoint + "/" + bucket;
}

namespace {

std::string request_url(const Fetcher::Options& o, const ObjectUrl& u) {
  if (u.scheme != Scheme::kS3) return u.bucket + "/" + u.key;
  return bucket_base(o, u.bucket) + "/" + uri_encode(u.key, /*keep_slash=*/true);
}

}  // namespace

FetchResult Fetcher::get(const ObjectUrl& url, bool use_cache) {
  const std::string key = url.text();
  ObjectCache* cache = use_cache ? options_.cache.get() : nullptr;
  FetchResult hit;
  if (cache != nullptr && cache->get(key, hit.body)) {
    stats_.cache_hits.fetch_add(1, std::memory_order_relaxed);
    return hit;
  }
  Request r;
  r.url = request_url(options_, url);
  r.name = "GET " + url.text();
  r.sign = url.scheme == Scheme::kS3 && !options_.credentials.empty();
  FetchResult got = run(std::move(r));
  if (got.ok() && cache != nullptr) cache->put(key, got.body);
  return got;
}

Fetcher::Request Fetcher::range_request(const ObjectUrl& url, std::uint64_t offset, std::uint64_t size) const {
  Request r;
  r.url = request_url(options_, url);
  r.name = "GET " + url.text() + " bytes " + std::to_string(offset) + "-" + std::to_string(offset + size - 1);
  r.sign = url.scheme == Scheme::kS3 && !options_.credentials.empty();
  r.ranged = true;
  r.offset = offset;
  r.size = size;
  return r;
}

FetchResult Fetcher::get_range(const ObjectUrl& url, std::uint64_t offset, std::uint64_t size) {
  if (size == 0) return FetchResult{};
  // Keyed by the range too: a shard's members are cached one by one, as they are read.
  const std::string key = url.text() + "#" + std::to_string(offset) + "+" + std::to_string(size);
  FetchResult hit;
  if (options_.cache != nullptr && options_.cache->get(key, hit.body) && hit.body.size() == size) {
    stats_.cache_hits.fetch_add(1, std::memory_order_relaxed);
    return hit;
  }
  FetchResult got = run(range_request(url, offset, size));
  if (got.ok() && options_.cache != nullptr) options_.cache->put(key, got.body);
  return got;
}

void Fetcher::get_range_async(const ObjectUrl& url, std::uint64_t offset, std::uint64_t size, Done done) {
  // With a cache, the range is read on this thread (a hit is a local file read, and a miss's
  // cache write must not hold up the fetcher's thread and every transfer on it).
  if (size == 0 || options_.cache != nullptr) return done(get_range(url, offset, size));
  start(range_request(url, offset, size), std::move(done));
}

FetchResult Fetcher::get_to_fd(const ObjectUrl& url, int fd, SinkWatch* watch) {
  Request r;
  r.watch = watch;
  r.url = request_url(options_, url);
  r.name = "GET " + url.text();
  r.sign = url.scheme == Scheme::kS3 && !options_.credentials.empty();
  r.sink_fd = fd;
  return run(std::move(r));
}

FetchResult Fetcher::head(const ObjectUrl& url) {
  Request r;
  r.kind = Request::Kind::kHead;
  r.url = request_url(options_, url);
  r.name = "HEAD " + url.text();
  r.sign = url.scheme == Scheme::kS3 && !options_.credentials.empty();
  return run(std::move(r));
}

base::Result<ListPage> Fetcher::list(const ObjectUrl& prefix, const std::string& delimiter) {
  if (prefix.scheme != Scheme::kS3) {
    return base::Status::error(prefix.text() + ": only s3:// URLs can be listed (an https:// server has no listing)");
  }
  ListPage all;
  std::string token;
  for (;;) {
    // SigV4 signs the query in canonical form: parameters sorted by name, values encoded.
    // Built that way here, the query sent is already canonical.
    std::string q;
    if (!token.empty()) q += "continuation-token=" + uri_encode(token, false) + "&";
    if (!delimiter.empty()) q += "delimiter=" + uri_encode(delimiter, false) + "&";
    q += "list-type=2&prefix=" + uri_encode(prefix.key, false);
    Request r;
    // The bucket's root: "/BUCKET?..." path-style (as before), "BUCKET.HOST/?..." virtual-host.
    const std::string base = bucket_base(options_, prefix.bucket);
    r.url = base + (base == options_.endpoint + "/" + prefix.bucket ? "?" : "/?") + q;
    r.name = "LIST " + prefix.text();
    r.sign = !options_.credentials.empty();
    FetchResult got = run(std::move(r));
    if (!got.ok()) return base::Status::error(got.message);
    auto page = parse_list_page(std::string_view(reinterpret_cast<const char*>(got.body.data()), got.body.size()));
    if (!page) return base::Status::error("LIST " + prefix.text() + ": the answer is not a ListObjectsV2 result");
    for (auto& o : page->objects) all.objects.push_back(std::move(o));
    for (auto& p : page->prefixes) all.prefixes.push_back(std::move(p));
    if (!page->truncated) break;
    token = page->next_token;
  }
  return all;
}

}  // namespace stoker::objstore
