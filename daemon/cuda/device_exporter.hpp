// The daemon's side of device delivery (CUDA IPC), behind one interface with no CUDA types in
// it: the rest of stokerd includes this header and builds without the CUDA toolkit, and a stub
// (device_exporter_stub.cpp) is linked in builds without CUDA.
//
// Model, per consumer ring (a (job, rank) pair):
//  - one cudaMalloc'd buffer on the consumer's GPU holds the device copy of every slot (slot i
//    at i * slot_stride), exported once with cudaIpcGetMemHandle;
//  - one interprocess event per slot (cudaEventDisableTiming | cudaEventInterprocess), recorded
//    after that slot's copy, so the trainer's stream waits on the GPU, never on the host;
//  - one non-blocking stream per ring; copies come from the job's shared-memory segment, which
//    is page-locked once with cudaHostRegister so that cudaMemcpyAsync is a true DMA.
//
// Ordering rules the caller (Job / control code) keeps:
//  - a slot's host payload is rewritten only after wait_copied(ring, slot) (the DMA may still
//    be reading it after copy_and_publish returned);
//  - a slot's device copy is rewritten only after the consumer released the slot, and the
//    consumer releases only after its own stream finished reading (DeviceImporter::
//    finish_reading), so the daemon never needs to see the trainer's stream.
//
// Plain C++17 (the .cu files include it). Threads: every method may be called from any thread; calls are serialized internally and
// none of them waits for the GPU except wait_copied, free_ring and the destructor.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "stoker/proto/layout.hpp"

namespace stoker::cuda {

// What the device copy of a slot holds.
struct DeviceOutputSpec {
  // false: the host bytes are copied verbatim (any dtype). true: the host bytes are uint8
  // samples of channels x height x width and the device copy is (x/255 - mean[c]) / stddev[c]
  // as out_dtype, so PCIe carries uint8 and the CPU never writes floats.
  bool normalize = false;
  proto::DType out_dtype = proto::DType::kFloat32;  // kFloat32 or kFloat16 when normalizing
  proto::Layout layout = proto::Layout::kNCHW;      // same layout in and out
  std::uint32_t channels = 3;                       // 1..4
  std::uint32_t height = 0;
  std::uint32_t width = 0;
  std::array<float, 4> mean{0, 0, 0, 0};
  std::array<float, 4> stddev{1, 1, 1, 1};
};

// Bytes of the device copy for `host_bytes` of batch data.
constexpr std::uint64_t device_bytes_for(const DeviceOutputSpec& spec, std::uint64_t host_bytes) {
  return spec.normalize ? host_bytes * proto::dtype_size(spec.out_dtype) : host_bytes;
}

// Which consumer ring: rings are numbered per job, the exporter serves every job of the daemon.
struct RingKey {
  std::uint32_t job = 0;
  std::uint32_t rank = 0;
  // Spelled out: the .cu files are C++17 (no <=>).
  bool operator<(const RingKey& o) const { return job != o.job ? job < o.job : rank < o.rank; }
  bool operator==(const RingKey& o) const { return job == o.job && rank == o.rank; }
};

// "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx", the spelling nvidia-smi and
// CUDA_VISIBLE_DEVICES use, for messages.
std::string gpu_uuid_string(const std::uint8_t uuid[16]);

class DeviceExporter {
 public:
  // nullptr, with the reason in `why_not`, when built without CUDA or when no device is usable
  // (no driver, no GPU). Logging the reason once is the caller's job.
  static std::unique_ptr<DeviceExporter> create(std::string& why_not);
  // Whether this build has the CUDA implementation (false: the stub is linked).
  static bool built_with_cuda();

  virtual ~DeviceExporter() = default;

  // Local ordinal of the GPU with this UUID (cudaDeviceProp::uuid). GPUs are never matched by
  // ordinal: the daemon and the trainer may see different CUDA_VISIBLE_DEVICES. -1 and `why`
  // (naming the UUID and the devices stokerd sees) when it is not visible here.
  virtual int find_device(const std::uint8_t uuid[16], std::string& why) = 0;
  // The same by PCI bus id ("0000:18:00.0", as nvidia-smi prints it). -1 and `why` if none.
  virtual int find_device_by_pci_bus_id(const std::string& bus_id, std::string& why) = 0;
  // "NVIDIA H100 80GB HBM3, GPU-..., PCI 0000:18:00.0" for logs; empty for a bad ordinal.
  virtual std::string describe_device(int device) = 0;

  // Page-locks [base, base + bytes) (a job's mapped segment) for asynchronous copies.
  // Registering the same base twice is an error; unregister before unmapping.
  virtual bool register_host(void* base, std::size_t bytes, std::string& why) = 0;
  virtual void unregister_host(void* base) = 0;

  // Device memory for a ring: `slots` slots of at least `slot_bytes` each (the largest
  // device_bytes_for of a batch) on `device`, plus one IPC event per slot. Replaces the ring's
  // previous allocation unless it already matches.
  virtual bool allocate_ring(RingKey ring, int device, std::size_t slot_bytes, std::uint32_t slots,
                             std::string& why) = 0;
  // Frees a ring's device memory and events (consumer disconnected). Waits for the ring's
  // copies in flight. Idempotent. The destructor frees every ring and unregisters every range.
  virtual void free_ring(RingKey ring) = 0;

  // Queues the copy of `host_bytes` from `host` (inside a registered range) into the slot's
  // device copy on the ring's stream, normalizes there when spec.normalize (then `host` holds
  // `count` uint8 samples), records the slot's event and fills out->device_mem_handle,
  // device_event_handle, device_offset and device_bytes. Does not wait for the GPU and does
  // not touch out->flags (setting kBatchOnDevice is the caller's job).
  virtual bool copy_and_publish(RingKey ring, std::uint32_t slot, const void* host,
                                std::size_t host_bytes, std::uint32_t count,
                                const DeviceOutputSpec& spec, proto::SlotHeader* out,
                                std::string& why) = 0;
  // Blocks until the slot's last copy has read its host bytes (usually long done); after it
  // the host payload may be rewritten.
  virtual bool wait_copied(RingKey ring, std::uint32_t slot, std::string& why) = 0;

  // Device bytes currently allocated for rings (statistics, leak tests).
  virtual std::size_t device_bytes_allocated() const = 0;
};

}  // namespace stoker::cuda
