// Integration tier, security (docs/SECURITY.md, remote workers; issue #36): the worker's
// results listener (daemon/remote/results_channel.hpp) against connections a hostile peer on
// the network would make — not a node's greeting, a wrong nonce, a right nonce twice, silence —
// beside an honest node whose stream binds and is served. The worker is the product's
// WorkerServer in this process; the node is a raw gRPC stream plus a raw TCP connection.
#include <catch2/catch.hpp>

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <arpa/inet.h>

#include <chrono>
#include <filesystem>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "config/config.hpp"
#include "remote/protocol.hpp"
#include "remote/results_channel.hpp"
#include "remote/worker_server.hpp"
#include "remote_node_open.hpp"
#include "stoker/remote/worker.grpc.pb.h"
#include "temp_dir.hpp"

namespace v1 = stoker::remote::v1;
namespace fs = std::filesystem;
using stoker::remote::kNonceBytes;
using stoker::remote::kResultsMagic;

namespace {

using ChannelClock = std::chrono::steady_clock;

int dial(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  REQUIRE(fd >= 0);
  sockaddr_in at{};
  at.sin_family = AF_INET;
  at.sin_port = htons(static_cast<std::uint16_t>(port));
  at.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&at), sizeof at) == 0);
  timeval tv{5, 0};  // nothing here waits longer than the worker's bind timeout and a margin
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  return fd;
}

void say(int fd, const std::string& bytes) {
  REQUIRE(::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(bytes.size()));
}

// What the worker answers a greeting: the byte it sent, or -1 when it closed without one
// (-2: nothing within 5 s).
int answer(int fd) {
  char c = 0;
  const ssize_t r = ::recv(fd, &c, 1, 0);
  if (r == 1) return static_cast<unsigned char>(c);
  return r == 0 ? -1 : -2;
}

std::string greeting(const std::string& nonce) { return std::string(kResultsMagic, sizeof kResultsMagic) + nonce; }

// A TCP socket bound to a free loopback port (written to `port`), not yet listening.
int loopback_socket(std::uint16_t& port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  REQUIRE(fd >= 0);
  sockaddr_in at{};
  at.sin_family = AF_INET;
  at.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof at;
  REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&at), sizeof at) == 0);
  REQUIRE(::getsockname(fd, reinterpret_cast<sockaddr*>(&at), &len) == 0);
  port = ntohs(at.sin_port);
  return fd;
}

// The product's WorkerServer in this process over the demo JPEGs (2 threads, 4 streams), a
// node's job for it, and a raw gRPC stub to reach it as a node would.
struct DemoWorker {
  DemoWorker()
      : demo(fs::canonical(fs::path(STOKER_TEST_DATA_DIR) / "demo")),
        cfg(stoker::test::small_remote_job(demo, dir.path(), 64)),
        files(stoker::test::demo_jpegs(demo)) {
    REQUIRE(files.size() >= 8);
    stoker::remote::WorkerSettings settings;
    settings.allow_roots = {demo};
    settings.threads = 2;
    settings.max_streams = 4;
    server = std::make_unique<stoker::remote::WorkerServer>(settings, "127.0.0.1:0", stoker::remote::TlsFiles{});
    REQUIRE(server->results_port() > 0);
    grpc::ChannelArguments own;
    own.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    own.SetMaxReceiveMessageSize(-1);
    stub = v1::Worker::NewStub(grpc::CreateCustomChannel("127.0.0.1:" + std::to_string(server->port()),
                                                         grpc::InsecureChannelCredentials(), own));
  }
  // Opens a stream on `ctx` whose Open carries `nonce`; the worker's answer.
  std::unique_ptr<grpc::ClientReaderWriter<v1::Request, v1::Reply>> open(grpc::ClientContext& ctx,
                                                                         const std::string& nonce, v1::Reply& reply) {
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    auto rw = stub->Work(&ctx);
    v1::Request req;
    *req.mutable_open() = stoker::test::node_open(cfg.jobs.at(0));
    req.mutable_open()->set_results_nonce(nonce);
    REQUIRE(rw->Write(req));
    REQUIRE(rw->Read(&reply));
    INFO(reply.open().error());
    REQUIRE(reply.open().accepted());
    return rw;
  }

