#include "remote/worker_server.hpp"

#include <chrono>
#include <deque>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <stdexcept>
#include <thread>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "log/log.hpp"
#include "remote/endpoints.hpp"
#include "remote/protocol.hpp"
#include "remote/results_listener.hpp"
#include "remote/worker_stream.hpp"
#include "base/mutex.hpp"
#include "stoker/remote/worker.grpc.pb.h"

namespace stoker::remote {

base::Result<std::string> read_secret_file(const std::string& path, const char* what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return base::Status::error(std::string(what) + " '" + path + "': cannot read it");
  std::stringstream ss;
  ss << in.rdbuf();
  std::string s = ss.str();
  if (s.size() > (1u << 20)) return base::Status::error(std::string(what) + " '" + path + "': larger than 1 MiB");
  return s;
}

namespace {

// Past --max-streams: the call is ended at once, before anything is allocated for it.
class Refusal final : public grpc::ServerBidiReactor<v1::Request, v1::Reply> {
 public:
  explicit Refusal(grpc::Status why) { Finish(std::move(why)); }
  void OnDone() override { delete this; }
};

}  // namespace

class WorkerServer::Impl final : public v1::Worker::CallbackService, public StreamHost {
 public:
  Impl(WorkerSettings settings, FaultPlan fault) : settings_(std::move(settings)), fault_(fault) {}

  grpc::ServerBidiReactor<v1::Request, v1::Reply>* Work(grpc::CallbackServerContext* ctx) override {
    // A4: at most max_streams at once, refused before anything is allocated for the stream.
    // A stream holds no thread while it waits (worker_stream.hpp); the cap bounds memory.
    const unsigned cap = settings_.max_streams;
    if (counters_.active.fetch_add(1) >= cap) {
      counters_.active--;
      counters_.refused++;
      const std::string why = "this worker serves at most " + std::to_string(cap) +
                              " streams at once (--max-streams); try again later";
      if (first_from(ctx->peer(), PeerLog::kBusy))
        stoker::log::warn("worker: refused a stream from {}: {}", ctx->peer(), why);
      return new Refusal(grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED, why));
    }
    return WorkerStream::start(*this, ctx, next_serial_++);
  }

  // ---- StreamHost ----
  const WorkerSettings& settings() const override { return settings_; }
  Counters& counters() override { return counters_; }

  void schedule(std::shared_ptr<WorkerStream> stream) override {
    {
      base::MutexLock lock(mu_);
      ready_.push_back(std::move(stream));
    }
    cv_.notify_one();
  }

  void watch(grpc::CallbackServerContext* ctx, std::chrono::steady_clock::time_point until) override {
    {
      base::MutexLock lock(watch_mu_);
      waiting_open_[ctx] = until;
    }
    watch_cv_.notify_all();
  }

  bool unwatch(grpc::CallbackServerContext* ctx) override {
    base::MutexLock lock(watch_mu_);
    return waiting_open_.erase(ctx) == 1;
  }

  void wake_at(std::shared_ptr<WorkerStream> stream, std::chrono::steady_clock::time_point when) override {
    bool sooner = false;
    {
      base::MutexLock lock(watch_mu_);
      if (watch_stop_) return;  // shutting down: the stream's results go with it
      sooner = lingers_.empty() || when < lingers_.begin()->first;
      lingers_.emplace(when, std::move(stream));
    }
    if (sooner) watch_cv_.notify_all();
  }

  // Whether this is the first time `peer`'s host ("ipv4:10.0.0.7:51234" less its port) is
  // named for `why` (a log line once per peer; forgets all past 4096 hosts). The set is picked
  // under the lock, so the thread-safety analysis sees every access guarded.
  bool first_from(const std::string& peer, PeerLog why) override {
    const std::size_t colon = peer.rfind(':');
    std::string host = colon == std::string::npos ? peer : peer.substr(0, colon);
    base::MutexLock lock(peers_mu_);
    std::set<std::string>& seen =
        why == PeerLog::kBusy ? busy_peers_ : why == PeerLog::kTimeout ? timeout_peers_ : token_peers_;
    if (seen.size() >= 4096) seen.clear();
    return seen.insert(std::move(host)).second;
  }

