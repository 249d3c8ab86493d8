// Job's hooks into device delivery: which slot is copied to which reader's device ring, and
// the host-side fence before workers rewrite a slot a copy may still be reading.
#include <algorithm>

#include <spdlog/spdlog.h>

#include "job/job.hpp"
#include "job/job_state.hpp"

namespace stoker::job {

delivery::DeviceRingRequest Job::device_request() const {
  delivery::DeviceRingRequest req;
  req.job = this;
  req.job_name = cfg_.name;
  req.segment_base = segment_->base();
  req.segment_size = segment_->size();
  req.slots = cfg_.prefetch;
  req.batch_size = cfg_.batch_size;
  req.label_bytes = label_bytes();
  req.host = cfg_.pipeline;
  if (cfg_.device_normalize) req.normalize = cfg_.device_pipeline;
  return req;
}

bool Job::copy_to_device(Ring& ring, std::uint32_t s, const std::shared_ptr<delivery::DeviceRing>& to) {
  Slot& slot = ring.slots[s];
  std::string why;
  if (!to->copy_slot(s, payload(ring.rank, s), slot.count, label_region(ring.rank, s), why)) {
    spdlog::error("job {} rank {}: batch {}:{} not copied to the device: {}", cfg_.name, ring.rank,
                  slot.epoch, slot.batch_index, why);
    return false;
  }
  // Each reader's ring is copied at most once per planning of the slot; several readers on
  // several GPUs each have their own copy reading the same host bytes.
  if (std::find(slot.copied_to.begin(), slot.copied_to.end(), to) == slot.copied_to.end()) {
    slot.copied_to.push_back(to);
  }
  return true;
}

void Job::settle_device_copy(Ring& ring, std::uint32_t s) {
  Slot& slot = ring.slots[s];
  for (const auto& ring_copy : slot.copied_to) ring_copy->wait_host_read(s);
  slot.copied_to.clear();
}

std::shared_ptr<delivery::DeviceRing> Job::drop_device(Ring& ring, Reader& reader) {
  if (!reader.device) return nullptr;
  for (std::uint32_t s = 0; s < ring.slots.size(); ++s) {
    auto& copies = ring.slots[s].copied_to;
    if (std::find(copies.begin(), copies.end(), reader.device) == copies.end()) continue;
    reader.device->wait_host_read(s);
    std::erase(copies, reader.device);
  }
  return std::move(reader.device);
}

}  // namespace stoker::job
