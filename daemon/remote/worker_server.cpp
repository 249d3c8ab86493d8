#include "remote/worker_server.hpp"

#include <chrono>
#include <deque>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <stdexcept>
#include <thread>
#include <vector>

#include <grpcpp/grpcpp.h>
#include <spdlog/spdlog.h>

#include "remote/protocol.hpp"
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

using Stream = grpc::ServerReaderWriter<v1::Reply, v1::Request>;

// One stream: its session, the writer shared by the decode threads, and its items held.
struct StreamState {
  StreamState(const WorkerSettings& s, Stream* st, std::uint64_t n) : session(s), stream(st), serial(n) {}
  WorkerSession session;
  Stream* stream;
  const std::uint64_t serial;  // never reused: a thread's processor for it is never another's
  base::Mutex mu;
  base::CondVar drained;
  std::size_t pending STOKER_GUARDED_BY(mu) = 0;
  bool broken STOKER_GUARDED_BY(mu) = false;  // a write failed: the peer is gone
  std::deque<v1::Result> outbox STOKER_GUARDED_BY(mu);  // finished, not written yet
  bool writing STOKER_GUARDED_BY(mu) = false;            // a thread is writing (deliver())
};

struct Task {
  std::shared_ptr<StreamState> stream;
  v1::Item item;
  std::chrono::steady_clock::time_point arrived = std::chrono::steady_clock::now();
};

}  // namespace

class WorkerServer::Impl final : public v1::Worker::Service {
 public:
  Impl(WorkerSettings settings, FaultPlan fault) : settings_(std::move(settings)), fault_(fault) {}