  fs::path demo;
  stoker::test::TempDir dir;
  stoker::config::Config cfg;
  std::vector<std::string> files;
  std::unique_ptr<stoker::remote::WorkerServer> server;
  std::unique_ptr<v1::Worker::Stub> stub;
};

}  // namespace

TEST_CASE(
    "the results listener binds only a live stream's nonce, once: other greetings and silence are closed unbound, "
    "and the bound stream's results arrive there whole",
    "[integration][remote][security]") {
  DemoWorker w;
  const std::vector<std::string>& files = w.files;
  stoker::remote::WorkerServer& server = *w.server;
  const int port = server.results_port();
  grpc::ClientContext ctx;
  const std::string nonce = stoker::remote::make_results_nonce();
  REQUIRE(nonce.size() == kNonceBytes);
  v1::Reply reply;
  auto rw = w.open(ctx, nonce, reply);
  CHECK(reply.open().protocol_minor() == stoker::remote::kWorkerMinor);
  CHECK(reply.open().results_port() == static_cast<std::uint32_t>(port));

  // Not a node's greeting (an HTTP request of the same length): closed, nothing answered.
  {
    const int fd = dial(port);
    say(fd,
        std::string("GET / HTTP/1.1\r\nHost: x\r\nAccept: */*\r\n\r\n").substr(0, sizeof kResultsMagic + kNonceBytes));
    CHECK(answer(fd) == -1);
    ::close(fd);
  }
  // The right greeting with a nonce one bit off: closed unbound.
  {
    std::string wrong = nonce;
    wrong.back() = static_cast<char>(wrong.back() ^ 1);
    const int fd = dial(port);
    say(fd, greeting(wrong));
    CHECK(answer(fd) == -1);
    ::close(fd);
  }
  // The stream's own nonce: bound, acknowledged — at once, though more silent peers than the
  // listener holds in their handshakes connected first (each greeting is polled, none waits for
  // another's; past kMaxGreeting the oldest silent one is closed).
  std::vector<int> silent;
  for (std::size_t i = 0; i < stoker::remote::kMaxGreeting + 6; ++i) silent.push_back(dial(port));
  const auto asked = ChannelClock::now();
  const int bound = dial(port);
  say(bound, greeting(nonce));
  REQUIRE(answer(bound) == stoker::remote::kResultsBound);
  CHECK(std::chrono::duration<double>(ChannelClock::now() - asked).count() < 1.0);
  CHECK(answer(silent.front()) == -1);  // the oldest gave way (closed, unbound)
  for (const int fd : silent) ::close(fd);
  // The same nonce again (a replay by someone who saw it): closed, the first binding stands.
  {
    const int fd = dial(port);
    say(fd, greeting(nonce));
    CHECK(answer(fd) == -1);
    ::close(fd);
  }

  // Items on the stream (a 1.3 node's way), then on the bound connection (1.4): every result
  // comes back on the bound connection, none on the stream.
  const int items = 24;
  const v1::Request all = stoker::test::demo_items(files, items);
  v1::Request on_stream, on_connection;
  for (int i = 0; i < items; ++i) {
    *(i < items / 2 ? on_stream : on_connection).mutable_items()->add_items() = all.items().items(i);
  }
  REQUIRE(rw->Write(on_stream));
  std::string items_frame(4, '\0');
  on_connection.AppendToString(&items_frame);
  REQUIRE(stoker::remote::write_items_frame(bound, items_frame, [] { return false; }));
  std::set<std::uint64_t> ids;
  std::vector<std::uint8_t> frame;
  const std::size_t max = stoker::remote::max_reply_bytes(64u * 64 * 3);
  while (static_cast<int>(ids.size()) < items) {
    std::string why;
    const stoker::remote::FrameRead got = stoker::remote::read_results_frame(bound, frame, max, why);
    INFO(why);
    REQUIRE(got == stoker::remote::FrameRead::kFrame);
    v1::Reply r;
    REQUIRE(r.ParseFromArray(frame.data(), static_cast<int>(frame.size())));
    REQUIRE((r.has_result() || r.has_results()));
    auto take = [&](const v1::Result& one) {
      CHECK(one.error() == 0);
      CHECK(one.pixels().size() == 64u * 64 * 3);
      ids.insert(one.id());
    };
    if (r.has_result()) take(r.result());
    for (const v1::Result& one : r.results().results()) take(one);
  }
  CHECK(ids.size() == static_cast<std::size_t>(items));
  CHECK(*ids.begin() == 1);
  CHECK(*ids.rbegin() == static_cast<std::uint64_t>(items));

  // A peer that connects and says nothing holds the listener's handshake at most the bind
  // timeout, then is closed.
  {
    const int fd = dial(port);
    const auto t0 = ChannelClock::now();
    CHECK(answer(fd) == -1);
    const double waited = std::chrono::duration<double>(ChannelClock::now() - t0).count();
    CHECK(waited < std::chrono::duration<double>(stoker::remote::kBindTimeout).count() + 1.5);
    ::close(fd);
  }

  // The node ends its stream: the worker finishes it and closes the results connection at a
  // frame boundary (nothing was outstanding), and lets the stream go.
  rw->WritesDone();
  CHECK(rw->Read(&reply) == false);  // nothing more on the stream itself
  CHECK(rw->Finish().ok());
  std::string why;
  CHECK(stoker::remote::read_results_frame(bound, frame, max, why) == stoker::remote::FrameRead::kClosed);
  ::close(bound);
  const auto until = ChannelClock::now() + std::chrono::seconds(5);
  while (server.stats().streams != 0 && ChannelClock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  CHECK(server.stats().streams == 0);
}

TEST_CASE(
    "a worker's --results-port: the listener takes the port asked for, and a port in use leaves the results on the "
    "stream",
    "[integration][remote]") {
  // A free port: bound and let go (another process could take it meanwhile: then the second
  // half below holds for it, and the first CHECK says so).
  std::uint16_t port = 0;
  const int probe = loopback_socket(port);
  ::close(probe);

  stoker::remote::WorkerSettings settings;
  settings.allow_roots = {fs::canonical(fs::path(STOKER_TEST_DATA_DIR) / "demo")};
  settings.results_port = port;
  stoker::remote::WorkerServer first(settings, "127.0.0.1:0", {});
  CHECK(first.results_port() == port);
  // The same port again: taken, so this worker offers no results connection (logged), and
  // still serves on gRPC.
  stoker::remote::WorkerServer second(settings, "127.0.0.1:0", {});
  CHECK(second.results_port() == 0);
  CHECK(second.port() > 0);
}

TEST_CASE(
    "items on the results connection (protocol 1.4) meet the stream's own checks: a bad frame ends that stream, "
    "and the worker serves the next",
    "[integration][remote][security]") {
  DemoWorker w;
  const stoker::config::Config& cfg = w.cfg;
  const std::vector<std::string>& files = w.files;
  stoker::remote::WorkerServer& server = *w.server;

  // What a hostile node writes as its items frame, and what the worker's end of the stream says.
  std::string too_long(4, '\0');
  too_long[0] = too_long[1] = too_long[2] = '\xff';
  too_long[3] = '\x7f';  // 2^31 - 1 bytes announced
  std::string not_a_request(4, '\0');
  not_a_request += std::string(11, '\xff');  // an overlong varint: no protobuf parses it
  v1::Request open_again;
  *open_again.mutable_open() = stoker::test::node_open(cfg.jobs.at(0));
  const v1::Request too_many = stoker::test::demo_items(files, static_cast<int>(stoker::remote::kMaxBatch) + 1);
  struct Bad {
    std::string frame;
    bool framed;  // write_items_frame fills in the length
    const char* says;
  };
  std::vector<Bad> cases = {{too_long, false, "an items frame of 2147483647 bytes"},
                            {not_a_request, true, "not a Request"},
                            {std::string(4, '\0') + open_again.SerializeAsString(), true, "only items may follow"},
                            {std::string(4, '\0') + too_many.SerializeAsString(), true, "an ItemBatch of 65 items"}};
  for (Bad& bad : cases) {
    INFO(bad.says);
    grpc::ClientContext ctx;
    const std::string nonce = stoker::remote::make_results_nonce();
    v1::Reply reply;
    auto rw = w.open(ctx, nonce, reply);
    REQUIRE(reply.open().protocol_minor() >= 4);
    std::string why;
    const int fd = stoker::remote::connect_results("127.0.0.1", reply.open().results_port(), nonce, why);
    INFO(why);
    REQUIRE(fd >= 0);
    const auto errors = server.stats().errors;
    if (bad.framed) {
      REQUIRE(stoker::remote::write_items_frame(fd, bad.frame, [] { return false; }));
    } else {
      say(fd, bad.frame);
    }
    // The worker ends the stream naming what was wrong, and closes the connection.
    CHECK(rw->Read(&reply) == false);
    const grpc::Status end = rw->Finish();
    CHECK_FALSE(end.ok());
    CHECK(end.error_message().find(bad.says) != std::string::npos);
    std::vector<std::uint8_t> frame;
    CHECK(stoker::remote::read_results_frame(fd, frame, 1 << 20, why) == stoker::remote::FrameRead::kClosed);
    ::close(fd);
    CHECK(server.stats().errors == errors + 1);
  }

  // The worker serves the next stream as before: items on its connection, results back.
  grpc::ClientContext ctx;
  const std::string nonce = stoker::remote::make_results_nonce();
  v1::Reply reply;
  auto rw = w.open(ctx, nonce, reply);
  std::string why;
  const int fd = stoker::remote::connect_results("127.0.0.1", reply.open().results_port(), nonce, why);
  REQUIRE(fd >= 0);
  std::string items(4, '\0');
  stoker::test::demo_items(files, 4).AppendToString(&items);
  REQUIRE(stoker::remote::write_items_frame(fd, items, [] { return false; }));
  std::set<std::uint64_t> ids;
  std::vector<std::uint8_t> frame;
  while (ids.size() < 4) {
    REQUIRE(stoker::remote::read_results_frame(fd, frame, stoker::remote::max_reply_bytes(64u * 64 * 3), why) ==
            stoker::remote::FrameRead::kFrame);
    v1::Reply r;
    REQUIRE(r.ParseFromArray(frame.data(), static_cast<int>(frame.size())));
    if (r.has_result()) ids.insert(r.result().id());
    for (const v1::Result& one : r.results().results()) ids.insert(one.id());
  }
  CHECK(ids == std::set<std::uint64_t>{1, 2, 3, 4});
  ctx.TryCancel();
  rw->Finish();
  ::close(fd);
}

TEST_CASE(
    "an items frame the worker does not take: the node's send gives up when its link says so, between bounded waits",
    "[integration][remote]") {
  // A connection whose far end never reads (a frozen worker), as connect_results leaves the
  // node's end: a send waits at most 200 ms at a time.
  std::uint16_t port = 0;
  const int listener = loopback_socket(port);
  REQUIRE(::listen(listener, 1) == 0);
  const int node = dial(port);
  const int frozen = ::accept(listener, nullptr, nullptr);
  REQUIRE(frozen >= 0);
  const timeval wait{0, 200 * 1000};
  REQUIRE(::setsockopt(node, SOL_SOCKET, SO_SNDTIMEO, &wait, sizeof wait) == 0);

  std::string frame(4 + (64u << 20), 'x');  // more than both ends' socket buffers hold
  int asked = 0;
  const auto t0 = ChannelClock::now();
  CHECK_FALSE(stoker::remote::write_items_frame(node, frame, [&] { return ++asked < 3; }));
  const double took = std::chrono::duration<double>(ChannelClock::now() - t0).count();
  CHECK(asked == 3);  // asked after each bounded wait, and stopped when told to
  CHECK(took < 3.0);  // three waits of 200 ms, not a send blocked for good
  ::close(node);
  ::close(frozen);
  ::close(listener);
}
