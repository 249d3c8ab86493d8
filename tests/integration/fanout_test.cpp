// Integration tier: decode once, feed many (issue #12). A job with `readers: K` serves every
// rank's batches to K processes from the same slots; the finished-sample cache serves later
// epochs of a deterministic pipeline without decoding.
#include <catch2/catch.hpp>

#include <csignal>
#include <cstring>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "batch_copy.hpp"
#include "daemon_fixture.hpp"
#include "stoker/proto/control.hpp"
#include "stoker/stoker.hpp"

using namespace stoker::test;
using Json = nlohmann::json;

namespace {


using Seen = BatchCopy;


stoker::ClientOptions options(const std::string& socket, std::uint32_t reader, std::uint64_t epoch = 0,
                              std::uint64_t batch = 0) {
  stoker::ClientOptions o;
  o.socket_path = socket;
  o.reader = reader;
  o.start_epoch = epoch;
  o.start_batch = batch;
  return o;
}


// Every batch of `epochs` epochs, as reader `reader` of rank 0 sees it.
std::vector<Seen> read_epochs(const std::string& socket, const std::string& job, std::uint32_t reader, int epochs) {
  stoker::Client c(job, 0, options(socket, reader));
  std::vector<Seen> out;
  do {
    out.push_back(take_batch(c));
  } while (!(out.back().last && out.back().epoch + 1 == static_cast<std::uint64_t>(epochs)));
  return out;
}

Json stokerctl_status(const std::string& socket) {
  std::string out;
  REQUIRE(run_program({bin("stokerctl"), "status", "--socket", socket}, out) == 0);
  return Json::parse(out);
}

Json job_of(const Json& st, const std::string& name) {
  for (const auto& j : st["jobs"]) {
    if (j["name"] == name) return j;
  }
  FAIL("no job " << name << " in status");
  return {};
}

bool timed_out(stoker::Client& c, int ms) {
  try {
    stoker::Batch b = c.next(ms);
    return false;
  } catch (const stoker::Error& e) {
    return e.status() == STOKER_ERR_TIMEOUT;
  }
}

JobSpec fanout_job(int readers, int prefetch = 3) {
  JobSpec j;
  j.prefetch = prefetch;
  j.extra = "    readers: " + std::to_string(readers) + "\n";
  return j;
}

}  // namespace

TEST_CASE("the readers of a rank get the same batches, bytes and all, decoded once", "[integration][fanout]") {
  TempDir dir;
  const auto socket = (dir.path() / "s.sock").string();
  JobSpec fan = fanout_job(3);
  JobSpec single;  // same seed and pipeline, one reader: the stream fan-out must not change
  single.name = "single";
  Daemon d(write_config(dir.path(), {fan, single}, 2), socket);

  std::vector<std::future<std::vector<Seen>>> readers;
  for (std::uint32_t k = 0; k < 3; ++k) {
    readers.push_back(std::async(std::launch::async, [&, k] { return read_epochs(socket, "demo", k, 2); }));
  }
  std::vector<std::vector<Seen>> got;
  for (auto& f : readers) got.push_back(f.get());
  REQUIRE(got[0].size() == 16);  // 2 epochs of 64 samples in batches of 8
  CHECK(got[1] == got[0]);
  CHECK(got[2] == got[0]);

  const auto alone = read_epochs(socket, "single", 0, 2);
  REQUIRE(alone.size() == got[0].size());
  for (std::size_t i = 0; i < alone.size(); ++i) {
    INFO("batch " << i);
    CHECK(alone[i].ids == got[0][i].ids);
  }
  // Decoded once for the three readers: the job's workers produced each sample once per epoch
  // (plus at most the prefetched batches of a third epoch).
  const Json j = job_of(stokerctl_status(socket), "demo");
  CHECK(j["readers"] == 3);
  CHECK(j["samples_ok"].get<std::uint64_t>() >= 2 * kDemoSamples);
  CHECK(j["samples_ok"].get<std::uint64_t>() <= 2 * kDemoSamples + 3 * 8);
}

TEST_CASE("fan-out readers map their batches read-only and are told the group's size", "[integration][fanout]") {
  TempDir dir;
  const auto socket = (dir.path() / "s.sock").string();
  Daemon d(write_config(dir.path(), {fanout_job(2)}, 2), socket);
  stoker_options o;
  stoker_options_init(&o);
  o.socket_path = socket.c_str();
  o.job = "demo";
  o.reader = 1;
  o.map_writable = 1;  // asked for, and refused for a shared batch
  stoker_client* c = nullptr;
  REQUIRE(stoker_client_open(&o, &c) == STOKER_OK);
  stoker_job_info info;
  stoker_client_info(c, &info);
  CHECK(info.readers == 2);
  CHECK(info.reader == 1);
  CHECK(info.writable == 0);
  stoker_client_close(c);
}

