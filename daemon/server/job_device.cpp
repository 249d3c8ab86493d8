// Job's hooks into device delivery: which slot is copied to which consumer's device ring, and
// the host-side fence before workers rewrite a slot a copy may still be reading.
#include <spdlog/spdlog.h>

#include "server/job.hpp"
#include "server/job_state.hpp"

namespace stoker::server {

bool Job::copy_to_device(Ring& ring, std::uint32_t s) {
  Slot& slot = ring.slots[s];
  // An earlier ring's copy of this slot must have read the host bytes before they are read
  // again (harmless) - and, more to the point, before that ring can be freed.
  if (slot.copied_to && slot.copied_to != ring.device) settle_device_copy(ring, s);
  std::string why;
  if (!ring.device->copy_slot(s, payload(ring.rank, s), slot.count, labels(ring.rank, s), why)) {
    spdlog::error("job {} rank {}: batch {}:{} not copied to the device: {}", cfg_.name, ring.rank,
                  slot.epoch, slot.batch_index, why);
    return false;
  }
  slot.copied_to = ring.device;
  return true;
}

void Job::settle_device_copy(Ring& ring, std::uint32_t s) {
  Slot& slot = ring.slots[s];
  if (!slot.copied_to) return;
  slot.copied_to->wait_host_read(s);
  slot.copied_to.reset();
}

std::shared_ptr<DeviceRing> Job::drop_device(Ring& ring) {
  if (!ring.device) return nullptr;
  for (std::uint32_t s = 0; s < ring.slots.size(); ++s) {
    if (ring.slots[s].copied_to == ring.device) settle_device_copy(ring, s);
  }
  return std::move(ring.device);
}

}  // namespace stoker::server
