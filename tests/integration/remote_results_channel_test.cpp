// Integration tier, security (docs/SECURITY.md, remote workers; issue #36): the worker's
// results listener (daemon/remote/results_listener.hpp) against connections a hostile peer on
// the network would make — not a node's greeting, a wrong nonce, a right nonce twice, silence —
// beside an honest node whose stream binds and is served. The worker is the product's
// WorkerServer in this process; the node is a raw gRPC stream plus a raw TCP connection
// (results_channel_peer.hpp). The items sent on the bound connection: remote_items_channel_test.cpp.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <chrono>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "remote/results_listener.hpp"
#include "results_channel_peer.hpp"

using namespace stoker::test;
using stoker::remote::kNonceBytes;

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
  const std::size_t max = stoker::remote::max_reply_bytes(64u * 64 * 3);
  while (static_cast<int>(ids.size()) < items) {
    std::string why;
    v1::Reply r;
    const stoker::remote::FrameRead got = read_split_reply(bound, r, why, max);
    INFO(why);
    REQUIRE(got == stoker::remote::FrameRead::kFrame);
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
  v1::Reply last;
  CHECK(read_split_reply(bound, last, why, max) == stoker::remote::FrameRead::kClosed);
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
