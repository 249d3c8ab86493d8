#include "remote/dispatcher.hpp"


#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <deque>
#include <map>
#include <random>
#include <set>

#include <sys/socket.h>
#include <unistd.h>

#include <grpcpp/grpcpp.h>

#include "log/log.hpp"
#include "base/thread_name.hpp"
#include "image/decoder_versions.hpp"
#include "image/sample_processor.hpp"
#include "job/job.hpp"
#include "sched/work_queue.hpp"
#include "remote/endpoints.hpp"
#include "remote/open_compression.hpp"
#include "remote/protocol.hpp"
#include "remote/receive_memory.hpp"
#include "remote/reply_view.hpp"
#include "remote/results_channel.hpp"
#include "remote/split_receiver.hpp"
#include "remote/worker_server.hpp"  // read_secret_file
#include "stoker/remote/worker.grpc.pb.h"

namespace stoker::remote {

using Clock = std::chrono::steady_clock;

namespace {

constexpr auto kResolveEvery = std::chrono::seconds(15);
constexpr auto kConnectTimeout = std::chrono::seconds(3);
constexpr double kBackoffMin = 0.2, kBackoffMax = 5;
constexpr std::uint32_t kWindowMax = 512;
// The window also holds this many seconds of the worker's own output, so that the sender, which
// refills at half the window, sends an ItemBatch at most every ~30 ms of it rather than every 8
// items: each send costs this node a syscall and (on loopback) the worker's receive and wake-up
// (issue #36: 11% of the node's CPU per remote sample at 8 items a message; 30 ms -> 60 ms took
// the sending thread from 4.3 to 3.2 us a sample, docs/PERFORMANCE.md). Scaled by the measured
// rate, so a slow worker holds no more than 60 ms of its own output beyond the floor and the
// link; a worker lost re-issues that much.
constexpr double kRefillSpanS = 0.06;
// Hedging (issue #34, A7): an item outstanding longer than kHedgeFactor times the link's mean
// answer time (stats_.rtt_s, from answers that were used), and at least kHedgeFloor, is made
// here instead: an answer before that wins; after it, this node's make does and the worker's
// answer is discarded. A worker that is always late is therefore always hedged (its late
// answers never raise the mean it is measured by).
constexpr double kHedgeFactor = 4, kHedgeFloor = 0.5;

// A 64-bit mix (splitmix64's finaliser): the per-item draw of remote.verify.
std::uint64_t mix64(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// The worker service's one method, as gRPC names it on the wire.
const std::string& work_method() {
  static const std::string name = std::string("/") + v1::Worker::service_full_name() + "/Work";
  return name;
}

}  // namespace

// One endpoint: a thread that connects, sends and watches deadlines, and while a stream lives
// a second one that reads its answers.
class Dispatcher::Link : private SlotClaims {
 public:
  Link(Dispatcher& d, std::string address, std::string endpoint, std::string target)
      : d_(d), address_(std::move(address)), endpoint_(std::move(endpoint)), target_(std::move(target)) {
    thread_ = std::thread([this] {
      base::name_this_thread("remote-link");  // connects, then sends items (send_loop)
      run();
    });
  }
  ~Link() { stop(); }

  const std::string& endpoint() const { return endpoint_; }