TEST_CASE("a reader that falls behind holds its group back by at most prefetch batches", "[integration][fanout]") {
  TempDir dir;
  const auto socket = (dir.path() / "s.sock").string();
  Daemon d(write_config(dir.path(), {fanout_job(2, 3)}, 2), socket);
  stoker::Client fast("demo", 0, options(socket, 0));
  // Reader 1 has not connected yet: it is expected, so reader 0 gets the 3 prefetched batches
  // and then waits for it.
  for (int i = 0; i < 3; ++i) CHECK(take_batch(fast).index == static_cast<std::uint64_t>(i));
  CHECK(timed_out(fast, 400));

  // Before the slow reader connects, the status names the reader the group waits for.
  Json ring = job_of(stokerctl_status(socket), "demo")["consumers"][0];
  REQUIRE(ring["readers"].size() == 2);
  CHECK(ring["readers"][0]["next"]["batch"] == 3);
  CHECK(ring["readers"][1]["next"]["batch"] == 0);
  CHECK(ring["readers"][1]["behind"] == 3);
  CHECK(ring["readers"][0]["behind"] == 0);

  // Once it connects, its 3 ready batches are announced to it (protocol 2.5) and leased to
  // it until it releases them: the fast reader is still held back.
  stoker::Client slow("demo", 0, options(socket, 1));
  for (int i = 0; i < 100; ++i) {
    ring = job_of(stokerctl_status(socket), "demo")["consumers"][0];
    if (ring["readers"][1]["leased"] == 3) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  CHECK(ring["readers"][1]["leased"] == 3);
  CHECK(timed_out(fast, 200));

  // Each batch the slow reader takes lets the fast one take one more.
  CHECK(take_batch(slow).index == 0);
  CHECK(take_batch(fast).index == 3);
  CHECK(timed_out(fast, 300));
  CHECK(take_batch(slow).index == 1);
  CHECK(take_batch(fast).index == 4);
}

TEST_CASE("a reader that dies is dropped after its leases are reclaimed, and the others keep flowing",
          "[integration][fanout]") {
  TempDir dir;
  const auto socket = (dir.path() / "s.sock").string();
  Daemon d(write_config(dir.path(), {fanout_job(2, 3)}, 2), socket);
  stoker::Client c("demo", 0, options(socket, 0));
  CHECK(take_batch(c).index == 0);
  // Reader 1 is a real process that takes a batch and holds it, then is SIGKILLed.
  const int pid = start_program({bin("stokerctl"), "consume", "--socket", socket, "--job", "demo", "--reader", "1",
                                 "--batches", "100", "--hold-ms", "60000"},
                                dir.path() / "reader1.log");
  bool holding = false;
  for (int i = 0; i < 200 && !holding; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    const Json ring = job_of(stokerctl_status(socket), "demo")["consumers"][0];
    // It holds a batch (its announced ones are leased to it too: protocol 2.5).
    holding = ring["readers"][1]["connected"] == true && ring["readers"][1]["leased"] >= 1;
  }
  REQUIRE(holding);
  ::kill(pid, SIGKILL);
  wait_program(pid, 10);

  // Reader 0 reads on to the end of the second epoch: nothing waits for the dead reader.
  std::uint64_t batches = 1;
  for (;;) {
    const Seen s = take_batch(c, 10000);
    ++batches;
    if (s.epoch == 1 && s.index == 7) break;
  }
  CHECK(batches == 16);
  const Json ring = job_of(stokerctl_status(socket), "demo")["consumers"][0];
  CHECK(ring["readers"][1]["connected"] == false);
  CHECK(ring["readers"][1]["leased"] == 0);
  CHECK_THAT(d.log(), Catch::Contains("rank 0 reader 1 disconnected"));
}

TEST_CASE("readers of a rank join together: a reader out of step is refused with both positions",
          "[integration][fanout]") {
  TempDir dir;
  const auto socket = (dir.path() / "s.sock").string();
  Daemon d(write_config(dir.path(), {fanout_job(2, 2)}, 2), socket);
  {
    stoker::Client a("demo", 0, options(socket, 0));
    std::vector<Seen> b_seen;
    {
      stoker::Client b("demo", 0, options(socket, 1));
      for (int i = 0; i < 2; ++i) {
        take_batch(a);
        b_seen.push_back(take_batch(b));
      }
    }  // reader 1 leaves: dropped; reader 0 goes on alone
    for (int i = 2; i < 6; ++i) CHECK(take_batch(a).index == static_cast<std::uint64_t>(i));

    // Reader 1 asking for batch 2 again: the rank is past it.
    try {
      stoker::Client late("demo", 0, options(socket, 1, 0, 2));
      FAIL("an out-of-step reader was accepted");
    } catch (const stoker::Error& e) {
      CHECK(e.status() == STOKER_ERR_REFUSED);
      CHECK_THAT(std::string(e.what()), Catch::Contains("asks for epoch 0 batch 2") &&
                                            Catch::Contains("epoch 0 batch 6") && Catch::Contains("together"));
    }
    // At the group's position it joins and gets the same batch as reader 0.
    stoker::Client rejoin("demo", 0, options(socket, 1, 0, 6));
    const Seen r = take_batch(rejoin);
    const Seen s = take_batch(a);
    CHECK(r.index == 6);
    CHECK(r == s);
  }
  // Both gone: the group restarts wherever its first reader asks, and the second is awaited.
  stoker::Client a("demo", 0, options(socket, 0, 1, 3));
  stoker::Client b("demo", 0, options(socket, 1, 1, 3));
  const Seen x = take_batch(a), y = take_batch(b);
  CHECK(x.epoch == 1);
  CHECK(x.index == 3);
  CHECK(x == y);

  std::string out;
  CHECK(run_program({bin("stokerctl"), "consume", "--socket", socket, "--job", "demo", "--reader", "2", "--batches", "1"},
                    out) != 0);
  CHECK_THAT(out, Catch::Contains("reader 2 is outside job 'demo' (readers: 2, so 0..1)"));
}

TEST_CASE("the finished-sample cache serves later epochs of a deterministic pipeline without decoding",
          "[integration][cache]") {
  TempDir dir;
  const auto socket = (dir.path() / "s.sock").string();
  const std::uint64_t sample_bytes = 3 * 32 * 32;
  JobSpec all, some, plain;
  for (JobSpec* j : {&all, &some, &plain}) {
    j->random_crop = false;  // resize + center crop: the same pixels every epoch
    j->shuffle = true;
  }
  all.name = "all";
  all.extra = "    cache: {bytes: 1MiB}\n";  // the 64 samples take 192 KiB
  some.name = "some";
  some.extra = "    cache: {bytes: " + std::to_string(20 * sample_bytes + 100) + "}\n";
  plain.name = "plain";
  Daemon d(write_config(dir.path(), {all, some, plain}, 2), socket);

  const auto cached = read_epochs(socket, "all", 0, 3);
  const auto partly = read_epochs(socket, "some", 0, 3);
  const auto decoded = read_epochs(socket, "plain", 0, 3);
  REQUIRE(cached.size() == 24);
  // Same batches and the same bytes as decoding every time.
  CHECK(cached == decoded);
  CHECK(partly == decoded);

  const Json st = stokerctl_status(socket);
  const Json ca = job_of(st, "all")["cache"];
  CHECK(ca["entries"] == kDemoSamples);
  CHECK(ca["used_bytes"] == kDemoSamples * sample_bytes);
  // Epoch 0 misses; epochs 1 and 2 hit, except a sample an early batch of epoch 1 asked for
  // while epoch 0's last batches were still being decoded (prefetch: 3 batches of 8).
  CHECK(ca["misses"].get<std::uint64_t>() >= kDemoSamples);
  CHECK(ca["misses"].get<std::uint64_t>() <= kDemoSamples + 24);
  CHECK(ca["hits"].get<std::uint64_t>() >= 2 * kDemoSamples - 24);
  CHECK(job_of(st, "all")["samples_ok"].get<std::uint64_t>() >= 3 * kDemoSamples);

  // The budget holds 20 samples: they are admitted and kept (nothing evicted), so each later
  // epoch hits exactly those 20.
  const Json cs = job_of(st, "some")["cache"];
  CHECK(cs["entries"] == 20);
  CHECK(cs["used_bytes"].get<std::uint64_t>() <= cs["budget_bytes"].get<std::uint64_t>());
  const std::uint64_t lookups = cs["hits"].get<std::uint64_t>() + cs["misses"].get<std::uint64_t>();
  const std::uint64_t epochs_begun = (lookups + kDemoSamples - 1) / kDemoSamples;  // prefetch starts one more
  CHECK(cs["hits"].get<std::uint64_t>() >= 2 * 20 - 8);
  CHECK(cs["hits"].get<std::uint64_t>() <= (epochs_begun - 1) * 20);
  CHECK_FALSE(job_of(st, "plain").contains("cache"));
}

TEST_CASE("a reader releasing a slot only another reader holds is evicted, and the others keep flowing",
          "[integration][fanout][fault]") {
  TempDir dir;
  const auto socket = (dir.path() / "s.sock").string();
  Daemon d(write_config(dir.path(), {fanout_job(2, 3)}, 2), socket);
  stoker::Client good("demo", 0, options(socket, 0));
  stoker::Batch held = good.next(30000);  // reader 0 holds batch 0 (generation 1 of its slot)

  // Reader 1, hand-written: a valid hello, then a release of the slot reader 0 holds, with its
  // real generation: valid for reader 0, not for reader 1.
  const int fd = ::socket(AF_UNIX, SOCK_SEQPACKET, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, socket.c_str(), sizeof addr.sun_path - 1);
  REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  auto hello = stoker::proto::make_message<stoker::proto::HelloMsg>(stoker::proto::MsgType::kHello);
  stoker::proto::copy_cstr(hello.job, "demo");
  hello.reader = 1;
  REQUIRE(::send(fd, &hello, sizeof hello, 0) == static_cast<ssize_t>(sizeof hello));
  char buf[1024];
  char control[CMSG_SPACE(sizeof(int))];
  iovec iov{buf, sizeof buf};
  msghdr mh{};
  mh.msg_iov = &iov;
  mh.msg_iovlen = 1;
  mh.msg_control = control;
  mh.msg_controllen = sizeof control;
  REQUIRE(::recvmsg(fd, &mh, 0) == static_cast<ssize_t>(sizeof(stoker::proto::WelcomeMsg)));
  // The slot reader 0 holds, as the segment's slot headers show it (the only LEASED one).
  cmsghdr* c = CMSG_FIRSTHDR(&mh);
  REQUIRE((c != nullptr && c->cmsg_type == SCM_RIGHTS));
  int seg = -1;
  std::memcpy(&seg, CMSG_DATA(c), sizeof seg);
  stoker::proto::WelcomeMsg w;
  std::memcpy(&w, buf, sizeof w);
  void* base = ::mmap(nullptr, w.segment_size, PROT_READ, MAP_SHARED, seg, 0);
  REQUIRE(base != MAP_FAILED);
  const auto* h = static_cast<const stoker::proto::SegmentHeader*>(base);
  const auto* ring = reinterpret_cast<const stoker::proto::RingHeader*>(static_cast<const char*>(base) + h->ring_table_offset);
  std::uint32_t leased_slot = 99, generation = 0;
  for (std::uint32_t slot = 0; slot < ring->slot_count; ++slot) {
    const auto* sh = reinterpret_cast<const stoker::proto::SlotHeader*>(static_cast<const char*>(base) +
                                                                         ring->first_slot_offset + slot * h->slot_stride);
    if (sh->state == static_cast<std::uint32_t>(stoker::proto::SlotState::kLeased)) {
      leased_slot = slot;
      generation = sh->generation;
    }
  }
  ::munmap(base, w.segment_size);
  ::close(seg);
  REQUIRE(leased_slot < 3);
  auto rel = stoker::proto::make_message<stoker::proto::ReleaseMsg>(stoker::proto::MsgType::kRelease);
  rel.slot = leased_slot;
  rel.generation = generation;
  REQUIRE(::send(fd, &rel, sizeof rel, MSG_NOSIGNAL) == static_cast<ssize_t>(sizeof rel));
  stoker::proto::ErrorMsg err{};
  REQUIRE(::recv(fd, &err, sizeof err, 0) == static_cast<ssize_t>(sizeof err));
  CHECK(err.code == static_cast<std::int32_t>(stoker::proto::ErrorCode::kBadRelease));
  ::close(fd);

  // Reader 0's batch is intact and its own; it reads on to the end of the epoch.
  CHECK(held.index() == 0);
  held = stoker::Batch();
  std::uint64_t last = 0;
  for (;;) {
    const Seen s = take_batch(good, 10000);
    last = s.index;
    if (s.last) break;
  }
  CHECK(last == 7);
}
