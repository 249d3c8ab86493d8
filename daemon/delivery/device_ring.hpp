// The device side of one consumer's ring: one allocation on the consumer's GPU holding every
// slot's device copy, two interprocess events per slot and a copy stream.
//
// Ordering, all on the device (no host wait on a hot path):
//   copy_slot(s):  stream waits release[s]   (the consumer recorded it on its stream before it
//                                             released slot s: its reads of the last batch in
//                                             slot s are done before the overwrite)
//                  H2D images (+ normalize), H2D labels (as the segment holds them: int64
//                  class indices or soft rows), record ready[s]
//   consumer:      its stream waits ready[s], reads, records release[s], sends Release.
// Host payload reuse: the copy reads the slot's host bytes asynchronously, so the job calls
// wait_host_read(s) before workers rewrite that slot (in practice long complete).
//
// Lifetime: the allocation and events are opened by the consumer; they are destroyed only by
// release_resources(), which DeviceDelivery calls once the consumer said it unmapped or its
// process is gone. A ring dropped without it leaks on purpose (stokerd stopping under a live
// consumer: the driver frees everything when stokerd exits).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "device/device_backend.hpp"
#include "base/mutex.hpp"
#include "base/status.hpp"
#include "stoker/proto/control.hpp"

namespace stoker::delivery {

struct DeviceRingPlan {
  std::uint32_t slots = 0;
  std::uint32_t batch_size = 0;
  std::uint64_t host_image_bytes = 0;    // one sample as the workers write it
  std::uint64_t device_image_bytes = 0;  // one sample on the device
  std::uint64_t label_bytes = 8;         // one sample's labels, copied as the host has them
                                         // (int64 class index, or a mixing job's soft row)
  proto::DType device_dtype = proto::DType::kUInt8;
  bool normalize = false;                // uint8 host samples -> spec's table on the device
  device::NormalizeSpec spec;
};

class DeviceRing {
 public:
  // The ring, or why the device cannot hold it (out of memory, sticky error).
  static base::Result<std::shared_ptr<DeviceRing>> create(device::Backend& backend, int device,
                                                          const device::Uuid& uuid,
                                                          const DeviceRingPlan& plan,
                                                          std::uint64_t alloc_id);
  ~DeviceRing();
  DeviceRing(const DeviceRing&) = delete;
  DeviceRing& operator=(const DeviceRing&) = delete;

  // Queues slot s's copy (see the ordering above). `images` holds `count` samples, `labels`
  // count rows of plan.label_bytes.
  base::Status copy_slot(std::uint32_t s, const std::uint8_t* images, std::uint32_t count,
                         const void* labels);
  // Host wait until slot s's last copy has read its host bytes.
  void wait_host_read(std::uint32_t s);
  // Host wait for every queued copy.
  void synchronize();
  // Frees the allocation and destroys the events (no peer may have them open any more).
  void release_resources();

  // DeviceRingMsg followed by the slots' handles, ready to send.
  std::vector<std::uint8_t> message() const;
  std::uint64_t alloc_id() const { return alloc_id_; }
  int device() const { return device_; }
  const device::Uuid& uuid() const { return uuid_; }
  std::size_t device_bytes() const { return memory_.bytes + staging_.bytes; }

  // The consumer said kUnmapped: nothing of this ring is open in its process any more.
  std::atomic<bool> unmapped{false};

 private:
  DeviceRing(device::Backend& backend, int device, const device::Uuid& uuid,
             const DeviceRingPlan& plan, std::uint64_t alloc_id);

  device::Backend& backend_;
  const int device_;
  const device::Uuid uuid_;
  const DeviceRingPlan plan_;
  const std::uint64_t alloc_id_;
  std::uint64_t slot_stride_ = 0;
  std::uint64_t labels_offset_ = 0;

  // Serializes copies queued on stream_ (workers and the control thread) and their end.
  base::Mutex mu_;
  device::StreamId stream_ STOKER_GUARDED_BY(mu_) = 0;
  bool have_stream_ STOKER_GUARDED_BY(mu_) = false;
  // Allocated by create() and freed by release_resources() (both under mu_); message() and
  // device_bytes() read them unlocked, which is safe while the ring is live (not yet
  // released): nothing else writes them.
  device::DeviceBuffer memory_;   // exported: slots × slot_stride_
  device::DeviceBuffer staging_;  // uint8 batch before normalize (not exported)
  std::vector<device::EventId> ready_ STOKER_GUARDED_BY(mu_), release_ STOKER_GUARDED_BY(mu_);
  // Filled by create() only; read-only afterwards.
  std::vector<device::IpcHandle> ready_handles_, release_handles_;
  // Per slot: a copy was queued since the last wait.
  std::vector<std::uint8_t> copied_ STOKER_GUARDED_BY(mu_);
  bool released_ STOKER_GUARDED_BY(mu_) = false;
};

}  // namespace stoker::delivery
