// A link's connection (dispatcher_link.hpp): its thread's loop with backoff, the channel and
// its credentials, and the Open that agrees the job, the protocol, the decoder versions and the
// results connection with the worker. A stream that opens runs the sender here and the readers
// beside it until one of them ends it; then every item it held is re-issued.

#include <algorithm>
#include <atomic>
#include <chrono>
#include <string>

#include <sys/socket.h>
#include <unistd.h>

#include "base/thread_name.hpp"
#include "image/decoder_versions.hpp"
#include "log/log.hpp"
#include "remote/dispatcher_link.hpp"
#include "remote/endpoints.hpp"
#include "remote/open_compression.hpp"
#include "remote/protocol.hpp"
#include "remote/worker_server.hpp"  // read_secret_file

namespace stoker::remote {

namespace {

constexpr auto kConnectTimeout = std::chrono::seconds(3);
constexpr double kBackoffMin = 0.2, kBackoffMax = 5;

// The worker service's one method, as gRPC names it on the wire.
const std::string& work_method() {
  static const std::string name = std::string("/") + v1::Worker::service_full_name() + "/Work";
  return name;
}

}  // namespace

Dispatcher::Link::Link(Dispatcher& d, std::string address, std::string endpoint, std::string target)
    : d_(d), address_(std::move(address)), endpoint_(std::move(endpoint)), target_(std::move(target)) {
  thread_ = std::thread([this] {
    base::name_this_thread("remote-link");  // connects, then sends items (send_loop)
    run();
  });
}

void Dispatcher::Link::stop() {
  {
    base::MutexLock lock(mu_);
    if (stop_) return;
    stop_ = true;
    if (ctx_) ctx_->TryCancel();
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

WorkerLinkStatus Dispatcher::Link::status() const {
  base::MutexLock lock(mu_);
  WorkerLinkStatus s = stats_;
  s.address = address_;
  s.endpoint = endpoint_;
  s.in_flight = static_cast<std::uint32_t>(outstanding_.size());  // hedged items are not held
  s.window = window_;
  return s;
}

void Dispatcher::Link::run() {
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

std::shared_ptr<grpc::ChannelCredentials> Dispatcher::Link::credentials() {
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

void Dispatcher::Link::fail(const std::string& why) {
  base::MutexLock lock(mu_);
  stats_.errors++;
  if (stats_.last_error != why) stoker::log::warn("job {}: remote worker {}: {}", d_.job_.name(), endpoint_, why);
  stats_.last_error = why;
}

bool Dispatcher::Link::serve_stream() {
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

bool Dispatcher::Link::open(grpc::ClientReaderWriter<v1::Request, ReplyView>& stream, grpc::ClientContext& ctx) {
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
    fail(!got                                          ? "no answer to the Open (closed, or 10 s passed)"
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
    const std::string theirs = r.decoder_versions().empty()
                                   ? "unknown (not reported; it speaks protocol 1." +
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

}  // namespace stoker::remote
