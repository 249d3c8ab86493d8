// The other process of cuda_emu_test's IPC cases, through libstoker's `cuda` backend:
//   cuda_emu_peer hold-mem|hold-event|close-mem-twice HANDLE_HEX BYTES
// opens the handle on device 0, prints "opened" and then (hold-*) keeps it open until its stdin
// closes, closes it and exits 0; close-mem-twice closes the memory twice (the emulation must
// abort). Exit 1 with the reason on stderr when the open fails.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "ipc_peer_protocol.hpp"

using namespace stoker;

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: hold-mem|hold-event|close-mem-twice HANDLE BYTES\n");
    return 2;
  }
  const std::string mode = argv[1];
  device::IpcHandle h{};
  auto made = device::make_cuda_driver_backend();
  std::string why = made.status().message();
  std::unique_ptr<device::Backend> b = made ? std::move(made).value() : nullptr;
  bool usable = gputest::from_hex(argv[2], h) && b;
  if (usable) {
    if (base::Status st = b->open_device(0); !st) {
      why = st.message();
      usable = false;
    }
  }
  if (!usable) {
    std::fprintf(stderr, "peer: %s\n", why.c_str());
    return 1;
  }
  void* ptr = nullptr;
  device::EventId e = 0;
  base::Status opened;
  if (mode == "hold-event") {
    auto r = b->open_event(0, h);
    if (r) e = *r;
    opened = r.status();
  } else {
    auto r = b->open_memory(0, h, std::strtoull(argv[3], nullptr, 10));
    if (r) ptr = *r;
    opened = r.status();
  }
  if (!opened) {
    why = opened.message();
    std::fprintf(stderr, "peer: %s\n", why.c_str());
    return 1;
  }
  std::printf("opened\n");
  std::fflush(stdout);
  if (mode == "close-mem-twice") {
    b->close_memory(0, ptr);
    b->close_memory(0, ptr);
    return 0;
  }
  char c;
  while (::read(0, &c, 1) > 0) {
  }
  if (mode == "hold-event") {
    b->close_event(0, e);
  } else {
    b->close_memory(0, ptr);
  }
  return 0;
}