  void stop() {
    {
      base::MutexLock lock(mu_);
      if (stop_) return;
      stop_ = true;
      if (ctx_) ctx_->TryCancel();
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }

  WorkerLinkStatus status() const {
    base::MutexLock lock(mu_);
    WorkerLinkStatus s = stats_;
    s.address = address_;
    s.endpoint = endpoint_;
    s.in_flight = static_cast<std::uint32_t>(outstanding_.size());  // hedged items are not held
    s.window = window_;
    return s;
  }

 private:
  struct Outstanding {
    sched::WorkItem item;
    job::Job::RemoteSample sample;
    Clock::time_point sent;
    // Its pixels are being received straight into its slot (a split frame): never hedged then,
    // since the kernel may be writing the slot (SlotClaims: claim, release).
    bool receiving = false;
  };

  void run() {
    double backoff = kBackoffMin;
    for (;;) {
      {
        base::MutexLock lock(mu_);
        if (stop_) return;
      }
      const bool served = serve_stream();
      bool lied = false;
      {
        base::MutexLock lock(mu_);
        lied = misbehaved_;
        misbehaved_ = false;
      }
      // A worker dropped for garbage or a mismatch is not taken back at once: its backoff grows.
      if (served && !lied) backoff = kBackoffMin;
      base::MutexLock lock(mu_);
      if (stop_) return;
      cv_.wait_for(lock, std::chrono::duration<double>(backoff));
      backoff = std::min(kBackoffMax, backoff * 2);
    }
  }

  std::shared_ptr<grpc::ChannelCredentials> credentials() {
    const config::RemoteConfig& c = d_.cfg_;
    if (c.tls_ca.empty()) return grpc::InsecureChannelCredentials();
    grpc::SslCredentialsOptions o;
    auto ca = read_secret_file(c.tls_ca.string(), "remote.tls.ca");
    if (ca) o.pem_root_certs = *ca;
    if (!c.tls_cert.empty()) {
      auto cert = read_secret_file(c.tls_cert.string(), "remote.tls.cert");
      auto key = read_secret_file(c.tls_key.string(), "remote.tls.key");
      if (cert && key) {
        o.pem_cert_chain = *cert;
        o.pem_private_key = *key;
      }
    }
    return grpc::SslCredentials(o);
  }

  void fail(const std::string& why) {
    base::MutexLock lock(mu_);
    stats_.errors++;
    if (stats_.last_error != why) stoker::log::warn("job {}: remote worker {}: {}", d_.job_.name(), endpoint_, why);
    stats_.last_error = why;
  }

  // One stream, from connect to its end. true: it was accepted (the backoff starts over).
  bool serve_stream() {
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 10000);
    args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 5000);
    args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
    args.SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);  // one connection per link
    args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 200);
    args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 5000);
    args.SetMaxReceiveMessageSize(static_cast<int>(max_reply_bytes(d_.job_.pipeline().sample_bytes())));
    args.SetMaxSendMessageSize(static_cast<int>(kMaxRequestBytes));
    const std::string host = split_address(address_).first;
    if (!d_.cfg_.tls_ca.empty()) args.SetSslTargetNameOverride(host);
    auto channel = grpc::CreateCustomChannel(target_, credentials(), args);
    // In short steps, so stop() (a reload, the daemon's end) never waits for a connect.
    const auto give_up = Clock::now() + kConnectTimeout;
    bool up = false;
    while (!up && Clock::now() < give_up) {
      up = channel->WaitForConnected(std::chrono::system_clock::now() + std::chrono::milliseconds(200));
      base::MutexLock lock(mu_);
      if (stop_) return false;
    }
    if (!up) {
      fail("cannot connect (retrying; the local pool serves meanwhile)");
      return false;
    }
    auto ctx = std::make_shared<grpc::ClientContext>();
    {
      base::MutexLock lock(mu_);
      if (stop_) return false;
      ctx_ = ctx;
    }
    // The stream reads each Reply as a ReplyView (reply_view.hpp: parsed in gRPC's slices, the
    // pixels copied once, into the slot) rather than protobuf's v1::Reply, which the generated
    // stub would fix; the same method and wire format, typed by gRPC's own stream factory.
    const grpc::internal::RpcMethod method(work_method().c_str(), grpc::internal::RpcMethod::BIDI_STREAMING, channel);
    std::unique_ptr<grpc::ClientReaderWriter<v1::Request, ReplyView>> stream(
        grpc::internal::ClientReaderWriterFactory<v1::Request, ReplyView>::Create(channel.get(), method, ctx.get()));
    const bool accepted = open(*stream, *ctx);
    if (accepted) {
      d_.link_connected(true);
      std::thread reader([&] {
        base::name_this_thread("remote-stream");
        read_loop(*stream);
      });
      std::thread results;
      if (results_fd_ >= 0) {
        results = std::thread([&] {
          base::name_this_thread("remote-results");
          results_loop(*ctx);
        });
      }
      send_loop(*stream, *ctx);
      ctx->TryCancel();
      reader.join();
      if (results.joinable()) {
        ::shutdown(results_fd_, SHUT_RDWR);  // its reader returns
        results.join();
      }
      d_.link_connected(false);
    } else {
      ctx->TryCancel();
    }
    if (results_fd_ >= 0) {
      ::close(results_fd_);
      results_fd_ = -1;
    }
    stream->Finish();  // the status; why the stream ended was recorded already
    reissue_all();
    base::MutexLock lock(mu_);
    ctx_.reset();
    stats_.connected = false;
    stats_.results_tcp = false;
    stats_.items_tcp = false;
    items_tcp_ = false;
    return accepted;
  }

  // Sends the Open and reads the answer (the stream is cancelled if none comes in 10 s).
  bool open(grpc::ClientReaderWriter<v1::Request, ReplyView>& stream, grpc::ClientContext& ctx) {
    const job::Job& job = d_.job_;
    const config::RemoteConfig& c = d_.cfg_;
    v1::Request req;
    v1::Open* o = req.mutable_open();
    o->set_protocol_major(kWorkerMajor);
    o->set_protocol_minor(kWorkerMinor);
    o->set_token(c.token);
    o->set_job(job.name());
    o->set_job_yaml(c.worker_yaml);
    o->set_base_dir(c.base_dir.string());
    o->set_origin(c.origin);
    o->set_pixel_seed(job.config().pixel_seed());
    o->set_sample_bytes(job.pipeline().sample_bytes());
    set_compression(*o, c.compression);
    // A plaintext link asks for its results on a TCP connection of their own (results_channel.hpp):
    // a bare receive, without gRPC's framing and hand-offs, for most of what a sample costs here.
    std::string nonce;
    if (c.tls_ca.empty() && c.results_tcp) {
      try {
        nonce = make_results_nonce();
      } catch (const std::exception& e) {
        stoker::log::warn("job {}: remote worker {}: {}; its results stay on the stream", job.name(), endpoint_,
                          e.what());
      }
      o->set_results_nonce(nonce);
    }
    if (!stream.Write(req)) {
      fail("the stream closed before the Open was sent");
      return false;
    }
    std::atomic<bool> answered{false};
    std::thread watchdog([&] {
      base::MutexLock lock(mu_);
      const auto until = Clock::now() + std::chrono::seconds(10);
      while (!answered.load() && !stop_ && Clock::now() < until) cv_.wait_for(lock, std::chrono::milliseconds(50));
      if (!answered.load()) ctx.TryCancel();
    });
    ReplyView reply;
    const bool got = stream.Read(&reply);
    answered = true;
    cv_.notify_all();
    watchdog.join();
    if (!got || reply.kind() != ReplyView::Kind::kOpen) {
      fail(!got                                             ? "no answer to the Open (closed, or 10 s passed)"
           : reply.kind() == ReplyView::Kind::kMalformed ? "the worker's first answer is " + reply.why()
                                                           : std::string("the worker's first answer is not an OpenReply"));
      return false;
    }
    const v1::OpenReply& r = reply.open();
    if (std::string why = version_mismatch(r.protocol_major(), r.protocol_minor(), "the worker"); !why.empty()) {
      fail(why);
      return false;
    }
    if (!r.accepted()) {
      fail("refused the job: " + r.error().substr(0, 2048));
      return false;
    }
    // Pixels are the same only for the same decoder libraries: a worker with other versions,
    // or one that names none (older than protocol 1.2: unknown), is not used (issue #34).
    if (r.decoder_versions() != image::decoder_versions()) {
      const std::string theirs = r.decoder_versions().empty() ? "unknown (not reported; it speaks protocol 1." +
                                                                    std::to_string(r.protocol_minor()) + ", 1.2 reports them)"
                                                              : "'" + r.decoder_versions().substr(0, 512) + "'";
      fail("not used: its decoder versions differ, its pixels could too (the local pool serves); worker: " + theirs +
           "; this node: '" + image::decoder_versions() + "'");
      return false;
    }
    bool results_tcp = false;
    if (!nonce.empty() && r.results_port() != 0) {
      std::string why;
      results_fd_ = connect_results(split_address(endpoint_).first, r.results_port(), nonce, why);
      results_tcp = results_fd_ >= 0;
      if (!results_tcp) {
        stoker::log::warn("job {}: remote worker {}: no results connection ({}); its results stay on the stream",
                          job.name(), endpoint_, why);
      }
    }
    // A 1.4 worker reads this node's items from the results connection too: a write there costs
    // a bare send, where the stream's costs gRPC's framing and hand-offs (issue #36).
    items_tcp_ = results_tcp && r.protocol_minor() >= 4;
    base::MutexLock lock(mu_);
    stats_.results_tcp = results_tcp;
    stats_.items_tcp = items_tcp_;
    stats_.threads = std::clamp<std::uint32_t>(r.threads(), 1, 4096);
    worker_minor_ = r.protocol_minor();
    window_ = std::min<std::uint32_t>(kWindowMax, floor_window());
    stats_.connected = true;
    stats_.last_error.clear();
    broken_ = false;
    rate_mark_ = Clock::now();
    rate_samples_ = stats_.samples;
    stoker::log::info("job {}: remote worker {} connected ({} threads)", job.name(), endpoint_, stats_.threads);
    return true;
  }

  void send_loop(grpc::ClientReaderWriter<v1::Request, ReplyView>& stream, grpc::ClientContext& ctx) {
    job::Job& job = d_.job_;
    const double deadline = d_.cfg_.deadline_s;
    for (;;) {
      bool stalled = false;
      std::size_t room = 0;
      std::vector<sched::WorkItem> hedge;
      {
        base::MutexLock lock(mu_);
        if (stop_ || broken_) return;
        const auto now = Clock::now();
        // Ids ascend in the order sent, so the first entry is the oldest (of each table).
        auto oldest = Clock::time_point::max();
        if (!outstanding_.empty()) oldest = outstanding_.begin()->second.sent;
        if (!hedged_.empty()) oldest = std::min(oldest, hedged_.begin()->second);
        if (oldest != Clock::time_point::max() && std::chrono::duration<double>(now - oldest).count() > deadline) {
          stalled = true;
          broken_ = true;
        } else {
          adapt_window(now);
          hedge = take_overdue(now);
          if (hedge.empty()) {
            // Refill only once half the window has come back: one message and one wake-up for
            // many items, rather than one per answer. A link with hedged items still due gets
            // none until they are answered (or its deadline passes): a slow worker holds at most
            // one window at a time.
            if (outstanding_.size() > window_ / 2 || !hedged_.empty()) {
              wait_until_due(lock, now, deadline);
              continue;
            }
            room = std::min<std::size_t>(window_ - outstanding_.size(), kMaxBatch);
          }
        }
      }
      if (!hedge.empty()) {
        // Made here, as a local worker makes an item (the job's own read rules and on_error):
        // each left the link's table under its mutex, so the worker's answer, if it comes, is
        // discarded (the item ends once).
        if (!hedge_processor_) hedge_processor_ = std::make_unique<image::SampleProcessor>(job.pipeline());
        for (const sched::WorkItem& it : hedge) job.run(it, *hedge_processor_, hedge_buffer_);
        continue;
      }
      if (stalled) {
        fail("an item unanswered for " + std::to_string(static_cast<int>(deadline)) +
             " s (stalled or unreachable): its items are re-issued");
        ctx.TryCancel();
        return;
      }
      v1::Request req;
      std::vector<std::pair<std::uint64_t, Outstanding>> sent;
      sched::WorkItem item{};
      const auto asked = Clock::now();
      // The first item may be waited for; the rest only taken if queued now.
      while (sent.size() < room &&
             d_.queue_.pop_remote(job.index(), item, std::chrono::milliseconds(sent.empty() ? 50 : 0))) {
        std::optional<job::Job::RemoteSample> sample = job.begin_remote(item);
        if (!sample) continue;  // quarantined, cached or job stopped: ended by the job
        const std::uint64_t id = next_id_++;
        v1::Item* it = req.mutable_items()->add_items();
        it->set_id(id);
        it->set_path(sample->path);
        it->set_offset(sample->offset);
        it->set_size(sample->size);
        it->set_member(sample->member);
        it->set_epoch(sample->epoch);
        it->set_draw(sample->draw);
        sent.emplace_back(id, Outstanding{item, std::move(*sample), Clock::now()});
      }
      if (sent.empty()) {
        // pop_remote answers at once when the queue stopped or the lane closed (the daemon or
        // the job is ending): wait here instead of spinning until this link is stopped.
        if (Clock::now() - asked < std::chrono::milliseconds(10)) {
          base::MutexLock lock(mu_);
          if (!stop_) cv_.wait_for(lock, std::chrono::milliseconds(50));
        }
        continue;
      }
      {
        base::MutexLock lock(mu_);
        for (auto& [id, o] : sent) outstanding_.emplace(id, std::move(o));
      }
      if (!(items_tcp_ ? send_items(req) : stream.Write(req))) {
        bool first = false;
        {
          base::MutexLock lock(mu_);
          first = !broken_ && !stop_;
          broken_ = true;
        }
        if (first) fail("the stream broke (worker gone?): its items are re-issued");
        return;
      }
    }
  }

  // How long an item may be outstanding before it is made here instead (kHedgeFactor).
  double hedge_after() const STOKER_REQUIRES(mu_) { return std::max(kHedgeFloor, kHedgeFactor * stats_.rtt_s); }

  // The sender sleeps until the oldest item's hedge time or the link's deadline, whichever
  // comes first: everything else that lets it act notifies cv_ (an answer bringing the table
  // to half the window, a hedged item's answer, a released receive, stop, a reader's end). A
  // fixed 20 ms poll woke it ~50 times a second for nothing: ~40% of its wake-ups (issue #36).
  // Never less than kMinWait (the oldest item may be being received into its slot, which is
  // not hedged, so its time can pass with nothing to do), nor more than kMaxWait (the window
  // adapts only when the sender runs).
  void wait_until_due(base::MutexLock& lock, Clock::time_point now, double deadline) STOKER_REQUIRES(mu_) {
    constexpr Clock::duration kMinWait = std::chrono::milliseconds(20), kMaxWait = std::chrono::milliseconds(250);
    const double after = std::min(deadline, hedge_after());
    const auto plus = [](Clock::time_point t, double s) {
      return t + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
    };
    Clock::time_point due = now + kMaxWait;
    if (!outstanding_.empty()) due = std::min(due, plus(outstanding_.begin()->second.sent, after));
    if (!hedged_.empty()) due = std::min(due, plus(hedged_.begin()->second, deadline));
    cv_.wait_for(lock, std::clamp(due - now, kMinWait, kMaxWait));
  }

  // An ItemBatch on the results connection (protocol 1.4). A worker that takes none of it for
  // remote.deadline_s is as one that answers nothing: the link ends and its items are re-issued.
  bool send_items(const v1::Request& req) {
    items_frame_.assign(4, '\0');
    req.AppendToString(&items_frame_);
    const auto since = Clock::now();
    const double deadline = d_.cfg_.deadline_s;
    return write_items_frame(results_fd_, items_frame_, [&] {
      base::MutexLock lock(mu_);
      return !stop_ && !broken_ && std::chrono::duration<double>(Clock::now() - since).count() < deadline;
    });
  }

  // The items outstanding past the hedge time, moved from outstanding_ to hedged_ (whose
  // entries wait for the worker's answer, to discard it, or for the deadline).
  std::vector<sched::WorkItem> take_overdue(Clock::time_point now) STOKER_REQUIRES(mu_) {
    std::vector<sched::WorkItem> out;
    const double after = hedge_after();
    if (after >= d_.cfg_.deadline_s) return out;  // the deadline comes first: the stream is dropped
    for (auto at = outstanding_.begin();
         at != outstanding_.end() && std::chrono::duration<double>(now - at->second.sent).count() > after;) {
      if (at->second.receiving) {
        ++at;
        continue;
      }
      out.push_back(at->second.item);
      hedged_.emplace(at->first, at->second.sent);
      at = outstanding_.erase(at);
    }
    if (!out.empty()) {
      stats_.hedged += out.size();
      if (stats_.hedged == out.size()) {
        stoker::log::warn("job {}: remote worker {}: items unanswered after {:.2f} s are made here (hedged)",
                          d_.job_.name(), endpoint_, after);
      }
    }
    return out;
  }

  // Whether this result is made again here and compared (remote.verify): a draw per sample and
  // epoch from a key the worker never sees, so it cannot tell which of its answers are checked.
  bool chosen_for_verify(const job::Job::RemoteSample& s) const {
    const double f = d_.cfg_.verify;
    if (f <= 0) return false;
    if (f >= 1) return true;
    const std::uint64_t h = mix64(d_.verify_key_ ^ mix64(s.epoch * 0x100000001b3ULL + s.id));
    return static_cast<double>(h >> 11) * 0x1.0p-53 < f;
  }

  // Window: two items per worker thread (one decoding, one queued behind it) plus what the
  // link holds while answers travel: the rate times the link's own round trip (the least of
  // the last second's round trips less each item's wait and work at the worker, so items
  // queued there do not count: that would feed back into an ever larger window).
  // Two items per worker thread, and at least 16: the sender refills at half the window, so a
  // worker with few threads still gets its items 8 or more to a message (each message is a
  // wake-up of this node's threads, which is most of what a remote sample costs it).
  std::uint32_t floor_window() const STOKER_REQUIRES(mu_) { return std::max<std::uint32_t>(16, 2 * stats_.threads + 2); }

  void adapt_window(Clock::time_point now) STOKER_REQUIRES(mu_) {
    const double dt = std::chrono::duration<double>(now - rate_mark_).count();
    if (dt < 1.0) return;
    stats_.samples_per_s = static_cast<double>(stats_.samples - rate_samples_) / dt;
    rate_mark_ = now;
    rate_samples_ = stats_.samples;
    const double link_s = link_rtt_min_ < 1e9 ? link_rtt_min_ : 0;
    link_rtt_min_ = 1e18;
    const double want = floor_window() + stats_.samples_per_s * (link_s * 2 + kRefillSpanS);
    window_ = static_cast<std::uint32_t>(std::clamp<double>(want, floor_window(), kWindowMax));
  }

  // One Reply after the OpenReply, from the stream or the results connection: its results taken
  // (one reader at a time: the take state is the readers'). Empty, or why the worker is dropped.
  // `placed`: for a split frame, which results' pixels were received into their slots.
  std::string handle_reply(const ReplyView& reply, std::vector<char>* placed = nullptr) {
    std::string why;
    const ReplyView::Kind kind = reply.kind();
    if (kind == ReplyView::Kind::kResult || kind == ReplyView::Kind::kResults) {
      {
        base::MutexLock take_lock(take_mu_);
        const std::vector<ResultView>& results = reply.results();  // at most kMaxBatch (the parser's bound)
        for (std::size_t i = 0; i < results.size(); ++i) {
          if (base::Status s = take(results[i], reply, placed != nullptr && (*placed)[i] != 0); !s) {
            why = s.message();
            // Results after it that were received into their slots are still owed: re-issued.
            if (placed != nullptr) release(results, *placed, i + 1);
            break;
          }
        }
      }
      // The sender refills at half the window: woken once for the whole message (a wake-up
      // per result, once below half, cost the node a context switch for each).
      bool refill = false;
      {
        base::MutexLock lock(mu_);
        refill = outstanding_.size() <= window_ / 2;
      }
      if (refill) cv_.notify_all();
    } else if (kind == ReplyView::Kind::kMalformed) {
      why = "sent " + reply.why();
      base::MutexLock lock(mu_);
      misbehaved_ = true;
    } else {
      why = "answered something other than results";
    }
    return why;
  }

  // A reader's end (the stream's or the results connection's): the link is broken, the sender
  // stops, the first to notice (or one with a reason) says why.
  void reader_ended(const std::string& why, const char* ended) {
    bool first = false;
    {
      base::MutexLock lock(mu_);
      first = !broken_ && !stop_;
      broken_ = true;
    }
    cv_.notify_all();
    if (first || !why.empty()) fail(why.empty() ? std::string(ended) : why);
  }

  void read_loop(grpc::ClientReaderWriter<v1::Request, ReplyView>& stream) {
    // One ReplyView for the stream's life: its vectors keep their capacity between messages.
    ReplyView reply;
    std::string why;
    while (why.empty() && stream.Read(&reply)) why = handle_reply(reply);
    reader_ended(why, "the stream ended (worker gone?): its items are re-issued");
  }

  // The results connection's reader (results_channel.hpp): split frames from a 1.5 worker
  // (split_receiver.hpp), else each frame a whole Reply parsed in place by the stream's parser.
  void results_loop(grpc::ClientContext& ctx) {
    const std::size_t max = max_reply_bytes(d_.job_.pipeline().sample_bytes());
    bool split = false;
    {
      base::MutexLock lock(mu_);
      split = worker_minor_ >= 5;
    }
    std::string why = split ? read_split_frames(max) : read_whole_frames(max);
    {
      base::MutexLock lock(mu_);
      if (stop_ || broken_) why.clear();  // shut down by this node, after the link ended otherwise
    }
    reader_ended(why, "the results connection ended (worker gone?): its items are re-issued");
    ctx.TryCancel();  // the stream ends with it
  }

  // A frame not read: why (empty when the worker closed between frames). A length out of
  // bounds is garbage, and the worker is dropped for it; a connection cut inside a frame is not.
  std::string unread_frame(FrameRead got, const std::string& read_why) {
    if (got == FrameRead::kTooLong) {
      base::MutexLock lock(mu_);
      misbehaved_ = true;
    }
    return got == FrameRead::kClosed ? std::string() : "results connection: " + read_why;
  }

  std::string read_whole_frames(std::size_t max) {
    std::vector<std::uint8_t> frame;  // reused: its pages stay mapped
    ReplyView reply;
    std::string why;
    while (why.empty()) {
      std::string read_why;
      if (const FrameRead got = read_results_frame(results_fd_, frame, max, read_why); got != FrameRead::kFrame) {
        return unread_frame(got, read_why);
      }
      grpc::Slice slice(frame.data(), frame.size(), grpc::Slice::STATIC_SLICE);  // no copy
      grpc::ByteBuffer bytes(&slice, 1);
      reply.parse(bytes);
      why = handle_reply(reply);
    }
    return why;
  }

  std::string read_split_frames(std::size_t max) {
    SplitReceiver frames(results_fd_, d_.job_.pipeline().sample_bytes(), max);
    std::string why;
    while (why.empty()) {
      std::string read_why;
      if (const FrameRead got = frames.next(*this, read_why); got != FrameRead::kFrame) {
        return unread_frame(got, read_why);
      }
      why = handle_reply(frames.reply(), &frames.claimed());
    }
    return why;
  }

  // SlotClaims (split_receiver.hpp), for the results connection's reader: an item is claimed
  // when owed, not claimed already (a frame naming it twice), echoing its epoch and draw, and
  // not a remote.verify pick (its pixels are compared where they lie in the receiver's buffer,
  // and only then written to the slot: take()).
  void claim(std::span<const ResultView> results, std::span<char> claimed, std::span<std::uint8_t*> slots) override {
    base::MutexLock lock(mu_);
    for (std::size_t i = 0; i < results.size(); ++i) {
      if (claimed[i] == 0) continue;
      const ResultView& r = results[i];
      const auto at = outstanding_.find(r.id);
      claimed[i] = at != outstanding_.end() && !at->second.receiving && r.epoch == at->second.sample.epoch &&
                   r.draw == at->second.sample.draw && !chosen_for_verify(at->second.sample);
      if (claimed[i] == 0) continue;
      at->second.receiving = true;
      slots[i] = d_.job_.sample_out(at->second.item);
    }
  }

  // A worker that stalls inside a frame delays the batch no longer than one that is late: once
  // a claimed item there is past its hedge time, all of them go back to hedging.
  bool stalled_too_long(std::span<const ResultView> results, std::span<const char> claimed, std::size_t from) override {
    const auto now = Clock::now();
    bool overdue = false;
    std::size_t held = 0;
    {
      base::MutexLock lock(mu_);
      const double after = hedge_after();
      for (std::size_t i = from; i < results.size(); ++i) {
        if (claimed[i] == 0) continue;
        ++held;
        const auto at = outstanding_.find(results[i].id);
        overdue = overdue ||
                  (at != outstanding_.end() && std::chrono::duration<double>(now - at->second.sent).count() > after);
      }
    }
    if (!overdue) return false;
    const std::uint64_t k = ++stalled_frames_;
    if ((k & (k - 1)) == 0) {
      stoker::log::info(
          "job {}: remote worker {}: stalled inside a results frame: its {} item(s) there go back to hedging ({} such "
          "frame(s) so far)",
          d_.job_.name(), endpoint_, held, k);
    }
    return true;
  }

  void release(std::span<const ResultView> results, std::span<const char> claimed, std::size_t from) override {
    {
      base::MutexLock lock(mu_);
      for (std::size_t i = from; i < results.size(); ++i) {
        if (claimed[i] == 0) continue;
        if (const auto at = outstanding_.find(results[i].id); at != outstanding_.end()) at->second.receiving = false;
      }
    }
    cv_.notify_all();  // the sender hedges what is due
  }

  // One answer: matched with the item it names (an unknown id is garbage, the late answer of a
  // hedged item is discarded, a 1.1 worker's echo must equal what was sent), checked, written
  // into the slot and settled; a "bad file" verdict and a remote.verify pick are made again
  // here first. false with `why` when the worker misbehaved or its answer differs from this
  // node's (the item is re-issued, or served from this node's pixels; the caller ends the
  // stream).
  // `r` is one of `msg`'s results; its pixels are copied from msg's slices straight into the
  // slot, or were received there already (`placed`: a split frame's, checked before: owed, ok,
  // uncompressed, of the sample's size, its echo equal). A remote.verify pick's raw pixels
  // stay in msg until compared; the slot then gets them through Job::put_sample.
  base::Status take(const ResultView& r, const ReplyView& msg, bool placed = false) {
    std::string why;
    job::Job& job = d_.job_;
    const std::uint64_t n = job.pipeline().sample_bytes();
    Outstanding o;
    bool echo_ok = true;
    {
      base::MutexLock lock(mu_);
      auto at = outstanding_.find(r.id);
      if (at == outstanding_.end()) {
        if (hedged_.erase(r.id) != 0) {
          // The late answer of an item made here meanwhile (hedged): discarded, the item ended.
          cv_.notify_all();  // the sender may take items again once none is due
          return {};
        }
        misbehaved_ = true;
        return base::Status::error("answered item " + std::to_string(r.id) + ", which it does not hold");
      }
      o = std::move(at->second);
      outstanding_.erase(at);
      // A 1.1 worker echoes the item's epoch and draw: an answer must name exactly the item
      // sent under its id (a worker that swaps ids is refused here; one that swaps pixels is
      // found by remote.verify).
      echo_ok = worker_minor_ < 1 || (r.epoch == o.sample.epoch && r.draw == o.sample.draw);
    }
    image::SampleResult result;
    result.error = static_cast<image::SampleErrorKind>(r.error);
    result.reason = r.reason;  // at most ReplyView::kMaxReasonBytes
    result.warnings = r.warnings;
    result.format = r.format < static_cast<std::uint32_t>(image::kImageFormats) ? static_cast<image::ImageFormat>(r.format)
                                                                                 : image::ImageFormat::kUnknown;
    bool good = r.error <= static_cast<std::uint32_t>(image::SampleErrorKind::kTooLarge);
    std::uint8_t* out = job.sample_out(o.item);
    // remote.verify (A6): this answer is made again here and compared byte for byte.
    const bool pick = echo_ok && good && result.ok() && chosen_for_verify(o.sample);
    bool in_slot = placed;  // whether out holds the worker's pixels (else, a pick's, msg does)
    if (!echo_ok) {
      good = false;
      why = "answered item " + std::to_string(r.id) + " as epoch " + std::to_string(r.epoch) + " draw " +
            std::to_string(r.draw) + ", sent as epoch " + std::to_string(o.sample.epoch) + " draw " +
            std::to_string(o.sample.draw);
    } else if (good && result.ok()) {
      if (placed) {
        // Received into the slot already.
      } else if (r.compressed) {
        const base::Status s = decompress(msg.contiguous(r.pixels, zstd_scratch_), std::span<std::uint8_t>(out, n));
        good = s.ok();
        in_slot = good;
        if (!good) why = "sent a bad compressed sample: " + s.message();
      } else if (r.pixels.size == n) {
        if (!pick) msg.copy(r.pixels, out);
        in_slot = !pick;
      } else {
        good = false;
        why = "sent " + std::to_string(r.pixels.size) + " bytes for a sample of " + std::to_string(n);
      }
    } else if (!good) {
      why = "sent an unknown error kind " + std::to_string(r.error);
    }
    if (!good) {
      d_.queue_.push_front(job.index(), {o.item});  // made again elsewhere
      base::MutexLock lock(mu_);
      stats_.reissued++;
      misbehaved_ = true;
      return base::Status::error(why.empty() ? std::string("sent a malformed result") : why);
    }
    if (!local_) local_ = std::make_unique<image::SampleProcessor>(job.pipeline());
    bool mismatch = false;
    if (result.error == image::SampleErrorKind::kIo) {
      // The worker could not read it (its storage, its --allow-root, or its object storage
      // credentials: issue #35): made here instead, where the job's own read rules (retries,
      // missing files) apply; never a verdict on the file. Its reason (the URL and where the
      // worker's credentials came from, never a value) is the link's last_error, logged at
      // the 1st, 2nd, 4th, 8th... failure (a worker denied a whole bucket fails every item).
      job.run(o.item, *local_, buffer_);
      base::MutexLock lock(mu_);
      const std::uint64_t n = ++stats_.read_failures;
      stats_.last_error = "could not read: " + result.reason.substr(0, 512) + "; made here";
      if ((n & (n - 1)) == 0) {
        stoker::log::warn("job {}: remote worker {}: {} ({} read failure(s) so far)", job.name(), endpoint_,
                          stats_.last_error, n);
      }
    } else if (!result.ok()) {
      // A worker's "bad file" verdict never quarantines (A5): the sample is made here. Made
      // fine, the worker lied; failing here too, run() makes it once more as a local worker
      // would and the job's own policy (on_error, quarantine) applies to this node's verdict.
      check_.resize(n);
      const image::SampleResult here = job.make_remote_here(o.sample, *local_, buffer_, check_.data());
      if (here.ok()) {
        mismatch = true;
        std::memcpy(out, check_.data(), n);
        job.finish_remote(o.item, o.sample, here);
        why = "called sample " + std::to_string(o.sample.id) + " bad (" + result.reason.substr(0, 200) +
              "), which is made fine here";
      } else {
        job.run(o.item, *local_, buffer_);
      }
    } else if (pick) {
      // remote.verify (A6): made again here and compared byte for byte where the worker's
      // pixels lie: in the slot when decompressed there, else still in msg (a pick is never
      // claimed a slot: claim()). Reading or writing the slot through this process's mapping
      // is what a pick cost most here, besides its re-make (ShmSegment::write).
      check_.resize(n);
      const image::SampleResult here = job.make_remote_here(o.sample, *local_, buffer_, check_.data());
      const std::uint8_t* theirs =
          in_slot ? out : reinterpret_cast<const std::uint8_t*>(msg.contiguous(r.pixels, zstd_scratch_).data());
      if (here.ok() && std::memcmp(theirs, check_.data(), n) != 0) {
        mismatch = true;
        job.put_sample(o.item, check_.data());  // this node's pixels serve
        job.finish_remote(o.item, o.sample, here);
        why = "sent pixels for sample " + std::to_string(o.sample.id) + " (epoch " + std::to_string(o.sample.epoch) +
              ") that differ from this node's";
      } else if (here.ok() || here.error == image::SampleErrorKind::kIo) {
        // Equal (this node's copy, just made, is the one in cache), or cannot be checked now
        // (unread here: the worker's pixels serve).
        if (!in_slot) job.put_sample(o.item, here.ok() ? check_.data() : theirs);
        job.finish_remote(o.item, o.sample, result);
      } else {
        mismatch = true;
        why = "sent pixels for sample " + std::to_string(o.sample.id) + ", which does not decode here";
        job.run(o.item, *local_, buffer_);
      }
    } else {
      job.finish_remote(o.item, o.sample, result);
    }
    base::MutexLock lock(mu_);
    if (mismatch) {
      // The worker is dropped (the caller ends the stream; what it holds is re-issued).
      stats_.mismatches++;
      misbehaved_ = true;
      return base::Status::error(why + ": dropped, its items re-issued");
    }
    stats_.samples++;
    stats_.bytes_received += r.pixels.size;
    if (r.compressed) stats_.compressed++;
    const double rtt = std::chrono::duration<double>(Clock::now() - o.sent).count();
    stats_.rtt_s = stats_.rtt_s == 0 ? rtt : 0.9 * stats_.rtt_s + 0.1 * rtt;
    // The link's share: the round trip less the item's wait and work at the worker (both
    // reported by it, bounded by the round trip: a peer's figures are not trusted further).
    const double at_worker = 
        (static_cast<double>(r.busy_ns) + static_cast<double>(r.queued_ns)) * 1e-9;
    link_rtt_min_ = std::min(link_rtt_min_, std::max(0.0, rtt - at_worker));
    return {};  // the sender is woken once per message (read_loop), not per result
  }

  void reissue_all() {
    std::vector<sched::WorkItem> back;
    {
      base::MutexLock lock(mu_);
      for (auto& [id, o] : outstanding_) back.push_back(o.item);  // ids ascend: planned order
      stats_.reissued += back.size();
      outstanding_.clear();
      hedged_.clear();  // ended here already; the stream that owed their answers is gone
    }
    if (!back.empty()) {
      stoker::log::info("job {}: {} item(s) of remote worker {} re-issued", d_.job_.name(), back.size(), endpoint_);
      d_.queue_.push_front(d_.job_.index(), std::move(back));
    }
  }

  Dispatcher& d_;
  const std::string address_, endpoint_, target_;
  mutable base::Mutex mu_;
  base::CondVar cv_;
  bool stop_ STOKER_GUARDED_BY(mu_) = false;
  bool broken_ STOKER_GUARDED_BY(mu_) = false;
  std::shared_ptr<grpc::ClientContext> ctx_ STOKER_GUARDED_BY(mu_);
  // Items sent and not yet answered, by id. Invariant (as for hedged_): ids are given in send
  // order (next_id_) and an entry keeps its send time, so begin() is the oldest; the sender's
  // deadline check, wait_until_due and take_overdue rely on it.
  std::map<std::uint64_t, Outstanding> outstanding_ STOKER_GUARDED_BY(mu_);
  WorkerLinkStatus stats_ STOKER_GUARDED_BY(mu_);
  std::uint32_t window_ STOKER_GUARDED_BY(mu_) = 2;
  Clock::time_point rate_mark_ STOKER_GUARDED_BY(mu_);
  std::uint64_t rate_samples_ STOKER_GUARDED_BY(mu_) = 0;
  double link_rtt_min_ STOKER_GUARDED_BY(mu_) = 1e18;  // least (round trip - worker time) this second
  // Items hedged (made here) whose worker's answer is still due: by id, when sent. The answer
  // is discarded; the deadline still counts from the send.
  std::map<std::uint64_t, Clock::time_point> hedged_ STOKER_GUARDED_BY(mu_);
  std::uint32_t worker_minor_ STOKER_GUARDED_BY(mu_) = 0;  // the protocol minor of the open stream's worker
  bool misbehaved_ STOKER_GUARDED_BY(mu_) = false;  // the stream was ended for garbage or a mismatch
  std::uint64_t next_id_ = 1;  // the sending thread's
  std::unique_ptr<image::SampleProcessor> hedge_processor_;  // the sending thread's (hedged items)
  std::vector<std::uint8_t> hedge_buffer_;
  // The reading thread's: worker read failures, "bad file" verdicts and remote.verify picks.
  std::unique_ptr<image::SampleProcessor> local_;
  std::vector<std::uint8_t> buffer_, check_;
  std::string zstd_scratch_;  // a compressed sample split over slices, gathered (reused)
  std::uint64_t stalled_frames_ = 0;  // the results connection's reader's (stalled_too_long)
  // Held by whichever reader takes results (the stream's or the results connection's: a worker
  // writes to one at a time, so it is not contended); guards the reading state above.
  base::Mutex take_mu_;
  // The results connection (protocol 1.3), -1 when none: set by open() on the link's thread,
  // read by results_loop, shut down and closed by serve_stream after both readers are joined.
  int results_fd_ = -1;
  bool items_tcp_ = false;   // the link's thread's: this stream's items go on results_fd_
  std::string items_frame_;  // the sending thread's (reused)
  std::thread thread_;
};

Dispatcher::Dispatcher(job::Job& job, sched::WorkQueue& queue, const config::RemoteConfig& cfg)
    : job_(job), queue_(queue), cfg_(cfg), verify_key_((std::uint64_t{std::random_device{}()} << 32) ^ std::random_device{}()) {
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
