// The client's side of device delivery, with no CUDA types in the interface (a stub is built
// without the toolkit). Opens each ring's IPC memory handle once per daemon generation, makes
// the caller's stream wait for a slot's event (no host synchronization), and returns the
// slot's device pointer.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "stoker/proto/layout.hpp"

namespace stoker::cuda {

class DeviceImporter {
 public:
  // nullptr and the reason when built without CUDA or no device is usable.
  static std::unique_ptr<DeviceImporter> create(std::string& why_not);
  virtual ~DeviceImporter() = default;

  // UUID of local device `ordinal`, sent in the Hello so the daemon finds the same GPU.
  virtual bool device_uuid(int ordinal, std::uint8_t out[16], std::string& why) = 0;
  // Device pointer of a published slot; `stream` (a cudaStream_t, may be null) waits for the
  // slot's event. A new `daemon_generation` drops every cached mapping first.
  virtual void* map(const proto::SlotHeader& header, std::uint64_t daemon_generation, void* stream,
                    std::string& why) = 0;
};

}  // namespace stoker::cuda
