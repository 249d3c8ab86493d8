// Job's side of device delivery: what a device ring needs to open, and the copy of one
// slot's host bytes (the ring keeps which copies may still read them: ring.hpp).

#include "job/job.hpp"

#include "log/log.hpp"

namespace stoker::job {

delivery::DeviceRingRequest Job::device_request() const {
  delivery::DeviceRingRequest req;
  req.job = this;
  req.job_name = cfg_.name;
  req.segment_base = segment_->shm().base();
  req.segment_size = segment_->shm().size();
  req.slots = cfg_.prefetch;
  req.batch_size = cfg_.batch_size;
  req.label_bytes = label_bytes();
  req.host = cfg_.pipeline;
  if (cfg_.device_normalize) req.normalize = cfg_.device_pipeline;
  return req;
}

bool Job::copy_to_device(std::uint32_t ring, std::uint32_t s, std::uint32_t count, std::uint64_t epoch,
                         std::uint64_t batch_index, delivery::DeviceRing& to) {
  if (base::Status st = to.copy_slot(s, segment_->payload(ring, s), count, segment_->label_region(ring, s)); !st) {
    stoker::log::error("job {} rank {}: batch {}:{} not copied to the device: {}", cfg_.name, ring, epoch, batch_index,
                       st.message());
    return false;
  }
  return true;
}

}  // namespace stoker::job