  // ---- the server's own threads ----
  void start_threads(unsigned n) {
    for (unsigned i = 0; i < n; ++i) threads_.emplace_back([this] { run(); });
    open_watchdog_ = std::thread([this] { cancel_late_opens(); });
  }

  void stop_threads() {
    {
      base::MutexLock lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    for (std::thread& t : threads_) t.join();
    threads_.clear();
    {
      base::MutexLock lock(mu_);
      ready_.clear();
    }
    {
      base::MutexLock lock(watch_mu_);
      watch_stop_ = true;
    }
    watch_cv_.notify_all();
    if (open_watchdog_.joinable()) open_watchdog_.join();
    std::multimap<std::chrono::steady_clock::time_point, std::shared_ptr<WorkerStream>> lingers;
    {
      base::MutexLock lock(watch_mu_);
      lingers.swap(lingers_);
    }
  }

  WorkerStats stats() const {
    WorkerStats s;
    s.items = items_.load();
    s.errors = errors_.load() + counters_.errors.load();
    s.refused = counters_.refused.load();
    s.bytes_sent = bytes_sent_.load();
    s.busy_ns = busy_ns_.load();
    s.streams = counters_.streams.load();
    s.open_timeouts = open_timeouts_.load();
    s.sessions = counters_.sessions.load();
    s.stalls = counters_.stalls.load();
    return s;
  }

 private:
  // One thread for every stream's Open deadline: cancels (TryCancel) those past it; their
  // outstanding read then completes and the stream ends. Under watch_mu_, so a stream whose
  // first read completes (unwatch) is never cancelled after it has moved on. The same thread
  // ends the streams' lingers (wake_at), calling them outside watch_mu_ (a stream's mutex is
  // taken before watch_mu_ when it asks for a timer, never after).
  void cancel_late_opens() {
    base::MutexLock lock(watch_mu_);
    while (!watch_stop_) {
      auto now = std::chrono::steady_clock::now();
      if (!lingers_.empty() && lingers_.begin()->first <= now) {
        std::vector<std::shared_ptr<WorkerStream>> due;
        while (!lingers_.empty() && lingers_.begin()->first <= now) {
          due.push_back(std::move(lingers_.begin()->second));
          lingers_.erase(lingers_.begin());
        }
        lock.unlock();
        for (const std::shared_ptr<WorkerStream>& st : due) st->linger_due();
        due.clear();  // a stream may end here, outside watch_mu_
        lock.lock();
        continue;
      }
      auto next = now + std::chrono::seconds(1);
      if (!lingers_.empty()) next = std::min(next, lingers_.begin()->first);
      for (auto it = waiting_open_.begin(); it != waiting_open_.end();) {
        if (it->second <= now) {
          // Counted before the cancel, so a peer that sees its stream end sees the count too.
          open_timeouts_++;
          counters_.refused++;
          it->first->TryCancel();
          it = waiting_open_.erase(it);
        } else {
          next = std::min(next, it->second);
          ++it;
        }
      }
      watch_cv_.wait_for(lock, next - now);
    }
  }

  // A decode thread: streams in the order they became ready, one item each, so two busy
  // streams share the threads and a parked one holds none.
  void run() {
    std::map<std::uint64_t, std::unique_ptr<image::SampleProcessor>> processors;  // by stream serial
    std::vector<std::uint8_t> bytes;
    for (;;) {
      std::shared_ptr<WorkerStream> st;
      {
        base::MutexLock lock(mu_);
        while (!stop_ && ready_.empty()) cv_.wait(lock);
        if (stop_) return;
        st = std::move(ready_.front());
        ready_.pop_front();
      }
      std::optional<WorkerStream::Taken> t = st->take();
      if (!t) continue;
      if (processors.size() > 64) processors.clear();  // streams come and go; rebuilt on demand
      std::unique_ptr<image::SampleProcessor>& p = processors[st->serial()];
      if (!p) p = std::make_unique<image::SampleProcessor>(st->session().pipeline());
      v1::Result r;
      r.set_queued_ns(static_cast<std::uint64_t>(
          std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t->arrived).count()));
      st->session().process(t->item, *p, bytes, r, &t->fetched);
      if (st->session().compresses_when_waiting() && st->results_wait_on_link()) st->session().compress_result(r);
      items_++;
      busy_ns_ += r.busy_ns();
      if (r.error() != 0) errors_++;
      bytes_sent_ += r.pixels().size();
      if (spoilable(r) && ++spoiled_ % fault_.every == 0) spoil(r);
      st->deliver(std::move(r));
    }
  }

