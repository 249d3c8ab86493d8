// Integration tier, security (docs/SECURITY.md, remote workers; issue #34 A5-A7): a GPU node's
// stokerd against a worker that lies. The worker here is this test's own gRPC server speaking
// the worker protocol: it makes every sample honestly with the product's WorkerSession, then
// spoils its answer on purpose (no lying mode exists in the product). Each case asserts the
// batches equal a local-only run's of the same seed byte for byte, the lie is counted, nothing
// is quarantined; the slow worker's case prints the throughput against local-only.
#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <filesystem>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "daemon_fixture.hpp"
#include "image/sample_processor.hpp"
#include "remote/worker_session.hpp"
#include "status_json.hpp"
#include "stoker/remote/worker.grpc.pb.h"
#include "stoker/stoker.hpp"

using namespace stoker::test;
namespace v1 = stoker::remote::v1;

namespace {

using LieClock = std::chrono::steady_clock;

enum class Lie {
  kBadFile,     // every sample "corrupt" (A5)
  kSwapIds,     // each batch's ids rotated among its results (A6: the echo check)
  kSwapPixels,  // each batch's pixels rotated, ids and echoes kept (A6: remote.verify)
  kFlipPixels,  // one byte of every sample flipped (A6: remote.verify)
  kLate,        // every answer 2.5 s late (A7: hedging)
  kOtherDecoders,  // honest answers, but its Open names other decoder library versions
  kTruncatedPixels,  // a Reply whose Result's pixel field claims the whole sample, holds half (#36)
};

std::string varint(std::uint64_t v) {
  std::string s;
  do {
    s.push_back(static_cast<char>((v & 0x7f) | (v > 0x7f ? 0x80 : 0)));
    v >>= 7;
  } while (v != 0);
  return s;
}

// The batch's first result written by hand, its pixel field claiming all of the sample's bytes
// but carrying half: the Reply's own framing holds (protobuf sends the batch as an unknown
// field 3, which is the ResultBatch field on the wire), the Result inside it does not.
v1::Reply truncated_pixels(const v1::ResultBatch& rs) {
  v1::Reply reply;
  if (rs.results_size() == 0) return reply;
  const v1::Result& r = rs.results(0);
  const std::string result = "\x08" + varint(r.id()) + "\x50" + varint(r.epoch()) + "\x58" + varint(r.draw()) + "\x32" +
                             varint(r.pixels().size()) + r.pixels().substr(0, r.pixels().size() / 2);
  reply.GetReflection()->MutableUnknownFields(&reply)->AddLengthDelimited(3, "\x0a" + varint(result.size()) + result);
  return reply;
}

// A worker on 127.0.0.1 (any port) that answers every item, then lies as `lie` says.
class LyingWorker final : public v1::Worker::Service {
 public:
  LyingWorker(Lie lie, const std::filesystem::path& root) : lie_(lie) {
    settings_.allow_roots = {std::filesystem::canonical(root)};
    settings_.threads = 2;
    grpc::ServerBuilder b;
    b.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
    b.RegisterService(this);
    server_ = b.BuildAndStart();
    REQUIRE(server_ != nullptr);
    REQUIRE(port_ > 0);
  }
  ~LyingWorker() override { server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1)); }
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }

  grpc::Status Work(grpc::ServerContext*, grpc::ServerReaderWriter<v1::Reply, v1::Request>* stream) override {
    stoker::remote::WorkerSession session(settings_);
    v1::Request req;
    if (!stream->Read(&req) || !req.has_open()) return grpc::Status::OK;
    v1::Reply open;
    *open.mutable_open() = session.open(req.open());
    if (lie_ == Lie::kOtherDecoders) {
      open.mutable_open()->set_decoder_versions("jpeg-turbo 1.5.2 (jpeg 62), png 1.6.34, webp 0.6.1, tiff 4.0.9");
    }
    stream->Write(open);
    if (!open.open().accepted()) return grpc::Status::OK;
    stoker::image::SampleProcessor processor(session.pipeline());
    std::vector<std::uint8_t> bytes;
    // kLate: answers leave from a second thread once due (reads go on meanwhile).
    std::mutex mu;
    std::condition_variable cv;
    std::deque<std::pair<LieClock::time_point, v1::Reply>> due;
    bool done = false;
    std::thread writer([&] {
      std::unique_lock lock(mu);
      for (;;) {
        if (done) return;
        if (due.empty()) {
          cv.wait(lock);
          continue;
        }
        if (LieClock::now() < due.front().first) {
          cv.wait_until(lock, due.front().first);
          continue;
        }
        v1::Reply r = std::move(due.front().second);
        due.pop_front();
        lock.unlock();
        stream->Write(r);
        lock.lock();
      }
    });
    while (stream->Read(&req)) {
      std::vector<const v1::Item*> items;
      if (req.has_item()) items.push_back(&req.item());
      for (const v1::Item& it : req.items().items()) items.push_back(&it);
      v1::Reply reply;
      v1::ResultBatch& rs = *reply.mutable_results();
      for (const v1::Item* it : items) session.process(*it, processor, bytes, *rs.add_results());
      spoil(rs);
      if (lie_ == Lie::kTruncatedPixels) reply = truncated_pixels(rs);
      if (lie_ == Lie::kLate) {
        std::lock_guard lock(mu);
        due.emplace_back(LieClock::now() + std::chrono::milliseconds(2500), std::move(reply));
        cv.notify_all();
      } else {
        std::lock_guard lock(mu);  // one writer at a time (the thread above writes nothing here)
        stream->Write(reply);
      }
    }
    {
      std::lock_guard lock(mu);
      done = true;
    }
    cv.notify_all();
    writer.join();
    return grpc::Status::OK;
  }

 private:
  void spoil(v1::ResultBatch& rs) const {
    const int n = rs.results_size();
    switch (lie_) {
      case Lie::kBadFile:
        for (v1::Result& r : *rs.mutable_results()) {
          r.set_error(static_cast<std::uint32_t>(stoker::image::SampleErrorKind::kCorrupt));
          r.set_reason("Not a JPEG file (says this worker)");
          r.clear_pixels();
        }
        break;
      case Lie::kSwapIds:
        if (n >= 2) {
          const std::uint64_t first = rs.results(0).id();
          for (int i = 0; i + 1 < n; ++i) rs.mutable_results(i)->set_id(rs.results(i + 1).id());
          rs.mutable_results(n - 1)->set_id(first);
        }
        break;
      case Lie::kSwapPixels:
        if (n >= 2) {
          std::string first = rs.results(0).pixels();
          for (int i = 0; i + 1 < n; ++i) *rs.mutable_results(i)->mutable_pixels() = rs.results(i + 1).pixels();
          *rs.mutable_results(n - 1)->mutable_pixels() = std::move(first);
        }
        break;
      case Lie::kFlipPixels:
        for (v1::Result& r : *rs.mutable_results()) {
          if (!r.pixels().empty()) (*r.mutable_pixels())[0] = static_cast<char>(r.pixels()[0] ^ 0x01);
        }
        break;
      case Lie::kLate:
      case Lie::kOtherDecoders:
      case Lie::kTruncatedPixels:
        break;
    }
  }

  Lie lie_;
  stoker::remote::WorkerSettings settings_;
  int port_ = 0;
  std::unique_ptr<grpc::Server> server_;
};

