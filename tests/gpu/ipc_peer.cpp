// stoker_gpu_ipc_peer SOCKET_FD MEMFD MEMFD_BYTES: the trainer's side of the gpu tier's IPC
// test (see ipc_peer_protocol.hpp). Maps each published slot through DeviceImporter, reads it
// back on its own stream and compares it with the host batch in the shared memfd.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <sys/mman.h>
#include <sys/socket.h>
#include <vector>

#include "cuda/device_importer.hpp"
#include "gpu_test_support.hpp"
#include "ipc_peer_protocol.hpp"

using namespace stoker::gputest;

namespace {

void set_message(char (&dst)[256], const std::string& s) {
  std::snprintf(dst, sizeof dst, "%s", s.c_str());
}

PeerReply check(stoker::cuda::DeviceImporter& importer, const PeerRequest& r, const std::uint8_t* host, void* stream) {
  PeerReply reply{};
  std::string why;
  void* ptr = importer.map(r.header, r.generation, stream, why);
  reply.open_memory_handles = importer.open_memory_handles();
  reply.open_event_handles = importer.open_event_handles();
  if (ptr == nullptr) {
    set_message(reply.message, "map: " + why);
    return reply;
  }
  std::vector<std::uint8_t> back(r.header.device_bytes);
  if (!copy_to_host(back.data(), ptr, back.size(), stream, why) || !importer.finish_reading(stream, why)) {
    set_message(reply.message, why);
    return reply;
  }
  const std::uint8_t* want = host + r.host_offset;
  if (r.normalize == 0) {
    if (r.header.device_bytes != r.host_bytes) {
      set_message(reply.message, "device_bytes " + std::to_string(r.header.device_bytes) + " != host bytes " +
                                     std::to_string(r.host_bytes));
      return reply;
    }
    for (std::size_t i = 0; i < back.size(); ++i) {
      if (back[i] != want[i]) {
        set_message(reply.message, "device byte " + std::to_string(i) + " is " + std::to_string(back[i]) +
                                       ", the host batch has " + std::to_string(want[i]));
        return reply;
      }
    }
    reply.ok = 1;
    return reply;
  }
  NormalizeCase c;
  c.images = r.count;
  c.channels = r.channels;
  c.height = r.height;
  c.width = r.width;
  c.nhwc = r.nhwc != 0;
  c.out_half = r.out_half != 0;
  std::memcpy(c.mean, r.mean, sizeof c.mean);
  std::memcpy(c.stddev, r.stddev, sizeof c.stddev);
  const std::size_t es = c.out_half ? 2 : 4;
  if (r.header.device_bytes != r.host_bytes * es) {
    set_message(reply.message, "device_bytes " + std::to_string(r.header.device_bytes) + " for " +
                                   std::to_string(r.host_bytes) + " normalized host bytes");
    return reply;
  }
  for (std::size_t i = 0; i < r.host_bytes; ++i) {
    float v;
    if (c.out_half) {
      std::uint16_t h;
      std::memcpy(&h, back.data() + 2 * i, 2);
      v = half_to_float(h);
    } else {
      std::memcpy(&v, back.data() + 4 * i, 4);
    }
    const double err = std::fabs(v - normalize_reference(want[i], i, c));
    reply.max_error = std::fmax(reply.max_error, err);
    if (!(err <= normalize_tolerance(want[i], i, c))) {
      set_message(reply.message, "normalized element " + std::to_string(i) + " is off by " + std::to_string(err));
      return reply;
    }
  }
  reply.ok = 1;
  return reply;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: %s SOCKET_FD MEMFD MEMFD_BYTES\n", argv[0]);
    return 2;
  }
  const int sock = std::atoi(argv[1]);
  const int memfd = std::atoi(argv[2]);
  const std::size_t bytes = std::strtoull(argv[3], nullptr, 10);
  auto* host = static_cast<const std::uint8_t*>(mmap(nullptr, bytes, PROT_READ, MAP_SHARED, memfd, 0));

  PeerHello hello{};
  std::string why;
  auto importer = stoker::cuda::DeviceImporter::create(0, why);
  void* stream = importer ? stream_create(0, why) : nullptr;
  if (host == MAP_FAILED) {
    set_message(hello.message, "cannot map the host batches");
  } else if (importer && stream && stoker::cuda::DeviceImporter::device_uuid(0, hello.uuid, why)) {
    hello.ok = 1;
  } else {
    set_message(hello.message, why);
  }
  if (send(sock, &hello, sizeof hello, 0) != sizeof hello || hello.ok == 0) return 1;

  for (;;) {
    PeerRequest r{};
    if (recv(sock, &r, sizeof r, 0) != sizeof r || r.op != PeerOp::kCheck) break;
    const PeerReply reply = check(*importer, r, host, stream);
    if (send(sock, &reply, sizeof reply, 0) != sizeof reply) return 1;
  }
  stream_destroy(stream);
  importer.reset();  // closes every handle before the daemon side frees the ring
  return 0;
}
