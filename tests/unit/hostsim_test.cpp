// The host simulation keeps CUDA's contract: ordering through events, memory shared between
// processes - and it aborts on what CUDA leaves undefined, which is what makes the integration
// tier's "no abort" meaningful. Each misuse runs in a forked child (before any backend exists
// in it, so no thread is forked) that must die of SIGABRT with the simulation's message.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <thread>

#include "device/device_backend.hpp"
#include "device/hostsim_objects.hpp"

using namespace stoker::device;

namespace {

std::unique_ptr<Backend> sim() {
  BackendResult made = make_hostsim_backend();
  REQUIRE(made.ok());
  return std::move(made).value();
}

// Runs `body` in a child process; returns (terminating signal or 0, its stderr).
std::pair<int, std::string> in_child(const std::function<void()>& body) {
  int pipefd[2];
  REQUIRE(::pipe(pipefd) == 0);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::signal(SIGABRT, SIG_DFL);  // die of the abort, not of Catch's report of it
    ::alarm(60);                 // a child that hangs fails the case (SIGALRM) instead of ctest's timeout
    ::dup2(pipefd[1], 2);
    ::close(pipefd[0]);
    body();
    std::_Exit(0);
  }
  ::close(pipefd[1]);
  std::string err;
  char buf[512];
  ssize_t n;
  while ((n = ::read(pipefd[0], buf, sizeof buf)) > 0) err.append(buf, static_cast<std::size_t>(n));
  ::close(pipefd[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  return {WIFSIGNALED(status) ? WTERMSIG(status) : 0, err};
}

}  // namespace

TEST_CASE("hostsim: memory and events cross processes - waits order work", "[unit][hostsim]") {
  ::setenv("STOKER_HOSTSIM_DEVICES", "2", 1);
  auto b = sim();
  const auto devs = b->devices().devices;
  REQUIRE(devs.size() == 2);
  CHECK(uuid_string(devs[1].uuid) == "GPU-5afe5130-0000-0000-0000-000000000001");
  REQUIRE(b->open_device(1).ok());

  DeviceBuffer buf;
  auto buf_r = b->allocate(1, 4096);
  REQUIRE(buf_r.ok());
  buf = *buf_r;
  EventId ev = 0;
  IpcHandle evh{};
  auto ev_r = b->create_ipc_event(1);
  REQUIRE(ev_r.ok());
  ev = ev_r->event;
  evh = ev_r->handle;
  StreamId s = 0;
  auto s_r = b->create_stream(1);
  REQUIRE(s_r.ok());
  s = *s_r;
  std::vector<std::uint8_t> src(4096);
  for (std::size_t i = 0; i < src.size(); ++i) src[i] = static_cast<std::uint8_t>(i * 7);
  REQUIRE(b->copy_to_device(s, buf, 0, src.data(), src.size()).ok());
  REQUIRE(b->record(1, ev, s).ok());
  // fork() copies only the calling thread: the stream's thread must be idle (holding no lock
  // the child could need) when it happens. Ordering across processes while the stream is
  // still running is what the integration tier's slow-device cases check, with exec'd
  // processes.
  REQUIRE(b->synchronize_stream(1, s).ok());

  // Another process opens both by handle, waits for the event on its stream, reads the bytes.
  const auto [sig, err] = in_child([&] {
    auto peer = sim();
    std::string w;
    void* p = nullptr;
    EventId pe = 0;
    bool opened = false;
    if (stoker::base::Status st = peer->open_device(1); !st) {
      w = st.message();
    } else if (auto mem = peer->open_memory(1, buf.handle, 4096); !mem) {
      w = mem.status().message();
    } else if (auto event = peer->open_event(1, evh); !event) {
      w = event.status().message();
    } else {
      p = *mem;
      pe = *event;
      opened = true;
    }
    if (!opened) {
      std::fprintf(stderr, "open failed: %s\n", w.c_str());
      std::_Exit(3);
    }
    if (stoker::base::Status st = peer->stream_wait(1, kDefaultStream, pe); !st) {
      std::fprintf(stderr, "open failed: %s\n", st.message().c_str());
      std::_Exit(3);
    }
    std::vector<std::uint8_t> got(4096);
    if (!peer->copy_to_host(1, kDefaultStream, got.data(), p, got.size()).ok()) std::_Exit(4);
    for (std::size_t i = 0; i < got.size(); ++i) {
      if (got[i] != static_cast<std::uint8_t>(i * 7)) std::_Exit(5);
    }
    peer->close_event(1, pe);
    peer->close_memory(1, p);
    std::_Exit(0);
  });
  CHECK(sig == 0);
  CHECK(err.empty());
  REQUIRE(b->synchronize_stream(1, s).ok());
  b->destroy_event(1, ev);
  b->free(buf);  // the peer closed both: no abort
  b->destroy_stream(1, s);
}

TEST_CASE("hostsim: a recorded event completes only when its stream gets there", "[unit][hostsim]") {
  const auto [sig, err] = in_child([] {
    ::setenv("STOKER_HOSTSIM_DELAY_US", "100000", 1);
    auto b = sim();
    (void)b->open_device(0);
    EventId ev = 0;
    IpcHandle h{};
    if (auto r = b->create_ipc_event(0)) { ev = r->event; h = r->handle; }
    const auto t0 = std::chrono::steady_clock::now();
    (void)b->record(0, ev, kDefaultStream);
    if (b->event_done(0, ev)) std::_Exit(3);  // the delayed stream has not run the record yet
    (void)b->synchronize_event(0, ev);
    if (!b->event_done(0, ev)) std::_Exit(4);
    if (std::chrono::steady_clock::now() - t0 < std::chrono::milliseconds(90)) std::_Exit(5);
    b->destroy_event(0, ev);
    std::_Exit(0);
  });
  CHECK(sig == 0);
  CHECK(err.empty());
}

TEST_CASE("hostsim aborts on what CUDA leaves undefined", "[unit][hostsim]") {
  SECTION("freeing memory a live peer still has open") {
    // The child allocates and waits; this process opens the memory; then the child frees it.
    int to_child[2], to_parent[2];
    REQUIRE(::pipe(to_child) == 0);
    REQUIRE(::pipe(to_parent) == 0);
    int errpipe[2];
    REQUIRE(::pipe(errpipe) == 0);
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::signal(SIGABRT, SIG_DFL);
      ::dup2(errpipe[1], 2);
      auto b = sim();
      (void)b->open_device(0);
      DeviceBuffer buf;
      if (auto r = b->allocate(0, 1024)) buf = *r;
      (void)!::write(to_parent[1], buf.handle.data(), 64);
      char go;
      (void)!::read(to_child[0], &go, 1);
      b->free(buf);  // the parent still has it open: abort
      std::_Exit(0);
    }
    ::close(errpipe[1]);
    IpcHandle h{};
    REQUIRE(::read(to_parent[0], h.data(), 64) == 64);
    auto b = sim();
    REQUIRE(b->open_device(0).ok());
    void* p = nullptr;
    auto p_r = b->open_memory(0, h, 1024);
    REQUIRE(p_r.ok());
    p = *p_r;
    REQUIRE(::write(to_child[1], "g", 1) == 1);
    int status = 0;
    ::waitpid(pid, &status, 0);
    std::string err(4096, '\0');
    err.resize(static_cast<std::size_t>(std::max<ssize_t>(0, ::read(errpipe[0], err.data(), err.size()))));
    CHECK(WIFSIGNALED(status));
    CHECK(WTERMSIG(status) == SIGABRT);
    CHECK_THAT(err, Catch::Contains("still has open"));
    b->close_memory(0, p);
  }
  SECTION("overwriting device bytes whose reader has not released them") {
    const auto [sig, err] = in_child([] {
      auto b = sim();
      (void)b->open_device(0);
      DeviceBuffer buf;
      if (auto r = b->allocate(0, 1024)) buf = *r;
      void* p = nullptr;
      if (auto r = b->open_memory(0, buf.handle, 1024)) p = *r;  // this process as the reader, too
      b->annotate_read_begin(0, p, 512, kDefaultStream);
      (void)b->synchronize_stream(0, kDefaultStream);
      StreamId copy = 0;
      if (auto r = b->create_stream(0)) copy = *r;
      std::vector<std::uint8_t> src(256);
      (void)b->copy_to_device(copy, buf, 256, src.data(), src.size());  // no fence: abort
      (void)b->synchronize_stream(0, copy);
      std::_Exit(0);
    });
    CHECK(sig == SIGABRT);
    CHECK_THAT(err, Catch::Contains("still reads: its release fence has not completed"));
  }
  SECTION("the same copy after the reader's release fence is fine") {
    const auto [sig, err] = in_child([] {
      ::setenv("STOKER_HOSTSIM_DELAY_US", "20000", 1);
      auto b = sim();
      (void)b->open_device(0);
      DeviceBuffer buf;
      if (auto r = b->allocate(0, 1024)) buf = *r;
      EventId release = 0, opened = 0;
      IpcHandle h{};
      if (auto r = b->create_ipc_event(0)) { release = r->event; h = r->handle; }
      void* p = nullptr;
      if (auto r = b->open_memory(0, buf.handle, 1024)) p = *r;
      if (auto r = b->open_event(0, h)) opened = *r;
      b->annotate_read_begin(0, p, 512, kDefaultStream);
      b->annotate_read_end(0, p, 512, kDefaultStream);
      (void)b->record(0, opened, kDefaultStream);  // the reader's release fence (delayed)
      StreamId copy = 0;
      if (auto r = b->create_stream(0)) copy = *r;
      (void)b->stream_wait(0, copy, release);
      std::vector<std::uint8_t> src(256);
      (void)b->copy_to_device(copy, buf, 256, src.data(), src.size());
      (void)b->synchronize_stream(0, copy);
      b->close_event(0, opened);
      b->close_memory(0, p);
      b->destroy_event(0, release);
      b->free(buf);
      std::_Exit(0);
    });
    CHECK(sig == 0);
    CHECK(err.empty());
  }
  SECTION("closing a handle twice") {
    const auto [sig, err] = in_child([] {
      auto b = sim();
      (void)b->open_device(0);
      DeviceBuffer buf;
      if (auto r = b->allocate(0, 64)) buf = *r;
      void* p = nullptr;
      if (auto r = b->open_memory(0, buf.handle, 64)) p = *r;
      b->close_memory(0, p);
      b->close_memory(0, p);
      std::_Exit(0);
    });
    CHECK(sig == SIGABRT);
    CHECK_THAT(err, Catch::Contains("double close"));
  }
  SECTION("touching a device nobody named") {
    const auto [sig, err] = in_child([] {
      auto b = sim();
      DeviceBuffer buf;
      if (auto r = b->allocate(0, 64)) buf = *r;
      std::_Exit(0);
    });
    CHECK(sig == SIGABRT);
    CHECK_THAT(err, Catch::Contains("a context on a device nobody named"));
  }
}

