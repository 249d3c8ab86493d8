// Integration tier, security (docs/SECURITY.md, remote workers; issue #34 A4): what streams
// that never send an Open, or send a wrong token, cost a `stokerd --worker`. The worker is the
// product's WorkerServer in this process (its thread count is this process's, read from
// /proc/self/status); the GPU nodes are raw gRPC streams of the worker protocol.
#include <catch2/catch.hpp>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "remote/protocol.hpp"
#include "remote/worker_server.hpp"
#include "stoker/remote/worker.grpc.pb.h"

namespace v1 = stoker::remote::v1;

namespace {

using LimitsClock = std::chrono::steady_clock;

int threads_now() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("Threads:", 0) == 0) return std::stoi(line.substr(8));
  }
  return -1;
}

struct IdleStream {
  grpc::ClientContext ctx;
  std::unique_ptr<grpc::ClientReaderWriter<v1::Request, v1::Reply>> rw;
};

stoker::remote::WorkerSettings limits_settings() {
  stoker::remote::WorkerSettings s;
  s.allow_roots = {std::filesystem::canonical(std::filesystem::temp_directory_path())};
  s.threads = 2;
  s.token = "the right token";
  s.max_streams = 16;
  s.open_timeout = std::chrono::milliseconds(1000);
  return s;
}

}  // namespace

TEST_CASE("200 streams without an Open: threads stay bounded, past the cap refused, the rest cancelled at the deadline",
          "[integration][remote][security]") {
  stoker::remote::WorkerServer server(limits_settings(), "127.0.0.1:0", {});
  auto channel = grpc::CreateChannel("127.0.0.1:" + std::to_string(server.port()), grpc::InsecureChannelCredentials());
  REQUIRE(channel->WaitForConnected(std::chrono::system_clock::now() + std::chrono::seconds(5)));
  auto stub = v1::Worker::NewStub(channel);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  const int before = threads_now();

  constexpr int kStreams = 200;
  const auto t0 = LimitsClock::now();
  std::vector<std::unique_ptr<IdleStream>> streams;
  for (int i = 0; i < kStreams; ++i) {
    auto s = std::make_unique<IdleStream>();
    // The old worker kept such streams forever: the client gives up after 5 s instead.
    s->ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    s->rw = stub->Work(&s->ctx);
    streams.push_back(std::move(s));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  const int during = threads_now();
  std::printf("worker threads (this process): %d before, %d with %d streams without an Open (--max-streams 16)\n",
              before, during, kStreams);
  INFO("threads before " << before << ", with " << kStreams << " idle streams " << during);
  // The 16 streams served hold a gRPC thread each; gRPC's pollers come and go around them.
  CHECK(during <= before + 16 + 16);

  int exhausted = 0, cancelled = 0, other = 0;
  std::string exhausted_text;
  for (auto& s : streams) {
    v1::Reply reply;
    while (s->rw->Read(&reply)) {
    }
    const grpc::Status st = s->rw->Finish();
    if (st.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED) {
      ++exhausted;
      exhausted_text = st.error_message();
    } else if (st.error_code() == grpc::StatusCode::CANCELLED) {
      ++cancelled;  // by the worker at its --open-timeout (1 s)
    } else {  // DEADLINE_EXCEEDED: the client's own 5 s, a worker that keeps idle streams
      ++other;
    }
  }
  const double took = std::chrono::duration<double>(LimitsClock::now() - t0).count();
  const stoker::remote::WorkerStats stats = server.stats();
  INFO("refused " << exhausted << ", cancelled " << cancelled << ", other " << other << ", in " << took << " s");
  CHECK(exhausted == kStreams - 16);
  CHECK(exhausted_text.find("at most 16 streams at once (--max-streams)") != std::string::npos);
  CHECK(cancelled == 16);
  CHECK(other == 0);
  CHECK(stats.open_timeouts == 16);
  CHECK(took < 3.0);  // closed by the worker's 1 s deadline, not the client's 5 s
  CHECK(stats.sessions == 0);

  // The places are free again: a new idle stream waits for its Open rather than being refused.
  grpc::ClientContext ctx;
  auto rw = stub->Work(&ctx);
  v1::Reply reply;
  CHECK_FALSE(rw->Read(&reply));
  const grpc::Status st = rw->Finish();
  CHECK(st.error_code() == grpc::StatusCode::CANCELLED);
}

TEST_CASE("a wrong token is refused before the worker allocates a session for the stream",
          "[integration][remote][security]") {
  stoker::remote::WorkerServer server(limits_settings(), "127.0.0.1:0", {});
  auto channel = grpc::CreateChannel("127.0.0.1:" + std::to_string(server.port()), grpc::InsecureChannelCredentials());
  auto stub = v1::Worker::NewStub(channel);
  for (int i = 0; i < 20; ++i) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    auto rw = stub->Work(&ctx);
    v1::Request req;
    req.mutable_open()->set_protocol_major(stoker::remote::kWorkerMajor);
    req.mutable_open()->set_protocol_minor(stoker::remote::kWorkerMinor);
    req.mutable_open()->set_token(i % 2 == 0 ? "a wrong token" : "");
    REQUIRE(rw->Write(req));
    v1::Reply reply;
    REQUIRE(rw->Read(&reply));
    REQUIRE(reply.has_open());
    CHECK_FALSE(reply.open().accepted());
    CHECK(reply.open().error().find("token") != std::string::npos);
    CHECK(rw->Finish().error_code() == grpc::StatusCode::FAILED_PRECONDITION);
  }
  const stoker::remote::WorkerStats stats = server.stats();
  CHECK(stats.refused == 20);
  CHECK(stats.sessions == 0);  // no WorkerSession, outbox or item state was made for any of them
}