std::filesystem::path demo_root() { return std::filesystem::path(STOKER_TEST_DATA_DIR) / "demo"; }

// `batches` batches of rank 0 of job demo, from epoch 0.
std::vector<BatchCopy> take_batches(const std::string& socket, int batches) {
  stoker::Client c("demo", 0, at(socket));
  std::vector<BatchCopy> out;
  for (int i = 0; i < batches; ++i) out.push_back(take_batch(c));
  return out;
}

struct Node {
  TempDir dir;
  std::string socket;
  std::unique_ptr<Daemon> daemon;
  // remote_yaml: the job's `remote:` value ("" for a local-only node).
  Node(const std::string& remote_yaml, int workers = 1) {
    JobSpec j;
    j.extra = remote_yaml.empty() ? "" : "    remote: " + remote_yaml + "\n";
    socket = (dir.path() / "s.sock").string();
    daemon = std::make_unique<Daemon>(write_config(dir.path(), {j}, workers), socket);
  }
  Json link() const { return status_json(socket)["jobs"][0]["remote"][0]; }
  Json job() const { return status_json(socket)["jobs"][0]; }
  void wait_connected() const {
    const auto until = LieClock::now() + std::chrono::seconds(20);
    while (!link()["connected"].get<bool>()) {
      REQUIRE(LieClock::now() < until);
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
};

void require_no_errors(const Json& job) {
  INFO(job.dump());
  CHECK(job["quarantined"].get<std::uint64_t>() == 0);
  for (const auto& [kind, count] : job["errors"].items()) CHECK(count.get<std::uint64_t>() == 0);
}

constexpr int kBatches = 24;  // three epochs of the demo set (64 samples, batches of 8)

// What a lying worker left behind on a node that uses it (`remote_yaml`), after the node's
// batches were checked equal to a local-only run's and no error or quarantine was counted.
struct AfterLie {
  Json job;         // the lying node's job status
  std::string log;  // its stokerd's log
};
AfterLie serve_beside_a_lie(Lie lie, const std::string& remote_yaml) {
  LyingWorker w(lie, demo_root());
  Node base("");
  Node rem("{workers: [\"" + w.address() + "\"], " + remote_yaml + "}");
  const auto want = take_batches(base.socket, kBatches);
  rem.wait_connected();
  CHECK(take_batches(rem.socket, kBatches) == want);
  AfterLie after{rem.job(), rem.daemon->log()};
  require_no_errors(after.job);
  return after;
}

}  // namespace

TEST_CASE("a worker calling every file bad quarantines nothing: the node makes them itself",
          "[integration][remote][security]") {
  const AfterLie after = serve_beside_a_lie(Lie::kBadFile, "local: false, verify: 0");
  const Json& job = after.job;
  INFO(job.dump());
  CHECK(job["remote"][0]["mismatches"].get<std::uint64_t>() > 0);
  CHECK(after.log.find("which is made fine here") != std::string::npos);
}

TEST_CASE("a worker answering under swapped ids is dropped and its items made again",
          "[integration][remote][security]") {
  const AfterLie after = serve_beside_a_lie(Lie::kSwapIds, "local: false, verify: 0");
  const Json& job = after.job;
  INFO(job.dump());
  CHECK(job["remote"][0]["errors"].get<std::uint64_t>() > 0);
  CHECK(job["remote"][0]["reissued"].get<std::uint64_t>() > 0);
  CHECK(after.log.find("sent as epoch") != std::string::npos);
}

// Issue #36: the node parses a Reply by hand in gRPC's slices (reply_view.hpp); a message
// whose pixel field runs past its Result is refused before a byte of it is used.
TEST_CASE("a worker sending a pixel field longer than its Result is dropped as malformed and its items made again",
          "[integration][remote][security]") {
  const AfterLie after = serve_beside_a_lie(Lie::kTruncatedPixels, "local: false, verify: 0");
  const Json& job = after.job;
  INFO(job.dump());
  CHECK(job["remote"][0]["errors"].get<std::uint64_t>() > 0);
  CHECK(job["remote"][0]["samples"].get<std::uint64_t>() == 0);
  CHECK(after.log.find("sent a malformed Reply: Result field 6 longer than its message") != std::string::npos);
}

TEST_CASE("remote.verify finds a worker's swapped or flipped pixels and serves this node's",
          "[integration][remote][security]") {
  const Lie lie = GENERATE(Lie::kSwapPixels, Lie::kFlipPixels);
  INFO((lie == Lie::kSwapPixels ? "swapped pixels" : "flipped pixels"));
  const AfterLie after = serve_beside_a_lie(lie, "local: false, verify: 1");
  const Json& job = after.job;
  INFO(job.dump());
  CHECK(job["remote"][0]["mismatches"].get<std::uint64_t>() > 0);
  CHECK(job["remote"][0]["errors"].get<std::uint64_t>() > 0);
  CHECK(after.log.find("that differ from this node's") != std::string::npos);
}

TEST_CASE("a worker answering 2.5 s late is hedged: the node keeps most of its local throughput",
          "[integration][remote][security]") {
  LyingWorker w(Lie::kLate, demo_root());
  // Fifty epochs (about a second locally, so the figure is not one hedge's 0.5 s alone);
  // STOKER_TEST_SLOW_BATCHES=N measures a longer run.
  const char* many_env = std::getenv("STOKER_TEST_SLOW_BATCHES");
  const int kMany = many_env != nullptr ? std::max(8, std::atoi(many_env)) : 400;
  Node base("");
  Node rem("{workers: [\"" + w.address() + "\"], deadline_s: 3, verify: 0}");
  auto t0 = LieClock::now();
  const auto want = take_batches(base.socket, kMany);
  const double local_s = std::chrono::duration<double>(LieClock::now() - t0).count();
  rem.wait_connected();
  t0 = LieClock::now();
  const auto got = take_batches(rem.socket, kMany);
  const double remote_s = std::chrono::duration<double>(LieClock::now() - t0).count();
  CHECK(got == want);
  const Json job = rem.job();
  INFO(job.dump());
  require_no_errors(job);
  const double samples = kMany * 8;
  const std::uint64_t hedged = job["remote"][0].value("hedged", std::uint64_t{0});
  std::printf("slow worker (2.5 s late, deadline_s 3): local-only %.0f samples/s (%.2f s), with the worker "
              "%.0f samples/s (%.2f s): %.0f%% of local-only; hedged %llu\n",
              samples / local_s, local_s, samples / remote_s, remote_s, 100 * local_s / remote_s,
              static_cast<unsigned long long>(hedged));
  CHECK(hedged > 0);
  // Without hedging the first window the worker holds stalls its batches 2.5 s, and every
  // window after it; with it, a stall is about 0.5 s per 2.5 s. Loose: a noisy CI machine.
  CHECK(remote_s < 2 * local_s + 1.5);
}

TEST_CASE("a worker naming other decoder versions is refused once, logged with both, and the node serves locally",
          "[integration][remote][security]") {
  LyingWorker w(Lie::kOtherDecoders, demo_root());
  Node base("");
  // local: false would hand every item to the worker were it taken; refused, the local pool serves.
  Node rem("{workers: [\"" + w.address() + "\"], local: false, verify: 0}");
  const auto want = take_batches(base.socket, kBatches);
  const auto until = LieClock::now() + std::chrono::seconds(20);
  while (rem.link()["errors"].get<std::uint64_t>() == 0) {
    REQUIRE(LieClock::now() < until);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  CHECK(take_batches(rem.socket, kBatches) == want);
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));  // retries (backoff 0.2 s, doubling)
  const Json job = rem.job();
  require_no_errors(job);
  INFO(job.dump());
  const Json link = job["remote"][0];
  CHECK_FALSE(link["connected"].get<bool>());
  CHECK(link["samples"].get<std::uint64_t>() == 0);
  CHECK(link["errors"].get<std::uint64_t>() > 0);
  const std::string why = link["last_error"].get<std::string>();
  CHECK(why.find("decoder versions differ") != std::string::npos);
  CHECK(why.find("jpeg-turbo 1.5.2 (jpeg 62), png 1.6.34, webp 0.6.1, tiff 4.0.9") != std::string::npos);
  const std::string log = rem.daemon->log();
  const std::size_t first = log.find("decoder versions differ");
  REQUIRE(first != std::string::npos);
  CHECK(log.find("decoder versions differ", first + 1) == std::string::npos);  // once, however often retried
}