  // --inject-fault: what a broken or hostile worker might send instead.
  void spoil(v1::Result& r) const {
    std::string& px = *r.mutable_pixels();
    switch (fault_.kind) {
      case Fault::kWrongSize:
        px.push_back('x');
        break;
      case Fault::kUnknownId:
        r.set_id(r.id() + (std::uint64_t{1} << 40));
        break;
      case Fault::kCorruptFrame:  // a zstd frame (spoilable)
        px[px.size() / 2] = static_cast<char>(px[px.size() / 2] ^ 0x5a);
        break;
      case Fault::kFlipPixels:  // raw pixels (spoilable)
        px[px.size() / 3] = static_cast<char>(px[px.size() / 3] ^ 0x01);
        break;
      case Fault::kNone:
      case Fault::kOversizeFrame:   // the results connection, not the result: spoil_results_frame
      case Fault::kMiscountFrame:   // likewise
      case Fault::kUnboundResults:  // and refuse_results_binding
      case Fault::kStallFrame:      // and stall_results_frame
      case Fault::kSlowResults:     // and pace_results_frame
        break;
    }
  }

  ResultsListener* results_listener() override { return results_.get(); }
  FrameLie spoil_results_frame() override {
    const FrameLie lie = fault_.kind == Fault::kOversizeFrame   ? FrameLie::kLength
                         : fault_.kind == Fault::kMiscountFrame ? FrameLie::kPixelCount
                                                                : FrameLie::kNone;
    return lie != FrameLie::kNone && ++spoiled_ % fault_.every == 0 ? lie : FrameLie::kNone;
  }
  bool refuse_results_binding() override { return fault_.kind == Fault::kUnboundResults; }
  std::chrono::milliseconds stall_results_frame() override {
    return fault_.kind == Fault::kStallFrame && ++spoiled_ % fault_.every == 0 ? kStallFrameFor
                                                                               : std::chrono::milliseconds(0);
  }
  std::chrono::microseconds pace_results_frame(std::size_t bytes) override {
    if (fault_.kind != Fault::kSlowResults) return std::chrono::microseconds(0);
    return std::chrono::microseconds(bytes * 1'000'000 / (fault_.every * 1024));  // `every`: KiB/s
  }
  // Whether the fault spoils this result, and so counts it towards its every Nth: the faults that
  // spoil the results connection count nothing here. A frame is corrupted only where there is a
  // zstd frame and a pixel flipped only where pixels are raw: under zstd a sample zstd cannot
  // shrink leaves raw, so `corrupt-frame` would otherwise spoil some results another way and the
  // node would log another error than the one its test looks for.
  bool spoilable(const v1::Result& r) const {
    switch (fault_.kind) {
      case Fault::kWrongSize:
      case Fault::kUnknownId:
        return true;
      case Fault::kCorruptFrame:
        return r.compressed() && !r.pixels().empty();
      case Fault::kFlipPixels:
        return !r.compressed() && !r.pixels().empty();
      case Fault::kNone:
      case Fault::kOversizeFrame:
      case Fault::kMiscountFrame:
      case Fault::kUnboundResults:
      case Fault::kStallFrame:
      case Fault::kSlowResults:
        return false;
    }
    return false;
  }