  grpc::Status Work(grpc::ServerContext* ctx, Stream* stream) override {
    const std::string peer = ctx->peer();
    // A4: at most max_streams at once (each holds this gRPC thread while it lasts), refused
    // before anything is allocated for the stream.
    const unsigned cap = settings_.max_streams;
    if (active_.fetch_add(1) >= cap) {
      active_--;
      refused_++;
      const std::string why = "this worker serves at most " + std::to_string(cap) +
                              " streams at once (--max-streams); try again later";
      if (first_from(peer, PeerLog::kBusy)) spdlog::warn("worker: refused a stream from {}: {}", peer, why);
      return grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED, why);
    }
    ActiveStream slot(active_);
    v1::Request req;
    OpenDeadline deadline{ctx, std::chrono::steady_clock::now() + settings_.open_timeout};
    watch(deadline);
    const bool got = stream->Read(&req);
    if (!unwatch(deadline)) {  // counted by cancel_late_opens()
      if (first_from(peer, PeerLog::kTimeout)) {
        spdlog::warn("worker: cancelled a stream from {}: no Open within {} ms (--open-timeout; logged once per peer)",
                     peer, settings_.open_timeout.count());
      }
      return grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, "no Open within " +
                                                                   std::to_string(settings_.open_timeout.count()) + " ms");
    }
    if (!got) return grpc::Status::OK;
    if (!req.has_open()) {
      refused_++;
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "the first message of a stream must be an Open");
    }
    // The token (and protocol major) before the stream's session, buffers or items exist.
    if (std::string why = open_precheck(req.open(), settings_.token); !why.empty()) {
      refused_++;
      v1::Reply reply;
      reply.mutable_open()->set_protocol_major(kWorkerMajor);
      reply.mutable_open()->set_protocol_minor(kWorkerMinor);
      reply.mutable_open()->set_error(why);
      stream->Write(reply);
      if (first_from(peer, PeerLog::kToken)) {
        spdlog::warn("worker: refused a stream from {}: {} (logged once per peer; counted in refused)", peer, why);
      }
      return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, why);
    }
    sessions_++;
    auto st = std::make_shared<StreamState>(settings_, stream, next_serial_++);
    v1::Reply reply;
    *reply.mutable_open() = st->session.open(req.open());
    const bool accepted = reply.open().accepted();
    stream->Write(reply);
    if (!accepted) {
      refused_++;
      spdlog::warn("worker: refused a stream from {}: {}", peer, reply.open().error());
      return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, reply.open().error());
    }
    spdlog::info("worker: stream from {} for job {}", peer, st->session.job());
    streams_++;
    grpc::Status end = grpc::Status::OK;
    while (stream->Read(&req)) {
      const bool one = req.has_item();
      if (!one && !req.has_items()) {
        end = grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "only items may follow a stream's Open");
        break;
      }
      const int n = one ? 1 : req.items().items_size();
      if (static_cast<std::size_t>(n) > kMaxBatch) {
        end = grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                           "an ItemBatch of " + std::to_string(n) + " items (at most " + std::to_string(kMaxBatch) + ")");
        break;
      }
      {
        base::MutexLock lock(st->mu);
        if (st->pending + static_cast<std::size_t>(n) > kMaxInFlight) {
          end = grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                             "more than " + std::to_string(kMaxInFlight) + " items in flight on one stream");
          break;
        }
        st->pending += static_cast<std::size_t>(n);
      }
      if (one) {
        submit(Task{st, req.item()});
      } else {
        for (const v1::Item& item : req.items().items()) submit(Task{st, item});
      }
    }
    {
      // The stream object dies when this returns: no decode thread may write to it after.
      base::MutexLock lock(st->mu);
      st->broken = true;
      while (st->pending > 0) st->drained.wait(lock);
    }
    streams_--;
    if (!end.ok()) {
      errors_++;
      spdlog::warn("worker: ended the stream from {}: {}", peer, end.error_message());
    } else {
      spdlog::info("worker: stream from {} for job {} ended", peer, st->session.job());
    }
    return end;
  }

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
      base::MutexLock lock(watch_mu_);
      watch_stop_ = true;
    }
    watch_cv_.notify_all();
    if (open_watchdog_.joinable()) open_watchdog_.join();
  }

  WorkerStats stats() const {
    WorkerStats s;
    s.items = items_.load();
    s.errors = errors_.load();
    s.refused = refused_.load();
    s.bytes_sent = bytes_sent_.load();
    s.busy_ns = busy_ns_.load();
    s.streams = streams_.load();
    s.open_timeouts = open_timeouts_.load();
    s.sessions = sessions_.load();
    return s;
  }

 private:
  // The stream's Open deadline, on Work's stack while it waits for the Open.
  struct OpenDeadline {
    grpc::ServerContext* ctx;
    std::chrono::steady_clock::time_point until;
  };
  // Holds one of the max_streams places until Work returns.
  struct ActiveStream {
    explicit ActiveStream(std::atomic<unsigned>& n) : n_(n) {}
    ~ActiveStream() { n_--; }
    ActiveStream(const ActiveStream&) = delete;
    ActiveStream& operator=(const ActiveStream&) = delete;
    std::atomic<unsigned>& n_;
  };

  void watch(OpenDeadline& d) {
    {
      base::MutexLock lock(watch_mu_);
      waiting_open_.insert(&d);
    }
    watch_cv_.notify_all();
  }
  // false: the deadline passed and the stream was cancelled.
  bool unwatch(OpenDeadline& d) {
    base::MutexLock lock(watch_mu_);
    return waiting_open_.erase(&d) == 1;
  }

  // One thread for every stream's Open deadline: cancels (TryCancel) those past it, so their
  // Read returns and their gRPC thread is free again.
  void cancel_late_opens() {
    base::MutexLock lock(watch_mu_);
    while (!watch_stop_) {
      const auto now = std::chrono::steady_clock::now();
      auto next = now + std::chrono::seconds(1);
      for (auto it = waiting_open_.begin(); it != waiting_open_.end();) {
        if ((*it)->until <= now) {
          // Counted before the cancel, so a peer that sees its stream end sees the count too.
          open_timeouts_++;
          refused_++;
          (*it)->ctx->TryCancel();
          it = waiting_open_.erase(it);
        } else {
          next = std::min(next, (*it)->until);
          ++it;
        }
      }
      watch_cv_.wait_for(lock, next - now);
    }
  }

  // Whether this is the first time `peer`'s host ("ipv4:10.0.0.7:51234" less its port) is
  // named for `why` (a log line once per peer; forgets all past 4096 hosts). The set is picked
  // under the lock, so the thread-safety analysis sees every access guarded.
  enum class PeerLog { kBusy, kTimeout, kToken };
  bool first_from(const std::string& peer, PeerLog why) {
    const std::size_t colon = peer.rfind(':');
    std::string host = colon == std::string::npos ? peer : peer.substr(0, colon);
    base::MutexLock lock(peers_mu_);
    std::set<std::string>& seen =
        why == PeerLog::kBusy ? busy_peers_ : why == PeerLog::kTimeout ? timeout_peers_ : token_peers_;
    if (seen.size() >= 4096) seen.clear();
    return seen.insert(std::move(host)).second;
  }

  void submit(Task t) {
    {
      base::MutexLock lock(mu_);
      tasks_.push_back(std::move(t));
    }
    cv_.notify_one();
  }

  void run() {
    std::map<std::uint64_t, std::unique_ptr<image::SampleProcessor>> processors;  // by stream serial
    std::vector<std::uint8_t> bytes;
    for (;;) {
      Task t;
      {
        base::MutexLock lock(mu_);
        while (!stop_ && tasks_.empty()) cv_.wait(lock);
        if (tasks_.empty()) return;  // stopping, nothing left
        t = std::move(tasks_.front());
        tasks_.pop_front();
      }
      StreamState& st = *t.stream;
      if (processors.size() > 64) processors.clear();  // streams come and go; rebuilt on demand
      std::unique_ptr<image::SampleProcessor>& p = processors[st.serial];
      if (!p) p = std::make_unique<image::SampleProcessor>(st.session.pipeline());
      v1::Result r;
      r.set_queued_ns(static_cast<std::uint64_t>(
          std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t.arrived).count()));
      st.session.process(t.item, *p, bytes, r);
      items_++;
      busy_ns_ += r.busy_ns();
      if (r.error() != 0) errors_++;
      bytes_sent_ += r.pixels().size();
      if (fault_.kind != Fault::kNone && ++spoiled_ % fault_.every == 0) spoil(r);
      deliver(st, std::move(r));
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
      case Fault::kCorruptFrame:
        if (!px.empty()) px[px.size() / 2] = static_cast<char>(px[px.size() / 2] ^ 0x5a);
        if (!px.empty() && !r.compressed()) px.push_back('x');  // uncompressed: a wrong size instead
        break;
      case Fault::kNone:
        break;
    }
  }

  // Hands a result to its stream. Results that finish while another thread writes the
  // stream's previous answer wait in its outbox and leave together, as one ResultBatch (one
  // message and one wake-up on the GPU node for many samples); the writing thread drains the
  // outbox before it goes back to decoding. One writer at a time (gRPC allows no more).
  void deliver(StreamState& st, v1::Result&& r) {
    base::MutexLock lock(st.mu);
    st.outbox.push_back(std::move(r));
    if (st.writing) return;  // the writer takes it with the next batch
    st.writing = true;
    while (!st.outbox.empty()) {
      v1::Reply reply;
      std::size_t n = 0, bytes = 0;
      while (!st.outbox.empty() && n < kMaxBatch && bytes < kBatchBytes) {
        bytes += st.outbox.front().pixels().size();
        if (st.outbox.size() == 1 && n == 0) {
          *reply.mutable_result() = std::move(st.outbox.front());
        } else {
          *reply.mutable_results()->add_results() = std::move(st.outbox.front());
        }
        st.outbox.pop_front();
        ++n;
      }
      const bool broken = st.broken;
      lock.unlock();
      const bool ok = !broken && st.stream->Write(reply);
      lock.lock();
      if (!ok) st.broken = true;
      st.pending -= n;
      if (st.pending == 0) st.drained.notify_all();
    }
    st.writing = false;
  }

  const WorkerSettings settings_;
  const FaultPlan fault_;
  std::atomic<std::uint64_t> spoiled_{0};
  std::atomic<std::uint64_t> next_serial_{1};
  std::atomic<std::uint64_t> items_{0}, errors_{0}, refused_{0}, bytes_sent_{0}, busy_ns_{0};
  std::atomic<std::uint32_t> streams_{0};
  std::atomic<std::uint64_t> open_timeouts_{0}, sessions_{0};
  std::atomic<unsigned> active_{0};  // streams in Work(), opened or not (at most max_streams)
  base::Mutex watch_mu_;
  base::CondVar watch_cv_;
  std::set<OpenDeadline*> waiting_open_ STOKER_GUARDED_BY(watch_mu_);
  bool watch_stop_ STOKER_GUARDED_BY(watch_mu_) = false;
  std::thread open_watchdog_;
  base::Mutex peers_mu_;
  std::set<std::string> busy_peers_ STOKER_GUARDED_BY(peers_mu_), timeout_peers_ STOKER_GUARDED_BY(peers_mu_),
      token_peers_ STOKER_GUARDED_BY(peers_mu_);
  base::Mutex mu_;
  base::CondVar cv_;
  std::deque<Task> tasks_ STOKER_GUARDED_BY(mu_);
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
  impl_->start_threads(threads);
}

WorkerServer::~WorkerServer() { shutdown(); }

int WorkerServer::port() const { return impl_->port_; }

WorkerStats WorkerServer::stats() const { return impl_->stats(); }

void WorkerServer::shutdown() {
  if (!impl_ || !impl_->server_) return;
  impl_->server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  impl_->stop_threads();
  impl_->server_.reset();
}

}  // namespace stoker::remote
