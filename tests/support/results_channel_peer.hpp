// For the results connection's tests (remote_results_channel_test, remote_items_channel_test):
// raw TCP peers (dial, say, answer, a greeting) and the product's WorkerServer in this process
// over the demo JPEGs (DemoWorker), reached through a raw gRPC stub as a node would.
#pragma once

#include <catch2/catch.hpp>

#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "config/config.hpp"
#include "loopback.hpp"
#include "remote/protocol.hpp"
#include "remote/results_listener.hpp"
#include "remote/split_frames.hpp"
#include "remote/worker_server.hpp"
#include "remote_node_open.hpp"
#include "stoker/remote/worker.grpc.pb.h"
#include "temp_dir.hpp"

namespace stoker::test {

namespace v1 = stoker::remote::v1;
namespace fs = std::filesystem;
using stoker::remote::kResultsMagic;

using ChannelClock = std::chrono::steady_clock;

inline int dial(int port) {
  const int fd = connect_loopback(static_cast<std::uint16_t>(port));
  timeval tv{5, 0};  // nothing here waits longer than the worker's bind timeout and a margin
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  return fd;
}

inline void say(int fd, const std::string& bytes) {
  REQUIRE(::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(bytes.size()));
}

// One results frame as a node of protocol 1.5 receives it (split_frames.hpp), each result's
// pixels put back into it: kFrame with `out` whole, or what read_split_head said (a message that
// does not parse, or pixels that do not add up, is kTooLong with `why` saying so).
inline stoker::remote::FrameRead read_split_reply(int fd, v1::Reply& out, std::string& why,
                                                  std::size_t max_pixels = std::size_t{1} << 30) {
  using stoker::remote::FrameRead;
  std::vector<std::uint8_t> head;
  std::size_t total = 0;
  if (const FrameRead got = stoker::remote::read_split_head(fd, head, max_pixels, total, why);
      got != FrameRead::kFrame) {
    return got;
  }
  if (!out.ParseFromArray(head.data(), static_cast<int>(head.size()))) {
    why = "a message that does not parse";
    return FrameRead::kTooLong;
  }
  std::string pixels(total, '\0');
  std::vector<iovec> parts{{pixels.data(), pixels.size()}};
  std::size_t next = 0;
  int e = EAGAIN;
  while (e == EAGAIN) e = stoker::remote::receive_parts(fd, parts, next);
  if (e != 0) {
    why = "cut inside the pixels";
    return FrameRead::kCut;
  }
  std::size_t at = 0;
  auto put = [&](v1::Result& r) {
    if (!r.pixels().empty() || r.pixel_bytes() > total - at) return false;
    r.set_pixels(pixels.substr(at, r.pixel_bytes()));
    at += r.pixel_bytes();
    return true;
  };
  bool ok = true;
  if (out.has_result()) {
    ok = put(*out.mutable_result());
  } else {  // (mutable_results() would clear a oneof's result)
    for (v1::Result& r : *out.mutable_results()->mutable_results()) ok = ok && put(r);
  }
  if (!ok || at != total) {
    why = "pixels that do not add up";
    return FrameRead::kTooLong;
  }
  return FrameRead::kFrame;
}

// What the worker answers a greeting: the byte it sent, or -1 when it closed without one
// (-2: nothing within 5 s).
inline int answer(int fd) {
  char c = 0;
  const ssize_t r = ::recv(fd, &c, 1, 0);
  if (r == 1) return static_cast<unsigned char>(c);
  return r == 0 ? -1 : -2;
}

inline std::string greeting(const std::string& nonce) {
  return std::string(kResultsMagic, sizeof kResultsMagic) + nonce;
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
  // Opens a stream on `ctx` whose Open carries `nonce` (as a node of protocol 1.`minor`); the
  // worker's answer.
  std::unique_ptr<grpc::ClientReaderWriter<v1::Request, v1::Reply>> open(
      grpc::ClientContext& ctx, const std::string& nonce, v1::Reply& reply,
      std::uint32_t minor = stoker::remote::kWorkerMinor) {
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    auto rw = stub->Work(&ctx);
    v1::Request req;
    *req.mutable_open() = stoker::test::node_open(cfg.jobs.at(0));
    req.mutable_open()->set_results_nonce(nonce);
    req.mutable_open()->set_protocol_minor(minor);
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

}  // namespace stoker::test
