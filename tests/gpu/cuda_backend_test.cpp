// gpu tier: the `cuda` device backend on a real GPU (skipped without one, see gpu_support.hpp).
#include <spawn.h>
#include <sys/wait.h>

#include <catch2/catch.hpp>
#include <cstring>
#include <random>
#include <vector>

#include "device/cuda_driver_api.hpp"
#include "gpu_support.hpp"
#include "ipc_peer_protocol.hpp"

extern char** environ;

using namespace stoker;
using device::DeviceBuffer;

namespace {

std::uint32_t f32_bits(float f) {
  std::uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}

}  // namespace

TEST_CASE("normalize on the GPU equals the per-channel table, for float32/float16 and NCHW/NHWC") {
  auto b = gputest::cuda_or_skip();
  device::StreamId s = 0;
  auto s_r = b->create_stream(0);
  REQUIRE(s_r.ok());
  s = *s_r;
  // src_offset 1: the input is not 4-aligned, so the kernel takes its element-by-element path;
  // 0: its vector path (4 elements per load and store), with planes of 221 elements that end
  // inside a group of 4.
  for (std::size_t src_offset : {std::size_t{0}, std::size_t{1}})
    for (std::uint32_t dtype : {3u, 2u}) {
      for (std::uint32_t layout : {1u, 2u}) {
        device::NormalizeSpec spec;
        spec.out_dtype = dtype;
        spec.layout = layout;
        spec.channels = 3;
        spec.height = 17;  // odd sizes: the element count is not a multiple of the kernel's 4
        spec.width = 13;
        for (int c = 0; c < 3; ++c) {
          for (int v = 0; v < 256; ++v) {
            const float f = (v / 255.0f - 0.4f * c) / (0.2f + 0.05f * c);
            spec.table[c][v] = dtype == 3 ? f32_bits(f) : (0x3c00u + 131u * c + v) & 0xffffu;
          }
        }
        // 7000 images of 663 elements (4.6 M) outrun four steps of the kernel's grid-stride loop
        // (1024 blocks of 256 threads, 4 elements each), so both its four-step unrolled loop and
        // the steps after it are checked.
        const std::uint32_t count = src_offset == 0 ? 7000 : 3;
        const std::size_t elems = std::size_t{count} * 3 * 17 * 13;
        std::vector<std::uint8_t> in(elems);
        std::mt19937 rng(dtype * 10 + layout);
        for (auto& x : in) x = static_cast<std::uint8_t>(rng());
        const std::size_t out_size = dtype == 2 ? 2 : 4;
        const std::size_t dst_offset = 256;  // slot offsets inside a ring are 256-aligned
        DeviceBuffer src, dst;
        auto src_r = b->allocate(0, src_offset + elems);
        REQUIRE(src_r.ok());
        src = *src_r;
        auto dst_r = b->allocate(0, dst_offset + elems * out_size);
        REQUIRE(dst_r.ok());
        dst = *dst_r;
        REQUIRE(b->copy_to_device(s, src, src_offset, in.data(), elems).ok());
        REQUIRE(b->normalize(s, dst, dst_offset, src, src_offset, count, spec).ok());
        std::vector<std::uint8_t> out(elems * out_size);
        REQUIRE(b->copy_to_host(0, s, out.data(), static_cast<std::uint8_t*>(dst.ptr) + dst_offset, out.size()).ok());
        const std::size_t plane = 17 * 13;
        std::size_t wrong = 0;
        for (std::size_t i = 0; i < elems; ++i) {
          const std::size_t c = layout == 2 ? i % 3 : (i / plane) % 3;
          std::uint32_t got = 0;
          std::memcpy(&got, out.data() + i * out_size, out_size);
          wrong += got != spec.table[c][in[i]];
        }
        INFO("dtype " << dtype << " layout " << layout << " source offset " << src_offset);
        CHECK(wrong == 0);
        b->free(src);
        b->free(dst);
      }
    }
  b->destroy_stream(0, s);
}

