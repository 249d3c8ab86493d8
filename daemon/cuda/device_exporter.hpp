// The daemon's side of device delivery, behind one interface with no CUDA types in it, so
// the rest of stokerd builds and runs without the CUDA toolkit (a stub is linked instead).
//
// Per consumer ring: one cudaMalloc'd buffer on the consumer's GPU holding every slot's
// device copy, exported once as a CUDA IPC memory handle; per slot an interprocess event.
// publish() copies a finished host batch (pinned: the segment is cudaHostRegister'ed) to the
// slot's device copy on the device's own stream, optionally converts uint8 to normalized
// float there (PCIe then carries a quarter of the bytes), records the slot's event, and
// writes the handles into the slot header for the client.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "stoker/proto/layout.hpp"

namespace stoker::cuda {

// uint8 -> (x/255 - mean)/std on the device, for float16/float32 device output.
struct DeviceNormalize {
  bool enabled = false;
  std::array<float, 3> mean{0, 0, 0};
  std::array<float, 3> stddev{1, 1, 1};
  proto::DType out_dtype = proto::DType::kFloat32;
  proto::Layout layout = proto::Layout::kNCHW;
  std::uint32_t height = 0, width = 0;
};

class DeviceExporter {
 public:
  // nullptr, with the reason in `why_not`, when built without CUDA or when no device is usable.
  static std::unique_ptr<DeviceExporter> create(std::string& why_not);
  virtual ~DeviceExporter() = default;

  // Local ordinal of the GPU with this UUID (GPUs are matched by UUID, never by ordinal: the
  // daemon and the trainer may see different CUDA_VISIBLE_DEVICES). -1 and `why` if none.
  virtual int find_device(const std::uint8_t uuid[16], std::string& why) = 0;
  // Pins the shared-memory segment for fast, asynchronous copies.
  virtual bool register_host(void* base, std::size_t bytes, std::string& why) = 0;
  // Device memory for `slots` slots of `slot_bytes` each for one ring; replaces an older one.
  virtual bool allocate_ring(std::uint32_t ring, int device, std::size_t slot_bytes,
                             std::uint32_t slots, std::string& why) = 0;
  // Frees a ring's device memory (consumer gone, daemon stopping). Idempotent.
  virtual void free_ring(std::uint32_t ring) = 0;
  // Copies `bytes` of batch data from pinned `host` into the ring's slot, normalizes when
  // asked (then `bytes` are uint8 and the device copy is float), records the slot's IPC event
  // and fills the device fields of `header` (kBatchOnDevice is the caller's to set).
  virtual bool publish(std::uint32_t ring, std::uint32_t slot, const void* host, std::size_t bytes,
                       std::uint32_t count, const DeviceNormalize& norm, proto::SlotHeader* header,
                       std::string& why) = 0;
};

}  // namespace stoker::cuda
