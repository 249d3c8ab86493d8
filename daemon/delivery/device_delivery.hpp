// Device delivery for the whole daemon: picks the consumer's GPU by UUID, page-locks a job's
// segment at its first device consumer, builds a DeviceRing per device connection and frees
// it only when its consumer is done with it.
//
// Threads: the control thread calls open_ring/retire/reap; workers only use the DeviceRings.
// Freeing happens on a reaper thread (it waits for the ring's copy stream).
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "delivery/device_ring.hpp"
#include "device/device_backend.hpp"
#include "image/pipeline_spec.hpp"
#include "base/mutex.hpp"
#include "base/status.hpp"

namespace stoker::delivery {

// What device delivery needs to know of a job (it never sees the job itself): the host
// segment, page-locked once per job, and the shape of the batches its rings carry.
struct DeviceRingRequest {
  const void* job = nullptr;       // the job's identity: its registration is keyed by it
  std::string job_name;            // for messages
  void* segment_base = nullptr;
  std::size_t segment_size = 0;
  std::uint32_t slots = 0;         // the job's prefetch
  std::uint32_t batch_size = 0;
  std::uint64_t label_bytes = 0;   // one sample's label row
  image::PipelineSpec host;        // what the workers write into the segment
  std::optional<image::PipelineSpec> normalize;  // device_normalize: the output on the GPU
};

// A consumer's process, for "is it gone?" (a pidfd where the kernel has them, so a reused pid
// is never mistaken for the consumer).
class PeerProcess {
 public:
  explicit PeerProcess(std::int32_t pid);
  ~PeerProcess();
  PeerProcess(const PeerProcess&) = delete;
  PeerProcess& operator=(const PeerProcess&) = delete;
  bool alive() const;
  std::int32_t pid() const { return pid_; }

 private:
  std::int32_t pid_;
  int pidfd_ = -1;
};

class DeviceDelivery {
 public:
  // `backend` may be null: then every device request is refused with `why_not`.
  DeviceDelivery(std::unique_ptr<device::Backend> backend, std::string why_not);
  ~DeviceDelivery();  // calls shutdown()
  DeviceDelivery(const DeviceDelivery&) = delete;
  DeviceDelivery& operator=(const DeviceDelivery&) = delete;

  bool available() const { return backend_ != nullptr; }
  const std::string& why_not() const { return why_not_; }
  // "hostsim: 2 device(s): GPU-..., GPU-..." for the start-up log and status.
  std::string describe();

  // A consumer of the job `req` describes asks for its batches on the GPU with this UUID.
  // The ring, or the refusal the consumer sees when that cannot be served.
  base::Result<std::shared_ptr<DeviceRing>> open_ring(const DeviceRingRequest& req,
                                                      const std::uint8_t uuid[16],
                                                      std::uint32_t client_backend);
  // The consumer's connection ended: free the ring once `peer` is gone or ring->unmapped.
  void retire(std::shared_ptr<DeviceRing> ring, std::shared_ptr<PeerProcess> peer);
  // A consumer process says it closed ring `alloc_id` after its connection ended. false when
  // no retired ring of that id belongs to `pid`.
  bool mark_unmapped(std::uint64_t alloc_id, std::int32_t pid);
  // Hands retired rings that may now be freed to the reaper; the control loop calls it.
  void reap();
  // A job is about to be destroyed (no consumer left, Job::settle_device_copies done):
  // unregisters its segment if a device consumer had it page-locked.
  // `job`: DeviceRingRequest::job.
  void forget_job(const void* job);
  // Before the jobs' segments are unmapped: waits for every copy, frees what may be freed,
  // unregisters the segments. Idempotent.
  void shutdown();

  std::size_t live_rings();      // retired rings not yet freed + rings being freed
  std::uint64_t rings_freed();

 private:
  struct Retired {
    std::shared_ptr<DeviceRing> ring;
    std::shared_ptr<PeerProcess> peer;
  };
  void reaper_loop();

  std::unique_ptr<device::Backend> backend_;
  const std::string why_not_;
  // Lock order: mu_, then a DeviceRing's own mutex (forget_job and shutdown synchronize
  // rings under mu_); a ring never takes mu_.
  base::Mutex mu_;
  std::map<int, bool> opened_ STOKER_GUARDED_BY(mu_);  // device ordinal -> opened
  // job -> (device whose context registered it, segment base). Registered once per job,
  // portable to every context (cudaHostRegisterPortable).
  std::map<const void*, std::pair<int, void*>> registered_ STOKER_GUARDED_BY(mu_);
  // Every ring made, to sync at shutdown.
  std::vector<std::weak_ptr<DeviceRing>> rings_ STOKER_GUARDED_BY(mu_);
  std::vector<Retired> retired_ STOKER_GUARDED_BY(mu_);
  std::uint64_t next_alloc_id_ STOKER_GUARDED_BY(mu_) = 1;
  std::uint64_t freed_ STOKER_GUARDED_BY(mu_) = 0;

  std::deque<std::shared_ptr<DeviceRing>> to_free_ STOKER_GUARDED_BY(mu_);
  base::CondVar reaper_cv_;
  bool stopping_ STOKER_GUARDED_BY(mu_) = false;
  bool shut_down_ STOKER_GUARDED_BY(mu_) = false;
  std::thread reaper_;
};

}  // namespace stoker::delivery
