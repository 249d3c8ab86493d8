// Integration tier, security (docs/SECURITY.md, remote workers; issue #34 A3/A4): what streams
// that never send an Open, send a wrong token, or never read their results cost a
// `stokerd --worker`. The worker is the
// product's WorkerServer in this process (its thread count is this process's, read from
// /proc/self/status); the GPU nodes are raw gRPC streams of the worker protocol.
#include <catch2/catch.hpp>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "config/config.hpp"
#include "proc_status.hpp"
#include "remote/protocol.hpp"
#include "remote/worker_server.hpp"
#include "remote_node_open.hpp"
#include "stoker/remote/worker.grpc.pb.h"
#include "temp_dir.hpp"

namespace v1 = stoker::remote::v1;

namespace {

using LimitsClock = std::chrono::steady_clock;

namespace fs = std::filesystem;

int threads_now() { return std::stoi(stoker::test::proc_status_field("/proc/self/status", "Threads")); }

long rss_kib() { return std::stol(stoker::test::proc_status_field("/proc/self/status", "VmRSS")); }

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
  // A stream waiting for its Open holds no thread (the callback API); gRPC's pollers and
  // callback pool come and go. The old worker held one per stream: before + 16 at least.
  CHECK(during <= before + 8);

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

namespace {

// A job whose samples are large (512x512 float32, 3 MiB each), so a few fill a stream's buffer.
struct BigSampleNode {
  stoker::test::TempDir dir;
  stoker::config::Config cfg;
  v1::Open open;
  std::vector<std::string> files;
  BigSampleNode() {
    const fs::path demo = fs::canonical(fs::path(STOKER_TEST_DATA_DIR) / "demo");
    const std::string yaml = "jobs:\n"
                             "  big:\n"
                             "    source: {root: \"" + demo.string() + "\"}\n"
                             "    batch_size: 4\n"
                             "    remote: {workers: [\"127.0.0.1:1\"]}\n"
                             "    pipeline:\n"
                             "      - decode: {}\n"
                             "      - resize: {size: [512, 512]}\n"
                             "    output: {dtype: float32}\n";
    cfg = stoker::config::parse_config(yaml, "node.yaml", dir.path());
    open = stoker::test::node_open(cfg.jobs.at(0));
    open.set_token("the right token");
    files = stoker::test::demo_jpegs(demo);
  }
  v1::Request items(std::uint64_t first, int n) const {
    v1::Request req;
    for (int i = 0; i < n; ++i) {
      v1::Item* it = req.mutable_items()->add_items();
      it->set_id(first + static_cast<std::uint64_t>(i));
      it->set_path(files[(first + static_cast<std::uint64_t>(i)) % files.size()]);
      it->set_epoch(0);
      it->set_draw(static_cast<std::uint32_t>(first) + static_cast<std::uint32_t>(i));
    }
    return req;
  }
};

}  // namespace

TEST_CASE("a node that never reads its results parks its stream: no decode thread waits, memory stays bounded, "
          "another node is served",
          "[integration][remote][security]") {
  const BigSampleNode node;
  REQUIRE(node.files.size() >= 20);
  stoker::remote::WorkerSettings settings = limits_settings();
  settings.allow_roots = {fs::canonical(fs::path(STOKER_TEST_DATA_DIR) / "demo")};
  stoker::remote::WorkerServer server(settings, "127.0.0.1:0", {});
  auto channel = grpc::CreateChannel("127.0.0.1:" + std::to_string(server.port()), grpc::InsecureChannelCredentials());
  auto stub = v1::Worker::NewStub(channel);
  const long rss_before = rss_kib();
  const int threads_before = threads_now();

  // The hostile node: Open, 1,000 items of 3 MiB results each (3 GB if all were made), and it
  // never reads a byte.
  grpc::ClientContext deaf_ctx;
  auto deaf = stub->Work(&deaf_ctx);
  v1::Request open;
  *open.mutable_open() = node.open;
  REQUIRE(deaf->Write(open));
  for (int b = 0; b < 1000 / 50; ++b) REQUIRE(deaf->Write(node.items(static_cast<std::uint64_t>(b) * 50, 50)));
  std::this_thread::sleep_for(std::chrono::seconds(3));
  const stoker::remote::WorkerStats parked = server.stats();
  const long rss_parked = rss_kib();

  // An honest node on its own connection: all of its items come back, now.
  grpc::ChannelArguments own;
  own.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  own.SetMaxReceiveMessageSize(-1);
  auto channel2 = grpc::CreateCustomChannel("127.0.0.1:" + std::to_string(server.port()),
                                            grpc::InsecureChannelCredentials(), own);
  auto stub2 = v1::Worker::NewStub(channel2);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
  auto honest = stub2->Work(&ctx);
  REQUIRE(honest->Write(open));
  v1::Reply reply;
  REQUIRE(honest->Read(&reply));
  REQUIRE(reply.has_open());
  INFO(reply.open().error());
  REQUIRE(reply.open().accepted());
  const auto t0 = LimitsClock::now();
  REQUIRE(honest->Write(node.items(5000, 24)));
  std::set<std::uint64_t> got;
  auto take = [&](const v1::Result& r) {
    CHECK(r.error() == 0);
    CHECK(r.pixels().size() == 512u * 512 * 3 * 4);
    got.insert(r.id());
  };
  while (got.size() < 24 && honest->Read(&reply)) {
    if (reply.has_result()) take(reply.result());
    for (const v1::Result& r : reply.results().results()) take(r);
  }
  const double honest_s = std::chrono::duration<double>(LimitsClock::now() - t0).count();
  honest->WritesDone();
  const grpc::Status honest_end = honest->Finish();
  const int threads_during = threads_now();

  std::printf("deaf node: %llu of 1000 items made, parked %llu times, worker RSS +%ld MiB; honest node: 24 items in "
              "%.2f s; threads %d -> %d\n",
              static_cast<unsigned long long>(parked.items), static_cast<unsigned long long>(parked.stalls),
              (rss_parked - rss_before) / 1024, honest_s, threads_before, threads_during);
  // Made: what fills the stream's buffer (12 MiB: 2 threads x 2 samples) and gRPC's windows,
  // not the 1,000 asked (the old worker made all of them and held them: 3 GB).
  CHECK(parked.items < 100);
  CHECK(parked.stalls > 0);
  CHECK(rss_parked - rss_before < 400 * 1024);
  CHECK(got.size() == 24);
  INFO("honest stream ended: " << honest_end.error_message());
  CHECK(honest_end.ok());
  CHECK(honest_s < 10.0);  // not behind the deaf node's 1,000 items, and no decode thread lost to it
  CHECK(threads_during <= threads_before + 8);

  // The deaf node goes away: its stream ends and what it held is let go.
  deaf_ctx.TryCancel();
  deaf->Finish();
  const auto until = LimitsClock::now() + std::chrono::seconds(5);
  while (server.stats().streams != 0 && LimitsClock::now() < until) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  CHECK(server.stats().streams == 0);
}

namespace {

// Messages and results of one stream at `server` for `items` items of a 224x224 uint8 job.
struct Answered {
  int messages = 0;
  std::set<std::uint64_t> ids;
  double first_s = 0;  // from the items' write to the first message
};

Answered ask(int port, int items) {
  const fs::path demo = fs::canonical(fs::path(STOKER_TEST_DATA_DIR) / "demo");
  stoker::test::TempDir dir;
  const stoker::config::Config cfg = stoker::test::small_remote_job(demo, dir.path(), 224);
  const std::vector<std::string> files = stoker::test::demo_jpegs(demo);
  REQUIRE(!files.empty());
  grpc::ChannelArguments own;
  own.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  own.SetMaxReceiveMessageSize(-1);
  auto channel = grpc::CreateCustomChannel("127.0.0.1:" + std::to_string(port), grpc::InsecureChannelCredentials(), own);
  auto stub = v1::Worker::NewStub(channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
  auto rw = stub->Work(&ctx);
  v1::Request open;
  *open.mutable_open() = stoker::test::node_open(cfg.jobs.at(0));
  open.mutable_open()->set_token("the right token");
  REQUIRE(rw->Write(open));
  v1::Reply reply;
  REQUIRE(rw->Read(&reply));
  INFO(reply.open().error());
  REQUIRE(reply.open().accepted());
  const v1::Request req = stoker::test::demo_items(files, items);
  const auto t0 = LimitsClock::now();
  REQUIRE(rw->Write(req));
  Answered a;
  while (static_cast<int>(a.ids.size()) < items && rw->Read(&reply)) {
    if (a.messages++ == 0) a.first_s = std::chrono::duration<double>(LimitsClock::now() - t0).count();
    if (reply.has_result()) a.ids.insert(reply.result().id());
    for (const v1::Result& r : reply.results().results()) a.ids.insert(r.id());
  }
  rw->WritesDone();
  CHECK(rw->Finish().ok());
  return a;
}

}  // namespace

// Issue #36: a worker's results linger (worker_stream.hpp) so that several leave in one
// message, each message being a wake-up of the GPU node; but never for an item the worker
// does not hold.
TEST_CASE("a 1-thread worker's results linger into few messages, and a lone item is not held", "[integration][remote]") {
  stoker::remote::WorkerSettings settings = limits_settings();
  settings.allow_roots = {fs::canonical(fs::path(STOKER_TEST_DATA_DIR) / "demo")};
  settings.threads = 1;
  settings.result_linger = std::chrono::milliseconds(1000);
  stoker::remote::WorkerServer server(settings, "127.0.0.1:0", {});

  const Answered many = ask(server.port(), 16);
  std::printf("linger 1 s: 16 results in %d message(s)\n", many.messages);
  CHECK(many.ids.size() == 16);
  // Without the linger, a result that finds no write outstanding leaves alone: ~16 messages on
  // an idle machine. With it, only a decode slower than the linger splits them.
  CHECK(many.messages <= 4);

  // One item: nothing else is coming, so it leaves as soon as it is made (a few ms), not
  // after the linger's 1 s (0.5 s allows for a loaded machine).
  const Answered lone = ask(server.port(), 1);
  std::printf("a lone item answered in %.1f ms\n", lone.first_s * 1e3);
  CHECK(lone.ids.size() == 1);
  CHECK(lone.first_s < 0.5);
}