  const WorkerSettings settings_;
  const FaultPlan fault_;
  // Plaintext only (results_channel.hpp); stopped before the server, so no stream binds late.
  std::unique_ptr<ResultsListener> results_;
  Counters counters_;
  std::atomic<std::uint64_t> spoiled_{0};
  std::atomic<std::uint64_t> next_serial_{1};
  std::atomic<std::uint64_t> items_{0}, errors_{0}, bytes_sent_{0}, busy_ns_{0}, open_timeouts_{0};
  base::Mutex watch_mu_;
  base::CondVar watch_cv_;
  std::map<grpc::CallbackServerContext*, std::chrono::steady_clock::time_point> waiting_open_
      STOKER_GUARDED_BY(watch_mu_);
  bool watch_stop_ STOKER_GUARDED_BY(watch_mu_) = false;
  // Streams whose results linger, by when their linger ends (worker_stream.hpp).
  std::multimap<std::chrono::steady_clock::time_point, std::shared_ptr<WorkerStream>> lingers_
      STOKER_GUARDED_BY(watch_mu_);
  std::thread open_watchdog_;
  base::Mutex peers_mu_;
  std::set<std::string> busy_peers_ STOKER_GUARDED_BY(peers_mu_), timeout_peers_ STOKER_GUARDED_BY(peers_mu_),
      token_peers_ STOKER_GUARDED_BY(peers_mu_);
  base::Mutex mu_;
  base::CondVar cv_;
  std::deque<std::shared_ptr<WorkerStream>> ready_ STOKER_GUARDED_BY(mu_);  // streams with items to make
  bool stop_ STOKER_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
  friend class WorkerServer;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
};

WorkerServer::WorkerServer(WorkerSettings settings, const std::string& listen, const TlsFiles& tls, FaultPlan fault) {
  const unsigned threads = settings.threads;
  if (fault.kind != Fault::kNone && fault.every == 0) fault.every = 1;
  impl_ = std::make_unique<Impl>(std::move(settings), fault);
  std::shared_ptr<grpc::ServerCredentials> creds = grpc::InsecureServerCredentials();
  if (tls.enabled()) {
    grpc::SslServerCredentialsOptions opts(tls.ca.empty() ? GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE
                                                          : GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
    opts.pem_root_certs = tls.ca;
    opts.pem_key_cert_pairs.push_back({tls.key, tls.cert});
    creds = grpc::SslServerCredentials(opts);
  }
  grpc::ServerBuilder builder;
  builder.AddListeningPort(listen, creds, &impl_->port_);
  builder.RegisterService(impl_.get());
  builder.SetMaxReceiveMessageSize(static_cast<int>(kMaxRequestBytes));
  builder.SetMaxSendMessageSize(-1);
  // Answer a GPU node's keepalive pings (it pings every 10 s to notice a dead link).
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 5000);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, 10000);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 5000);
  impl_->server_ = builder.BuildAndStart();
  if (!impl_->server_ || impl_->port_ == 0) {
    throw std::runtime_error("cannot listen on " + listen + " (address in use, not a local address, or bad TLS files)");
  }
  if (!tls.enabled()) {
    try {
      impl_->results_ = std::make_unique<ResultsListener>(split_address(listen).first, impl_->settings_.results_port);
    } catch (const std::exception& e) {
      // Not fatal: every stream's results then stay on it (as with TLS).
      stoker::log::warn("worker: {}; results travel on the gRPC streams", e.what());
    }
  }
  impl_->start_threads(threads);
}

WorkerServer::~WorkerServer() { shutdown(); }

int WorkerServer::port() const { return impl_->port_; }

int WorkerServer::results_port() const { return impl_->results_ ? impl_->results_->port() : 0; }

WorkerStats WorkerServer::stats() const { return impl_->stats(); }

void WorkerServer::shutdown() {
  if (!impl_ || !impl_->server_) return;
  // A decode thread waiting on a fetch in its backoff is answered now, so the threads join.
  if (impl_->settings_.objects) impl_->settings_.objects->give_up();
  if (impl_->results_) impl_->results_->stop();
  impl_->server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  impl_->stop_threads();
  impl_->server_.reset();
}

}  // namespace stoker::remote
