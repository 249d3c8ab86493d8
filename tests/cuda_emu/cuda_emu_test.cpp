// The CUDA driver emulation (libcuda.so.1 from <build>/cuda_emu, on LD_LIBRARY_PATH in this
// test's environment) is strict where CUDA is and loud where CUDA is undefined: each rule is
// broken here on purpose, through Stoker's own `cuda` backend or its driver table, and the
// emulation must catch it. Every case runs its driver calls in a forked child that has not
// touched the driver before (ctest runs each case in its own process), so no stream thread is
// forked; a misuse must kill the child with the named signal and the emulation's message.
#include <catch2/catch.hpp>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "cuemu_stats.h"
#include "device/cuda_driver_api.hpp"
#include "device/device_backend.hpp"
#include "ipc_peer_protocol.hpp"

using namespace stoker;
using namespace stoker::device;

namespace {

struct Outcome {
  int signal = 0;  // the signal that ended the child, or 0
  int code = -1;   // its exit status when it exited
  std::string err;
};

// Runs `body` in a child; the child exits 0 when body returns true, 1 otherwise.
Outcome in_child(const std::function<bool()>& body) {
  int pipefd[2];
  REQUIRE(::pipe(pipefd) == 0);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::signal(SIGABRT, SIG_DFL);
    ::signal(SIGSEGV, SIG_DFL);
    ::alarm(120);
    ::dup2(pipefd[1], 2);
    ::close(pipefd[0]);
    const bool ok = body();
    std::fflush(stderr);
    std::_Exit(ok ? 0 : 1);
  }
  ::close(pipefd[1]);
  Outcome o;
  char buf[512];
  ssize_t n;
  while ((n = ::read(pipefd[0], buf, sizeof buf)) > 0) o.err.append(buf, static_cast<std::size_t>(n));
  ::close(pipefd[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  if (WIFSIGNALED(status)) o.signal = WTERMSIG(status);
  if (WIFEXITED(status)) o.code = WEXITSTATUS(status);
  return o;
}

bool say(const std::string& what) {
  std::fprintf(stderr, "%s\n", what.c_str());
  return false;
}

std::unique_ptr<Backend> backend(int device = 0) {
  auto made = make_cuda_driver_backend();
  std::string why = made.status().message();
  std::unique_ptr<Backend> b = made ? std::move(made).value() : nullptr;
  if (b) {
    if (base::Status st = b->open_device(device); !st) {
      why = st.message();
      b.reset();
    }
  }
  if (!b) say("no emulated device: " + why);
  return b;
}

const cu::DriverApi& driver() {
  const base::Result<const cu::DriverApi*> loaded = cu::load_driver();
  if (!loaded) {
    std::fprintf(stderr, "no driver: %s\n", loaded.status().message().c_str());
    std::_Exit(3);
  }
  return **loaded;
}

// A peer process (cuda_emu_peer) that opens `h` and holds it until release().
struct Peer {
  pid_t pid = -1;
  int to = -1, from = -1;
  Peer(const char* mode, const IpcHandle& h, std::size_t bytes) {
    int in[2], out[2];
    if (::pipe(in) != 0 || ::pipe(out) != 0) return;
    pid = ::fork();
    if (pid == 0) {
      ::dup2(in[0], 0);
      ::dup2(out[1], 1);
      ::close(in[1]);
      ::close(out[0]);
      const std::string hex = gputest::to_hex(h), n = std::to_string(bytes);
      ::execl(STOKER_CUDA_EMU_PEER, STOKER_CUDA_EMU_PEER, mode, hex.c_str(), n.c_str(), nullptr);
      std::_Exit(127);
    }
    ::close(in[0]);
    ::close(out[1]);
    to = in[1];
    from = out[0];
  }
  bool opened() {
    char line[16] = {};
    std::size_t got = 0;
    while (got < 7 && ::read(from, line + got, 1) == 1) ++got;
    return std::string(line, got) == "opened\n";
  }
  int release() {  // closes its stdin; returns its wait status
    ::close(to);
    int status = 0;
    ::waitpid(pid, &status, 0);
    return status;
  }
};

}  // namespace

TEST_CASE("cuda-emu the emulated driver is what Stoker's cuda backend loads", "[unit][device-emu]") {
  const Outcome o = in_child([] {
    auto b = backend();
    if (!b) return false;
    const std::string v = b->version();
    const auto devs = b->devices().devices;
    if (v.find("CUDA driver 12.8") == std::string::npos || devs.size() != 1 ||
        devs[0].name != "Stoker CUDA emulation 0") {
      return say("version '" + v + "', " + std::to_string(devs.size()) + " devices");
    }
    return true;
  });
  INFO(o.err);
  CHECK(o.code == 0);
}

TEST_CASE("cuda-emu a host read or write of a device pointer crashes, as on a GPU", "[unit][device-emu]") {
  for (const bool write : {false, true}) {
    const Outcome o = in_child([write] {
      auto b = backend();
      DeviceBuffer buf;
      std::string why;
      if (!b) return say(why);
      auto buf_r = b->allocate(0, 4096);
      if (!buf_r) return say(buf_r.status().message());
      buf = *buf_r;
      volatile unsigned char* p = static_cast<unsigned char*>(buf.ptr);
      if (write) {
        p[100] = 7;
      } else {
        std::fprintf(stderr, "read %d\n", p[100]);
      }
      return say("the host dereference of a device pointer did not crash");
    });
    INFO(o.err);
    CHECK(o.signal == SIGSEGV);
  }
}

TEST_CASE("cuda-emu calls without a current context fail with CUDA_ERROR_INVALID_CONTEXT", "[unit][device-emu]") {
  const Outcome o = in_child([] {
    const cu::DriverApi& a = driver();
    cu::CUdeviceptr p = 0;
    cu::CUstream s = nullptr;
    cu::CUevent e = nullptr;
    cu::CUcontext popped = nullptr;
    constexpr int kInvalidContext = 201;
    if (a.cuMemAlloc(&p, 64) != kInvalidContext || a.cuStreamCreate(&s, 0) != kInvalidContext ||
        a.cuEventCreate(&e, 0) != kInvalidContext || a.cuCtxPopCurrent(&popped) != kInvalidContext) {
      return say("a call without a context did not fail with CUDA_ERROR_INVALID_CONTEXT");
    }
    // With the primary context pushed the same calls work; after its pop they fail again.
    cu::CUcontext ctx = nullptr;
    if (a.cuDevicePrimaryCtxRetain(&ctx, 0) != 0 || a.cuCtxPushCurrent(ctx) != 0) return say("retain/push");
    if (a.cuMemAlloc(&p, 64) != 0 || a.cuMemFree(p) != 0) return say("alloc with a context failed");
    if (a.cuCtxPopCurrent(&popped) != 0 || popped != ctx) return say("pop");
    if (a.cuMemAlloc(&p, 64) != kInvalidContext) return say("alloc after the pop did not fail");
    // A released primary context cannot be made current again.
    if (a.cuDevicePrimaryCtxRelease(0) != 0 || a.cuCtxPushCurrent(ctx) != kInvalidContext) {
      return say("a released primary context was pushed");
    }
    return true;
  });
  INFO(o.err);
  CHECK(o.code == 0);
}

TEST_CASE("cuda-emu a thread that ends with a context still pushed aborts", "[unit][device-emu]") {
  const Outcome o = in_child([] {
    const cu::DriverApi& a = driver();
    cu::CUcontext ctx = nullptr;
    a.cuDevicePrimaryCtxRetain(&ctx, 0);
    std::thread([&] { a.cuCtxPushCurrent(ctx); }).join();  // a push without its pop
    return say("no abort");
  });
  INFO(o.err);
  CHECK(o.signal == SIGABRT);
  CHECK_THAT(o.err, Catch::Contains("cuCtxPushCurrent: a thread ended with 1 context(s) still pushed"));
}

TEST_CASE("cuda-emu an IPC handle does not open in the process that exported it", "[unit][device-emu]") {
  const Outcome o = in_child([] {
    auto b = backend();
    DeviceBuffer buf;
    EventId e = 0;
    IpcHandle eh{};
    std::string why;
    if (!b) return say(why);
    auto buf_r = b->allocate(0, 4096);
    if (!buf_r) return say(buf_r.status().message());
    buf = *buf_r;
    auto e_r = b->create_ipc_event(0);
    if (!e_r) return say(e_r.status().message());
    e = e_r->event;
    eh = e_r->handle;
    auto mem = b->open_memory(0, buf.handle, 4096);
    if (mem) return say("own memory handle opened");
    why = mem.status().message();
    if (why.find("cuIpcOpenMemHandle: invalid device context (CUresult 201)") == std::string::npos) return say(why);
    auto ev = b->open_event(0, eh);
    if (ev) return say("own event handle opened");
    why = ev.status().message();
    if (why.find("cuIpcOpenEventHandle: invalid device context (CUresult 201)") == std::string::npos) return say(why);
    b->destroy_event(0, e);
    b->free(buf);
    return true;
  });
  INFO(o.err);
  CHECK(o.code == 0);
}

TEST_CASE("cuda-emu freeing memory a peer still has open aborts, and is fine after the peer closed it or died",
          "[unit][device-emu]") {
  for (const char* after : {"", "closed", "killed"}) {
    const std::string when = after;
    const Outcome o = in_child([when] {
      auto b = backend();
      DeviceBuffer buf;
      std::string why;
      if (!b) return say(why);
      auto buf_r = b->allocate(0, 1 << 16);
      if (!buf_r) return say(buf_r.status().message());
      buf = *buf_r;
      Peer peer("hold-mem", buf.handle, buf.bytes);
      if (!peer.opened()) return say("the peer did not open the handle");
      if (when == "closed" && peer.release() != 0) return say("the peer failed");
      if (when == "killed") {
        ::kill(peer.pid, SIGKILL);
        ::waitpid(peer.pid, nullptr, 0);
      }
      b->free(buf);  // aborts while the peer holds it
      return true;
    });
    INFO(when << ": " << o.err);
    if (when.empty()) {
      CHECK(o.signal == SIGABRT);
      CHECK_THAT(o.err, Catch::Contains("cuMemFree: process") && Catch::Contains("still has this allocation open"));
    } else {
      CHECK(o.code == 0);
    }
  }
}

TEST_CASE("cuda-emu destroying an interprocess event a peer still has open aborts", "[unit][device-emu]") {
  const Outcome o = in_child([] {
    auto b = backend();
    EventId e = 0;
    IpcHandle h{};
    std::string why;
    if (!b) return say(why);
    auto e_r = b->create_ipc_event(0);
    if (!e_r) return say(e_r.status().message());
    e = e_r->event;
    h = e_r->handle;
    Peer peer("hold-event", h, 0);
    if (!peer.opened()) return say("the peer did not open the event");
    b->destroy_event(0, e);
    return true;
  });
  INFO(o.err);
  CHECK(o.signal == SIGABRT);
  CHECK_THAT(o.err, Catch::Contains("cuEventDestroy: process") && Catch::Contains("still has this interprocess event open"));
}

TEST_CASE("cuda-emu closing an IPC mapping twice aborts in the peer", "[unit][device-emu]") {
  const Outcome o = in_child([] {
    auto b = backend();
    DeviceBuffer buf;
    std::string why;
    if (!b) return say(why);
    auto buf_r = b->allocate(0, 4096);
    if (!buf_r) return say(buf_r.status().message());
    buf = *buf_r;
    Peer peer("close-mem-twice", buf.handle, buf.bytes);
    if (!peer.opened()) return say("the peer did not open the handle");
    const int status = peer.release();
    b->free(buf);
    return WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT ? true : say("the double close did not abort the peer");
  });
  INFO(o.err);
  CHECK(o.code == 0);
  CHECK_THAT(o.err, Catch::Contains("cuIpcCloseMemHandle: 0x") && Catch::Contains("closed twice?"));
}

TEST_CASE("cuda-emu using a destroyed stream or event aborts naming the call", "[unit][device-emu]") {
  const Outcome s = in_child([] {
    auto b = backend();
    StreamId st = 0;
    std::string why;
    if (!b) return say(why);
    auto st_r = b->create_stream(0);
    if (!st_r) return say(st_r.status().message());
    st = *st_r;
    b->destroy_stream(0, st);
    (void)b->synchronize_stream(0, st);
    return say("no abort");
  });
  INFO(s.err);
  CHECK(s.signal == SIGABRT);
  CHECK_THAT(s.err, Catch::Contains("cuStreamSynchronize: stream 0x") && Catch::Contains("was destroyed"));
  const Outcome e = in_child([] {
    auto b = backend();
    StreamId st = 0;
    EventId ev = 0;
    IpcHandle h{};
    std::string why;
    if (!b) return say(why);
    auto st_r = b->create_stream(0);
    if (!st_r) return say(st_r.status().message());
    st = *st_r;
    auto ev_r = b->create_ipc_event(0);
    if (!ev_r) return say(ev_r.status().message());
    ev = ev_r->event;
    h = ev_r->handle;
    b->destroy_event(0, ev);
    (void)b->record(0, ev, st);
    return say("no abort");
  });
  INFO(e.err);
  CHECK(e.signal == SIGABRT);
  CHECK_THAT(e.err, Catch::Contains("cuEventRecord: event 0x") && Catch::Contains("was destroyed"));
}

TEST_CASE("cuda-emu streams run later, so a missing stream wait reads stale bytes and the wait fixes it",
          "[unit][device-emu]") {
  // Stream A writes the pattern after 20 queued copies (each delayed up to 5 ms); stream B
  // reads the buffer back at once. Without B waiting for A's event it reads the zeros of a
  // fresh allocation; with the wait, the pattern.
  ::setenv("STOKER_CUDA_EMU_DELAY_US", "5000", 1);
  for (const bool wait : {false, true}) {
    const Outcome o = in_child([wait] {
      auto b = backend();
      StreamId sa = 0, sb = 0;
      EventId done = 0;
      IpcHandle h{};
      DeviceBuffer buf;
      std::string why;
      constexpr std::size_t n = 4096;
      std::vector<std::uint8_t> pattern(n), zeros(n, 0), back(n, 0xee);
      for (std::size_t i = 0; i < n; ++i) pattern[i] = gputest::pattern_byte(i) | 1;
      if (!b) return say(why);
      auto sa_r = b->create_stream(0);
      if (!sa_r) return say(sa_r.status().message());
      sa = *sa_r;
      auto sb_r = b->create_stream(0);
      if (!sb_r) return say(sb_r.status().message());
      sb = *sb_r;
      auto buf_r = b->allocate(0, n);
      if (!buf_r) return say(buf_r.status().message());
      buf = *buf_r;
      auto done_r = b->create_ipc_event(0);
      if (!done_r) return say(done_r.status().message());
      done = done_r->event;
      h = done_r->handle;
      for (int i = 0; i < 20; ++i) (void)b->copy_to_device(sa, buf, 0, zeros.data(), n);
      (void)b->copy_to_device(sa, buf, 0, pattern.data(), n);
      (void)b->record(0, done, sa);
      if (wait) (void)b->stream_wait(0, sb, done);
      if (auto st = b->copy_to_host(0, sb, back.data(), buf.ptr, n); !st) return say(st.message());
      (void)b->synchronize_stream(0, sa);
      b->destroy_event(0, done);
      b->free(buf);
      b->destroy_stream(0, sa);
      b->destroy_stream(0, sb);
      if (back == pattern) return wait ? true : say("the unordered read saw the pattern");
      if (back == zeros) return wait ? say("the ordered read saw zeros") : true;
      return say("neither zeros nor the pattern");
    });
    INFO("wait " << wait << ": " << o.err);
    CHECK(o.code == 0);
  }
}

TEST_CASE("cuda-emu a kernel argument of the wrong width is an illegal address", "[unit][device-emu]") {
  // stoker_normalize_table's third parameter is a 64-bit element count; passed as a 32-bit
  // value the kernel reads four more bytes of whatever follows it.
  const Outcome o = in_child([] {
    const cu::DriverApi& a = driver();
    cu::CUcontext ctx = nullptr;
    a.cuDevicePrimaryCtxRetain(&ctx, 0);
    a.cuCtxPushCurrent(ctx);
    static const char ptx[] =
        ".version 7.0\n.target sm_52\n.address_size 64\n.visible .entry stoker_normalize_table(\n"
        ".param .u64 a, .param .u64 b, .param .u64 c, .param .u32 d, .param .u32 e, .param .u32 f,\n"
        ".param .u32 g, .param .u64 h)\n{\nret;\n}\n";
    cu::CUmodule m = nullptr;
    cu::CUfunction f = nullptr;
    cu::CUdeviceptr in = 0, out = 0, table = 0;
    if (a.cuModuleLoadData(&m, ptx) != 0 || a.cuModuleGetFunction(&f, m, "stoker_normalize_table") != 0 ||
        a.cuMemAlloc(&in, 48) != 0 || a.cuMemAlloc(&out, 48 * 4) != 0 || a.cuMemAlloc(&table, 4096) != 0) {
      return say("setup");
    }
    struct {
      unsigned elems = 48;  // wrong: unsigned long long in the kernel
      unsigned garbage = 0x40;
    } packed;
    unsigned plane = 16, channels = 3, nhwc = 0, half = 0;
    void* args[] = {&in, &out, &packed.elems, &plane, &channels, &nhwc, &half, &table};
    a.cuLaunchKernel(f, 1, 1, 1, 256, 1, 1, 0, nullptr, args, nullptr);
    return say("no abort");
  });
  INFO(o.err);
  CHECK(o.signal == SIGABRT);
  CHECK_THAT(o.err, Catch::Contains("cuLaunchKernel: stoker_normalize_table: illegal address"));
}

TEST_CASE("cuda-emu a process's live objects are counted, and nothing is left after the backend is gone",
          "[unit][device-emu]") {
  ::setenv("STOKER_CUDA_EMU_DEVICES", "2", 1);
  const Outcome o = in_child([] {
    cuemu::Stats s{};
    {
      auto b = backend(1);  // only device 1: no context is ever made on device 0
      DeviceBuffer buf;
      EventId e = 0;
      StreamId st = 0;
      IpcHandle h{};
      std::string why;
      if (!b) return say(why);
      auto buf_r = b->allocate(1, 4096);
      if (!buf_r) return say(buf_r.status().message());
      buf = *buf_r;
      auto e_r = b->create_ipc_event(1);
      if (!e_r) return say(e_r.status().message());
      e = e_r->event;
      h = e_r->handle;
      auto st_r = b->create_stream(1);
      if (!st_r) return say(st_r.status().message());
      st = *st_r;
      if (!cuemu::cuemu_read_stats(::getpid(), s) || s.allocations != 1 || s.events != 1 || s.streams != 1 ||
          s.primary_retained[0] != 0 || s.primary_retained[1] != 1 || s.pushed != 0) {
        return say("counts while live are wrong");
      }
      b->destroy_stream(1, st);
      b->destroy_event(1, e);
      b->free(buf);
    }
    if (!cuemu::cuemu_read_stats(::getpid(), s) || s.allocations != 0 || s.events != 0 || s.streams != 0 ||
        s.primary_retained[1] != 0 || s.pushed != 0 || s.allocated_bytes != 0) {
      return say("objects left after the backend was destroyed");
    }
    return true;
  });
  INFO(o.err);
  CHECK(o.code == 0);
}

TEST_CASE("cuda-emu a kernel image without the normalize kernel is refused on every call, never launched",
          "[unit][device-emu]") {
  const Outcome o = in_child([] {
    // A valid module that lacks stoker_normalize_table.
    static const char ptx[] = ".version 7.0\n.target sm_52\n.address_size 64\n.visible .entry other_kernel()\n{\nret;\n}\n";
    auto made = make_cuda_driver_backend_with_kernels(ptx);
    if (!made) return say(made.status().message());
    auto b = std::move(made).value();
    if (base::Status open = b->open_device(0); !open) return say(open.message());
    DeviceBuffer in, out;
    StreamId st = 0;
    auto in_r = b->allocate(0, 64);
    if (!in_r) return say(in_r.status().message());
    in = *in_r;
    auto out_r = b->allocate(0, 64 * 4);
    if (!out_r) return say(out_r.status().message());
    out = *out_r;
    auto st_r = b->create_stream(0);
    if (!st_r) return say(st_r.status().message());
    st = *st_r;
    NormalizeSpec spec;
    spec.channels = 1;
    spec.height = 8;
    spec.width = 8;
    for (int call = 0; call < 2; ++call) {
      const base::Status n = b->normalize(st, out, 0, in, 0, 1, spec);
      if (n) return say("normalize without its kernel succeeded");
      if (n.message().find("cuModuleGetFunction") == std::string::npos) {
        return say("call " + std::to_string(call) + ": " + n.message());
      }
    }
    b->destroy_stream(0, st);
    b->free(in);
    b->free(out);
    return true;
  });
  INFO(o.err);
  CHECK(o.code == 0);
}