TEST_CASE("hostsim normalize applies the per-channel table, NCHW and NHWC", "[unit][hostsim]") {
  auto b = sim();
  REQUIRE(b->open_device(0).ok());
  NormalizeSpec spec;
  spec.channels = 3;
  spec.height = 2;
  spec.width = 2;
  for (int c = 0; c < 3; ++c) {
    for (int v = 0; v < 256; ++v) {
      const float f = static_cast<float>(v) * (c + 1);
      std::memcpy(&spec.table[c][v], &f, 4);
    }
  }
  DeviceBuffer in, out;
  auto in_r = b->allocate(0, 12);
  REQUIRE(in_r.ok());
  in = *in_r;
  auto out_r = b->allocate(0, 48);
  REQUIRE(out_r.ok());
  out = *out_r;
  std::vector<std::uint8_t> px(12);
  for (int i = 0; i < 12; ++i) px[i] = static_cast<std::uint8_t>(10 + i);
  for (std::uint32_t layout : {1u, 2u}) {
    spec.layout = layout;
    REQUIRE(b->copy_to_device(kDefaultStream, in, 0, px.data(), 12).ok());
    REQUIRE(b->normalize(kDefaultStream, out, 0, in, 0, 1, spec).ok());
    REQUIRE(b->synchronize_stream(0, kDefaultStream).ok());
    const auto* f = static_cast<const float*>(out.ptr);
    for (int i = 0; i < 12; ++i) {
      const int c = layout == 1 ? i / 4 : i % 3;
      CHECK(f[i] == static_cast<float>(px[i]) * (c + 1));
    }
  }
  b->free(in);
  b->free(out);
}

