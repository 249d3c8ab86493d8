// Messages between ipc_test (the daemon's role: DeviceExporter) and stoker_gpu_ipc_peer (the
// trainer's role: DeviceImporter), over an inherited SOCK_SEQPACKET socket. The peer is a
// fresh exec'ed process: a process that forks after initializing CUDA cannot use CUDA in the
// child, and a real trainer is a separate program anyway.
#pragma once

#include <cstdint>

#include "stoker/proto/layout.hpp"

namespace stoker::gputest {

struct PeerHello {
  std::int32_t ok;
  std::uint8_t uuid[16];     // of the peer's device 0, as the Hello would carry it
  char message[256];
};

enum class PeerOp : std::uint32_t { kCheck = 1, kQuit = 2 };

struct PeerRequest {
  PeerOp op;
  std::uint32_t count;
  proto::SlotHeader header;  // as the daemon filled it
  std::uint64_t generation;  // daemon generation
  std::uint64_t host_offset; // the host batch in the shared memfd, for comparison
  std::uint64_t host_bytes;
  std::uint32_t normalize;   // 0: device bytes must equal host bytes
  std::uint32_t out_half;
  std::uint32_t nhwc;
  std::uint32_t channels, height, width;
  float mean[4];
  float stddev[4];
};

struct PeerReply {
  std::int32_t ok;
  double max_error;
  std::uint64_t open_memory_handles;
  std::uint64_t open_event_handles;
  char message[256];
};

}  // namespace stoker::gputest
