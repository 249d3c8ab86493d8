// The trainer's side of device delivery (CUDA IPC), with no CUDA types in the interface: a
// stub is linked when libstoker is built without the toolkit.
//
// One importer per connection to stokerd. For a batch the daemon published on the device
// (SlotHeader::flags has kBatchOnDevice), map() opens the ring's IPC memory handle and the
// slot's IPC event handle the first time it sees them (cached afterwards; a new daemon
// generation drops the cache, since a restarted daemon's handles are new), makes the caller's
// stream wait for the slot's copy on the GPU (cudaStreamWaitEvent: no host synchronization),
// and returns the slot's device pointer. Before the slot is released to the daemon,
// finish_reading() waits until the work the trainer queued on that stream is done, so the
// daemon never overwrites device memory that a kernel still reads.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "stoker/proto/layout.hpp"

namespace stoker::cuda {

class DeviceImporter {
 public:
  // Whether this build has the CUDA implementation (false: the stub is linked).
  static bool built_with_cuda();
  // UUID of the trainer's device `ordinal` (numbered as this process sees them, i.e. after its
  // CUDA_VISIBLE_DEVICES), for HelloMsg::device_uuid. false and `why` without CUDA or device.
  static bool device_uuid(int ordinal, std::uint8_t out[16], std::string& why);
  // An importer that maps batches on device `ordinal`; nullptr and `why_not` when built
  // without CUDA or when the device is not usable.
  static std::unique_ptr<DeviceImporter> create(int ordinal, std::string& why_not);

  // Closes every handle it opened.
  virtual ~DeviceImporter() = default;

  virtual int device() const = 0;
  // Device pointer of the slot's data (header.device_bytes bytes), valid until the next
  // generation change or drop_all(). `stream` is a cudaStream_t on device() (nullptr: the
  // legacy default stream); work queued on it afterwards sees the finished copy. nullptr and
  // `why` on failure.
  virtual void* map(const proto::SlotHeader& header, std::uint64_t daemon_generation, void* stream,
                    std::string& why) = 0;
  // Blocks until the work queued so far on `stream` is done; call it before releasing a slot
  // whose device data that work reads.
  virtual bool finish_reading(void* stream, std::string& why) = 0;
  // Closes every cached handle (connection closed or daemon gone).
  virtual void drop_all() = 0;
  // Memory handles and event handles currently open (statistics, tests).
  virtual std::size_t open_memory_handles() const = 0;
  virtual std::size_t open_event_handles() const = 0;
};

}  // namespace stoker::cuda