// Liveness of a peer named in shared memory (issue 24, C4): a killed consumer is first a
// zombie, then reaped, then its pid may be handed out again; "alive" in any of those states
// made stokerd abort when it freed the consumer's ring.
namespace {

// A child that waits until the write end of pipe `go` is closed, then exits; returns its pid.
pid_t child_waiting(const int go[2]) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(go[1]);
    char c;
    (void)!::read(go[0], &c, 1);
    std::_Exit(0);
  }
  return pid;
}

// Blocks until `pid` has exited, without reaping it (it stays a zombie).
void wait_zombie(pid_t pid) {
  siginfo_t si{};
  REQUIRE(::waitid(P_PID, static_cast<id_t>(pid), &si, WEXITED | WNOWAIT) == 0);
}

}  // namespace

TEST_CASE("hostsim liveness: running, zombie, reaped", "[unit][hostsim]") {
  using namespace stoker::device::hostsim;
  CHECK(process_alive(self_tag()));
  CHECK(tag_pid(self_tag()) == ::getpid());
  CHECK_FALSE(process_alive(0));
  CHECK_FALSE(process_alive(kTagBeingFilled));

  int go[2];
  REQUIRE(::pipe(go) == 0);
  const pid_t pid = child_waiting(go);
  REQUIRE(pid > 0);
  const ProcessTag tag = process_tag(pid);
  const ProcessTag pid_only = static_cast<ProcessTag>(pid) << 32;  // start time unknown
  CHECK(tag_pid(tag) == pid);
  CHECK(process_alive(tag));
  CHECK(process_alive(pid_only));

  ::close(go[1]);  // the child exits
  wait_zombie(pid);
  CHECK_FALSE(process_alive(tag));  // a zombie has closed everything, as the driver would
  CHECK_FALSE(process_alive(pid_only));

  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  CHECK_FALSE(process_alive(tag));
  CHECK_FALSE(process_alive(pid_only));
  ::close(go[0]);
}

