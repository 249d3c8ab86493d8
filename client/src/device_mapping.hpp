// The trainer's view of its device ring (DeviceRingMsg): the allocation and the slots' events,
// opened once per connection through the device backend, closed when the connection and every
// batch of it are gone. Batches hold the mapping through their connection, so a tensor never
// outlives the memory it points to.
//
// Per batch: acquire() makes the caller's stream wait for the slot's copy on the GPU (no host
// wait) and marks the slot's range read; release() ends the reads with the work queued on that
// stream so far and records the slot's release event there, which stokerd's copy stream waits
// on before it overwrites the slot. Call release() before sending Release.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "device/device_backend.hpp"
#include "base/status.hpp"
#include "stoker/proto/control.hpp"

namespace stoker::client {

class DeviceMapping {
 public:
  // Validates and opens what `msg` (n bytes, untrusted) announces; throws Failure.
  DeviceMapping(std::shared_ptr<device::Backend> backend, int ordinal, const std::uint8_t* msg,
                std::size_t n, std::uint32_t slot_count, std::uint32_t batch_size,
                std::uint64_t label_bytes = 8);
  ~DeviceMapping();  // closes every handle
  DeviceMapping(const DeviceMapping&) = delete;
  DeviceMapping& operator=(const DeviceMapping&) = delete;

  void* images(std::uint32_t slot) const;
  // The slot's labels as the segment holds them: count rows of label_bytes (int64 class
  // indices, or a mixing job's soft rows).
  void* labels(std::uint32_t slot) const;
  base::Status acquire(std::uint32_t slot, device::StreamId stream);
  base::Status release(std::uint32_t slot, device::StreamId stream);
  // Only the GPU wait for the slot's copy (a second stream reading an acquired batch).
  base::Status wait_copied(std::uint32_t slot, device::StreamId stream);
  // Blocking copy to host memory after `stream`'s work (stokerctl --dump, tests).
  base::Status copy_to_host(std::uint32_t slot, std::uint32_t count, void* images, void* labels,
                            device::StreamId stream);

  int ordinal() const { return ordinal_; }
  device::Backend& backend() const { return *backend_; }
  proto::DType dtype() const { return dtype_; }
  bool normalized() const { return normalized_; }
  std::uint64_t image_bytes() const { return image_bytes_; }
  std::uint64_t alloc_id() const { return alloc_id_; }

 private:
  void close_all();

  std::shared_ptr<device::Backend> backend_;
  int ordinal_;
  proto::DType dtype_ = proto::DType::kUInt8;
  bool normalized_ = false;
  std::uint64_t alloc_bytes_ = 0, slot_stride_ = 0, image_bytes_ = 0, labels_offset_ = 0;
  std::uint64_t alloc_id_ = 0;
  std::uint32_t batch_size_ = 0;
  std::uint64_t label_bytes_ = 8;
  void* base_ = nullptr;
  std::vector<device::EventId> ready_, release_;
};

// The process's importer backend (STOKER_DEVICE_BACKEND), created at first use; throws Failure
// with the reason when there is none.
std::shared_ptr<device::Backend> importer_backend();

}  // namespace stoker::client
