// Integration tier, security (docs/SECURITY.md, remote workers; issue #36, protocol 1.4): the
// items a node sends on its bound results connection meet the stream's own checks at the worker
// (a bad frame ends that stream, the worker serves the next), and the node's send of an items
// frame to a worker that takes none gives up when its link says so. Same test program and
// helpers (results_channel_peer.hpp) as remote_results_channel_test.cpp.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <chrono>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "remote/results_listener.hpp"
#include "results_channel_peer.hpp"

using namespace stoker::test;
using stoker::remote::kNonceBytes;

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
    v1::Reply last;
    CHECK(read_split_reply(fd, last, why) == stoker::remote::FrameRead::kClosed);
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
  while (ids.size() < 4) {
    v1::Reply r;
    REQUIRE(read_split_reply(fd, r, why, stoker::remote::max_reply_bytes(64u * 64 * 3)) ==
            stoker::remote::FrameRead::kFrame);
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

TEST_CASE(
    "a node of protocol 1.4 gets its results as whole Replies, a 1.5 node as split frames: the same results, pixels "
    "and all",
    "[integration][remote]") {
  DemoWorker w;
  const int items = 12;
  std::map<std::uint32_t, std::map<std::uint64_t, std::string>> got;  // minor -> id -> outcome and pixels
  for (const std::uint32_t minor : {4u, 5u}) {
    INFO("node protocol 1." << minor);
    grpc::ClientContext ctx;
    const std::string nonce = stoker::remote::make_results_nonce();
    v1::Reply reply;
    auto rw = w.open(ctx, nonce, reply, minor);
    std::string why;
    const int fd = stoker::remote::connect_results("127.0.0.1", reply.open().results_port(), nonce, why);
    INFO(why);
    REQUIRE(fd >= 0);
    std::string frame(4, '\0');
    stoker::test::demo_items(w.files, items).AppendToString(&frame);
    REQUIRE(stoker::remote::write_items_frame(fd, frame, [] { return false; }));
    const std::size_t max = stoker::remote::max_reply_bytes(64u * 64 * 3);
    std::map<std::uint64_t, std::string>& mine = got[minor];
    while (mine.size() < static_cast<std::size_t>(items)) {
      v1::Reply r;
      if (minor >= 5) {
        REQUIRE(read_split_reply(fd, r, why, max) == stoker::remote::FrameRead::kFrame);
      } else {
        std::vector<std::uint8_t> body;
        REQUIRE(stoker::remote::read_results_frame(fd, body, max, why) == stoker::remote::FrameRead::kFrame);
        REQUIRE(r.ParseFromArray(body.data(), static_cast<int>(body.size())));
      }
      auto take = [&](const v1::Result& one) {
        CHECK(one.pixel_bytes() == (minor >= 5 ? one.pixels().size() : 0u));  // set only in split frames
        mine[one.id()] = std::to_string(one.error()) + ":" + one.pixels();
      };
      if (r.has_result()) take(r.result());
      for (const v1::Result& one : r.results().results()) take(one);
    }
    ctx.TryCancel();
    rw->Finish();
    ::close(fd);
  }
  REQUIRE(got[4].size() == static_cast<std::size_t>(items));
  CHECK(got[4].begin()->second.size() == 2 + 64u * 64 * 3);  // "0:" and a whole sample
  CHECK(got[4] == got[5]);
}