TEST_CASE("hostsim liveness: a pid now held by a later process is not the tagged one", "[unit][hostsim]") {
  using namespace stoker::device::hostsim;
  // The same pid with another start time is what a reused pid looks like from shared memory.
  const ProcessTag me = self_tag();
  REQUIRE(static_cast<std::uint32_t>(me) != 0);  // this kernel shows start times in /proc
  CHECK_FALSE(process_alive(me ^ 1));
  CHECK_FALSE(process_alive(me + 100));
  CHECK(process_alive(me));
}

TEST_CASE("hostsim liveness: never 'alive' for a child reaped while it is being looked at",
          "[unit][hostsim]") {
  using namespace stoker::device::hostsim;
  // The child is a zombie when the looks begin and is reaped by another thread in the middle
  // of them: whatever moment the reaping falls on (between a kill(pid, 0) that finds the
  // zombie and a /proc read that no longer finds it, say), every answer must be "gone".
  int wrong = 0;
  for (int i = 0; i < 150 && wrong == 0; ++i) {
    const pid_t pid = ::fork();
    if (pid == 0) std::_Exit(0);
    REQUIRE(pid > 0);
    wait_zombie(pid);
    const ProcessTag tag = process_tag(pid);
    std::atomic<bool> reaped{false};
    std::thread reaper([&] {
      int status = 0;
      ::waitpid(pid, &status, 0);
      reaped.store(true);
    });
    for (int looks = 0; looks < 2 || !reaped.load(); ++looks) {
      if (process_alive(tag)) ++wrong;
    }
    reaper.join();
  }
  CHECK(wrong == 0);
}
