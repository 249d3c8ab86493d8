// The trainer's side of cuda_backend_test's IPC case, through libstoker's backend (driver API,
// no kernels): find the GPU by UUID, open the memory and both events, make its own stream wait
// for the ready event, read the bytes, record the release event, close everything.
//   stoker_gpu_ipc_peer UUID MEM_HANDLE READY_HANDLE RELEASE_HANDLE BYTES
// Exit 0 when the bytes are the pattern; 1 otherwise (with the reason on stderr).
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "ipc_peer_protocol.hpp"

using namespace stoker;

int main(int argc, char** argv) {
  auto fail = [](const std::string& why) {
    std::fprintf(stderr, "ipc_peer: %s\n", why.c_str());
    return 1;
  };
  if (argc != 6) return fail("usage: UUID MEM READY RELEASE BYTES");
  device::Uuid uuid;
  device::IpcHandle mem_h, ready_h, release_h;
  if (!device::parse_uuid(argv[1], uuid) || !gputest::from_hex(argv[2], mem_h) ||
      !gputest::from_hex(argv[3], ready_h) || !gputest::from_hex(argv[4], release_h)) {
    return fail("bad arguments");
  }
  const std::size_t bytes = std::strtoull(argv[5], nullptr, 10);
  auto made = device::make_cuda_driver_backend();
  if (!made) return fail(made.status().message());
  auto b = std::move(made).value();
  int ordinal = -1;
  for (const auto& d : b->devices().devices) {
    if (d.uuid == uuid) ordinal = d.ordinal;
  }
  if (ordinal < 0) return fail("GPU " + std::string(argv[1]) + " not visible");
  if (auto st = b->open_device(ordinal); !st) return fail(st.message());
  void* ptr = nullptr;
  device::EventId ready = 0, release = 0;
  device::StreamId s = 0;
  if (auto mem = b->open_memory(ordinal, mem_h, bytes); mem) {
    ptr = *mem;
  } else {
    return fail(mem.status().message());
  }
  for (auto [h, e] : {std::pair{&ready_h, &ready}, std::pair{&release_h, &release}}) {
    auto opened = b->open_event(ordinal, *h);
    if (!opened) return fail(opened.status().message());
    *e = *opened;
  }
  if (auto made = b->create_stream(ordinal); made) {
    s = *made;
  } else {
    return fail(made.status().message());
  }
  if (auto st = b->stream_wait(ordinal, s, ready); !st) return fail(st.message());
  std::vector<std::uint8_t> host(bytes);
  if (auto st = b->copy_to_host(ordinal, s, host.data(), ptr, bytes); !st) return fail(st.message());
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < bytes; ++i) wrong += host[i] != gputest::pattern_byte(i);
  if (auto st = b->record(ordinal, release, s); !st) return fail(st.message());
  if (auto st = b->synchronize_stream(ordinal, s); !st) return fail(st.message());
  b->close_event(ordinal, ready);
  b->close_event(ordinal, release);
  b->close_memory(ordinal, ptr);
  b->destroy_stream(ordinal, s);
  if (wrong != 0) return fail(std::to_string(wrong) + " bytes differ from the pattern");
  std::printf("ipc_peer: %zu bytes read through CUDA IPC, release recorded\n", bytes);
  return 0;
}
