// Job's reader-facing calls: each forwards to the rank's Ring (ring.hpp, ring_readers.cpp),
// then pushes the work the ring planned once its mutex is released (lock order: ring mutex,
// then the work queue's).
#include "job/job.hpp"

namespace stoker::job {

base::Result<AttachResult> Job::attach(std::uint32_t rank, std::uint32_t reader, std::uint64_t epoch,
                                       std::uint64_t batch, std::shared_ptr<delivery::DeviceRing> device) {
  std::vector<WorkItem> items;
  base::Result<AttachResult> r = ring_of(rank).attach(reader, BatchPos{epoch, batch}, std::move(device), items);
  if (r) queue_.push(std::move(items));
  return r;
}

std::shared_ptr<delivery::DeviceRing> Job::detach(std::uint32_t rank, std::uint32_t reader) {
  std::vector<WorkItem> items;
  auto device = ring_of(rank).detach(reader, items);
  queue_.push(std::move(items));
  return device;
}

std::optional<proto::BatchMsg> Job::take_ready(std::uint32_t rank, std::uint32_t reader) {
  return ring_of(rank).take(reader);
}

bool Job::release(std::uint32_t rank, std::uint32_t reader, std::uint32_t s, std::uint32_t generation) {
  std::vector<WorkItem> items;
  if (!ring_of(rank).release(reader, s, generation, items)) return false;
  queue_.push(std::move(items));
  return true;
}

double Job::oldest_lease_s(std::uint32_t rank, std::uint32_t reader) {
  return ring_of(rank).oldest_lease_s(reader);
}

std::vector<RingStatus> Job::ring_status() const {
  std::vector<RingStatus> out;
  for (const auto& ring : rings_) out.push_back(ring->status(batches_per_epoch(ring->config().rank)));
  return out;
}

void Job::drain() {
  // Each ring is told after the flag is set; once this returns no ring plans again.
  draining_.store(true);
  for (auto& ring : rings_) ring->drain();
}

bool Job::drained_for(std::uint32_t rank, std::uint32_t reader) {
  if (!draining_.load()) return false;
  return ring_of(rank).drained_for(reader);
}

void Job::settle_device_copies() {
  for (auto& ring : rings_) ring->settle_device_copies();
}

}  // namespace stoker::job
