// gpu tier: DeviceExporter (this process, the daemon's role) -> DeviceImporter (a separate
// process, stoker_gpu_ipc_peer, the trainer's role) on one GPU, through CUDA IPC handles in a
// SlotHeader: device bytes equal the host batch, normalization on the device, handle caching,
// a daemon-generation change, and no device memory left behind.
#include <catch2/catch.hpp>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <random>
#include <spawn.h>
#include <string>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cuda/device_exporter.hpp"
#include "cuda/device_importer.hpp"
#include "gpu_test_support.hpp"
#include "ipc_peer_protocol.hpp"

extern char** environ;

using namespace stoker;
using gputest::PeerOp;
using gputest::PeerReply;
using gputest::PeerRequest;

namespace {

// A memfd standing in for the job's shared-memory segment (shmem pages, MAP_SHARED).
struct HostSegment {
  int fd = -1;
  std::size_t bytes = 0;
  std::uint8_t* base = nullptr;

  explicit HostSegment(std::size_t n) : bytes(n) {
    fd = memfd_create("stoker-gpu-test", 0);  // inherited by the peer on purpose
    REQUIRE(fd >= 0);
    REQUIRE(ftruncate(fd, static_cast<off_t>(n)) == 0);
    void* p = mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    REQUIRE(p != MAP_FAILED);
    base = static_cast<std::uint8_t*>(p);
  }
  ~HostSegment() {
    munmap(base, bytes);
    close(fd);
  }
};

// The trainer process.
class Peer {
 public:
  Peer(const HostSegment& seg) {
    int sv[2];
    REQUIRE(socketpair(AF_UNIX, SOCK_SEQPACKET, 0, sv) == 0);
    fcntl(sv[0], F_SETFD, FD_CLOEXEC);
    sock_ = sv[0];
    const std::string exe = std::string(STOKER_BIN_DIR) + "/stoker_gpu_ipc_peer";
    const std::string a1 = std::to_string(sv[1]), a2 = std::to_string(seg.fd), a3 = std::to_string(seg.bytes);
    char* argv[] = {const_cast<char*>(exe.c_str()), const_cast<char*>(a1.c_str()), const_cast<char*>(a2.c_str()),
                    const_cast<char*>(a3.c_str()), nullptr};
    const int rc = posix_spawn(&pid_, exe.c_str(), nullptr, nullptr, argv, environ);
    close(sv[1]);
    INFO("spawning " << exe);
    REQUIRE(rc == 0);
    REQUIRE(recv(sock_, &hello, sizeof hello, 0) == static_cast<ssize_t>(sizeof hello));
    INFO("peer: " << hello.message);
    REQUIRE(hello.ok == 1);
  }
  ~Peer() { quit(); }

  PeerReply check(const PeerRequest& r) {
    REQUIRE(send(sock_, &r, sizeof r, 0) == static_cast<ssize_t>(sizeof r));
    PeerReply reply{};
    REQUIRE(recv(sock_, &reply, sizeof reply, 0) == static_cast<ssize_t>(sizeof reply));
    return reply;
  }

  // Returns the peer's exit status (0: it closed its handles and exited cleanly).
  int quit() {
    if (pid_ <= 0) return status_;
    PeerRequest r{};
    r.op = PeerOp::kQuit;
    send(sock_, &r, sizeof r, 0);
    close(sock_);
    int st = 0;
    while (waitpid(pid_, &st, 0) < 0 && errno == EINTR) {
    }
    pid_ = -1;
    status_ = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    return status_;
  }

  gputest::PeerHello hello{};

 private:
  int sock_ = -1;
  pid_t pid_ = -1;
  int status_ = -1;
};

std::unique_ptr<cuda::DeviceExporter> make_exporter() {
  std::string why;
  auto e = cuda::DeviceExporter::create(why);
  INFO(why);
  REQUIRE(e != nullptr);
  return e;
}

PeerRequest request_for(const proto::SlotHeader& h, std::uint64_t generation, std::size_t host_offset,
                        std::size_t host_bytes, std::uint32_t count, const cuda::DeviceOutputSpec& spec) {
  PeerRequest r{};
  r.op = PeerOp::kCheck;
  r.count = count;
  r.header = h;
  r.generation = generation;
  r.host_offset = host_offset;
  r.host_bytes = host_bytes;
  r.normalize = spec.normalize ? 1 : 0;
  r.out_half = spec.out_dtype == proto::DType::kFloat16 ? 1 : 0;
  r.nhwc = spec.layout == proto::Layout::kNHWC ? 1 : 0;
  r.channels = spec.channels;
  r.height = spec.height;
  r.width = spec.width;
  for (int i = 0; i < 4; ++i) {
    r.mean[i] = spec.mean[i];
    r.stddev[i] = spec.stddev[i];
  }
  return r;
}

void fill_random(std::uint8_t* p, std::size_t n, std::mt19937& rng) {
  for (std::size_t i = 0; i < n; ++i) p[i] = static_cast<std::uint8_t>(rng() >> 24);
}

}  // namespace