TEST_CASE("a hundred ring allocations with their IPC events leave no device memory behind") {
  auto b = gputest::cuda_or_skip();
  const auto driver = device::cu::load_driver();
  REQUIRE(driver.ok());
  const device::cu::DriverApi* api = *driver;
  auto free_now = [&] {
    // Measured inside the backend's context: open_device retained the primary context, so
    // pushing it here creates nothing.
    device::cu::CUcontext ctx = nullptr;
    device::cu::CUdevice d = 0;
    api->cuDeviceGet(&d, 0);
    api->cuDevicePrimaryCtxRetain(&ctx, d);
    api->cuCtxPushCurrent(ctx);
    std::size_t f = 0, t = 0;
    api->cuMemGetInfo(&f, &t);
    api->cuCtxPopCurrent(&ctx);
    api->cuDevicePrimaryCtxRelease(d);
    return f;
  };
  // One warm-up cycle: the first allocation grows the context's own pools.
  DeviceBuffer warm;
  auto warm_r = b->allocate(0, 64 << 20);
  REQUIRE(warm_r.ok());
  warm = *warm_r;
  b->free(warm);
  const std::size_t before = free_now();
  for (int i = 0; i < 100; ++i) {
    DeviceBuffer ring;
    auto ring_r = b->allocate(0, 64 << 20);
    REQUIRE(ring_r.ok());
    ring = *ring_r;
    device::EventId e1 = 0, e2 = 0;
    device::IpcHandle h;
    auto e1_r = b->create_ipc_event(0);
    REQUIRE(e1_r.ok());
    e1 = e1_r->event;
    h = e1_r->handle;
    auto e2_r = b->create_ipc_event(0);
    REQUIRE(e2_r.ok());
    e2 = e2_r->event;
    h = e2_r->handle;
    b->destroy_event(0, e1);
    b->destroy_event(0, e2);
    b->free(ring);
  }
  const std::size_t after = free_now();
  INFO("free before " << before << ", after " << after);
  CHECK(after + (2u << 20) >= before);  // within 2 MiB (allocation granularity)
}

TEST_CASE("another process maps the batch, waits for its ready event on its stream and fences the release") {
  auto b = gputest::cuda_or_skip();
  const auto devs = b->devices().devices;
  REQUIRE(!devs.empty());
  device::StreamId s = 0;
  auto s_r = b->create_stream(0);
  REQUIRE(s_r.ok());
  s = *s_r;
  const std::size_t bytes = 8 << 20;
  DeviceBuffer mem;
  auto mem_r = b->allocate(0, bytes);
  REQUIRE(mem_r.ok());
  mem = *mem_r;
  device::EventId ready = 0, release = 0;
  device::IpcHandle ready_h, release_h;
  auto ready_r = b->create_ipc_event(0);
  REQUIRE(ready_r.ok());
  ready = ready_r->event;
  ready_h = ready_r->handle;
  auto release_r = b->create_ipc_event(0);
  REQUIRE(release_r.ok());
  release = release_r->event;
  release_h = release_r->handle;
  std::vector<std::uint8_t> pattern(bytes);
  for (std::size_t i = 0; i < bytes; ++i) pattern[i] = gputest::pattern_byte(i);
  REQUIRE(b->copy_to_device(s, mem, 0, pattern.data(), bytes).ok());
  REQUIRE(b->record(0, ready, s).ok());

  // The peer is a new program (a fork of a process that initialized CUDA cannot use CUDA).
  const std::string peer = std::string(STOKER_BIN_DIR) + "/stoker_gpu_ipc_peer";
  std::vector<std::string> args = {peer,
                                   device::uuid_string(devs[0].uuid),
                                   gputest::to_hex(mem.handle),
                                   gputest::to_hex(ready_h),
                                   gputest::to_hex(release_h),
                                   std::to_string(bytes)};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = 0;
  REQUIRE(posix_spawn(&pid, peer.c_str(), nullptr, nullptr, argv.data(), environ) == 0);
  int status = 0;
  REQUIRE(waitpid(pid, &status, 0) == pid);
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);

  // The daemon's side of the release fence: its copy stream waits for the peer's event
  // before the slot is overwritten.
  REQUIRE(b->stream_wait(0, s, release).ok());
  REQUIRE(b->synchronize_stream(0, s).ok());
  CHECK(b->event_done(0, release));
  b->destroy_event(0, ready);
  b->destroy_event(0, release);
  b->free(mem);
  b->destroy_stream(0, s);
}