TEST_CASE("a batch published by the exporter is read by another process on the same GPU", "[gpu][ipc]") {
  gputest::skip_without_device();
  const unsigned seed = std::random_device{}();
  std::printf("seed %u\n", seed);
  std::mt19937 rng(seed);

  auto exporter = make_exporter();
  // Three slots' worth of host batches, page-aligned like the segment's payloads.
  const std::size_t raw_bytes = 8ull * 3 * 224 * 224;  // 8 uint8 ImageNet samples
  const std::size_t stride = proto::align_up(raw_bytes, proto::kPayloadAlign);
  HostSegment seg(3 * stride);
  fill_random(seg.base, seg.bytes, rng);
  std::string why;
  REQUIRE(exporter->register_host(seg.base, seg.bytes, why));

  Peer peer(seg);
  const int dev = exporter->find_device(peer.hello.uuid, why);
  INFO(why);
  REQUIRE(dev >= 0);
  std::printf("peer's GPU: %s (daemon ordinal %d)\n", exporter->describe_device(dev).c_str(), dev);

  const cuda::RingKey ring{2, 1};
  const std::size_t slot_bytes = raw_bytes * 4;  // room for float32 output
  REQUIRE(exporter->allocate_ring(ring, dev, slot_bytes, 3, why));
  CHECK(exporter->device_bytes_allocated() >= 3 * slot_bytes);
  const std::uint64_t gen = 0x5eed;

  proto::SlotHeader h{};
  cuda::DeviceOutputSpec raw;  // verbatim copy

  SECTION("raw bytes, normalized float32 NCHW, float16 NHWC; cached handles; new generation") {
    // Slot 1: verbatim. The header goes out while the copy may still be in flight: the peer's
    // stream must wait on the slot's event, not on luck.
    REQUIRE(exporter->copy_and_publish(ring, 1, seg.base + stride, raw_bytes, 8, raw, &h, why));
    CHECK(h.device_bytes == raw_bytes);
    CHECK(h.device_offset % 256 == 0);
    PeerReply r = peer.check(request_for(h, gen, stride, raw_bytes, 8, raw));
    INFO(r.message);
    CHECK(r.ok == 1);

    // Slot 2: uint8 over PCIe, float32 NCHW on the device, odd geometry.
    cuda::DeviceOutputSpec f32;
    f32.normalize = true;
    f32.out_dtype = proto::DType::kFloat32;
    f32.layout = proto::Layout::kNCHW;
    f32.height = 37;
    f32.width = 53;
    f32.mean = {0.485f, 0.456f, 0.406f, 0};
    f32.stddev = {0.229f, 0.224f, 0.225f, 1};
    const std::size_t small = 5ull * 3 * 37 * 53;
    REQUIRE(exporter->copy_and_publish(ring, 2, seg.base + 2 * stride, small, 5, f32, &h, why));
    CHECK(h.device_bytes == small * 4);
    r = peer.check(request_for(h, gen, 2 * stride, small, 5, f32));
    INFO(r.message);
    CHECK(r.ok == 1);
    std::printf("device normalize float32 NCHW through IPC: max abs error %.3g\n", r.max_error);

    // Slot 0: float16 NHWC, full ImageNet batch.
    cuda::DeviceOutputSpec f16 = f32;
    f16.out_dtype = proto::DType::kFloat16;
    f16.layout = proto::Layout::kNHWC;
    f16.height = f16.width = 224;
    REQUIRE(exporter->copy_and_publish(ring, 0, seg.base, raw_bytes, 8, f16, &h, why));
    r = peer.check(request_for(h, gen, 0, raw_bytes, 8, f16));
    INFO(r.message);
    CHECK(r.ok == 1);
    std::printf("device normalize float16 NHWC through IPC: max abs error %.3g\n", r.max_error);
    CHECK(r.open_memory_handles == 1);  // one allocation per ring, opened once
    CHECK(r.open_event_handles == 3);   // one event per slot

    // Slot 1 again with new host bytes (after its previous copy finished reading them).
    REQUIRE(exporter->wait_copied(ring, 1, why));
    fill_random(seg.base + stride, raw_bytes, rng);
    REQUIRE(exporter->copy_and_publish(ring, 1, seg.base + stride, raw_bytes, 8, raw, &h, why));
    r = peer.check(request_for(h, gen, stride, raw_bytes, 8, raw));
    INFO(r.message);
    CHECK(r.ok == 1);
    CHECK(r.open_memory_handles == 1);  // served from the cache
    CHECK(r.open_event_handles == 3);

    // A restarted daemon (new generation): the cache is dropped and the handles reopened.
    r = peer.check(request_for(h, gen + 1, stride, raw_bytes, 8, raw));
    INFO(r.message);
    CHECK(r.ok == 1);
    CHECK(r.open_memory_handles == 1);
    CHECK(r.open_event_handles == 1);
  }

  SECTION("a batch larger than the ring's slots is refused with a reason") {
    cuda::DeviceOutputSpec f32;
    f32.normalize = true;
    f32.height = f32.width = 224;
    // 8 samples fit as float32; the host range of 2 slots as raw bytes does not fit a slot.
    CHECK_FALSE(exporter->copy_and_publish(ring, 0, seg.base, slot_bytes + 1, 8, raw, &h, why));
    CHECK_THAT(why, Catch::Contains("does not fit"));
    CHECK_FALSE(exporter->copy_and_publish(ring, 3, seg.base, 16, 1, raw, &h, why));  // no slot 3
    CHECK_FALSE(exporter->copy_and_publish(ring, 0, seg.base, raw_bytes - 1, 8, f32, &h, why));
    CHECK_THAT(why, Catch::Contains("not 8 uint8 samples"));
  }

  CHECK(peer.quit() == 0);
  exporter->free_ring(ring);
  exporter->free_ring(ring);  // idempotent
  CHECK(exporter->device_bytes_allocated() == 0);
  exporter->unregister_host(seg.base);
}

TEST_CASE("GPUs are found by UUID or PCI bus id and never by ordinal and an unknown one is refused clearly", "[gpu][ipc]") {
  gputest::skip_without_device();
  auto exporter = make_exporter();
  std::string why;
  std::uint8_t uuid[16];
  REQUIRE(cuda::DeviceImporter::device_uuid(0, uuid, why));
  CHECK(exporter->find_device(uuid, why) == 0);
  std::uint8_t bogus[16] = {0xde, 0xad, 0xbe, 0xef};
  CHECK(exporter->find_device(bogus, why) == -1);
  CHECK_THAT(why, Catch::Contains("GPU-deadbeef-0000") && Catch::Contains("not visible to stokerd"));
  const std::string desc = exporter->describe_device(0);
  std::printf("device 0: %s\n", desc.c_str());
  const auto pci = desc.substr(desc.rfind("PCI ") + 4);
  CHECK(exporter->find_device_by_pci_bus_id(pci, why) == 0);
  CHECK(exporter->find_device_by_pci_bus_id("0000:ff:1f.7", why) == -1);
  CHECK_THAT(why, Catch::Contains("0000:ff:1f.7"));
}

TEST_CASE("device memory of departed consumers is returned (no leak over many connect/disconnect cycles)",
          "[gpu][ipc]") {
  gputest::skip_without_device();
  std::string why;
  const std::size_t before = gputest::device_free_bytes(0);
  {
    auto exporter = make_exporter();
    HostSegment seg(1 << 22);
    REQUIRE(exporter->register_host(seg.base, seg.bytes, why));
    cuda::DeviceOutputSpec raw;
    proto::SlotHeader h{};
    for (int i = 0; i < 20; ++i) {
      const cuda::RingKey ring{0, static_cast<std::uint32_t>(i % 3)};
      REQUIRE(exporter->allocate_ring(ring, 0, 64 << 20, 4, why));  // 256 MiB per ring
      REQUIRE(exporter->copy_and_publish(ring, i % 4, seg.base, seg.bytes, 1, raw, &h, why));
      exporter->free_ring(ring);
    }
    CHECK(exporter->device_bytes_allocated() == 0);
    // Rings still allocated when the exporter goes away (daemon stopping) are freed too.
    REQUIRE(exporter->allocate_ring({1, 0}, 0, 64 << 20, 4, why));
    REQUIRE(exporter->allocate_ring({1, 1}, 0, 64 << 20, 4, why));
    REQUIRE(exporter->copy_and_publish({1, 1}, 0, seg.base, seg.bytes, 1, raw, &h, why));
  }
  const std::size_t after = gputest::device_free_bytes(0);
  std::printf("device free bytes before %zu, after %zu\n", before, after);
  // Allow the runtime's own small, one-time allocations; a leaked ring would be 256 MiB.
  CHECK(after + (32u << 20) >= before);
}
