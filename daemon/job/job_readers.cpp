// Job's reader-facing calls: each forwards to the rank's Ring (ring.hpp, ring_readers.cpp),
// then pushes the work the ring planned once its mutex is released (lock order: ring mutex,
// then the work queue's).
#include "job/job.hpp"

#include <algorithm>

namespace stoker::job {

namespace {

std::string point_string(std::uint64_t epoch, std::uint64_t consumed, std::uint64_t batch) {
  if (consumed == 0) {
    return "epoch " + std::to_string(epoch) + " batch " + std::to_string(batch) +
           " without a global position (a per-rank position)";
  }
  return "global position " + std::to_string(consumed) + " of epoch " + std::to_string(epoch) +
         " (samples consumed by the whole world)";
}

}  // namespace

base::Result<AttachResult> Job::attach(std::uint32_t rank, std::uint32_t reader, std::uint64_t epoch,
                                       std::uint64_t batch, std::optional<std::uint64_t> consumed,
                                       std::shared_ptr<delivery::DeviceRing> device) {
  const ResumePoint mine{epoch, consumed.value_or(0), batch};
  std::optional<EpochStart> start;
  if (mine.consumed > 0) start = EpochStart{epoch, mine.consumed};
  bool idle = true;
  for (const auto& ring : rings_) idle = idle && !ring->any_reader_attached();
  if (idle) starts_.clear();
  // Ranks resuming from checkpoints of different steps would serve overlapping or missing
  // samples: never mix them. Two resume points conflict when they are in the same epoch, at
  // least one is a global position, and they differ. Points in different epochs are not
  // compared (a consumer that reconnects past the elastic epoch, or after a daemon restart).
  const bool point = mine.consumed > 0 || mine.batch > 0;
  if (point) {
    for (const ResumePoint& other : starts_) {
      if (other.epoch != mine.epoch || (other.consumed == 0 && mine.consumed == 0) ||
          other.consumed == mine.consumed) {
        continue;
      }
      return base::Status::error("rank " + std::to_string(rank) + " of job '" + cfg_.name + "' asks to start at " +
                                 point_string(mine.epoch, mine.consumed, mine.batch) +
                                 ", but the job's other consumers started at " +
                                 point_string(other.epoch, other.consumed, other.batch) +
                                 "; every rank must resume from the same checkpoint: restart them together");
    }
  }
  std::vector<WorkItem> items;
  base::Result<AttachResult> r =
      ring_of(rank).attach(reader, BatchPos{epoch, batch}, start, std::move(device), items);
  if (r) {
    queue_.push(std::move(items));
    if (*r == AttachResult::kAttached && point && std::find(starts_.begin(), starts_.end(), mine) == starts_.end()) {
      starts_.push_back(mine);
    }
  }
  return r;
}

std::shared_ptr<delivery::DeviceRing> Job::detach(std::uint32_t rank, std::uint32_t reader,
                                                  const std::vector<std::uint32_t>& untaken) {
  std::vector<WorkItem> items;
  auto device = ring_of(rank).detach(reader, items, untaken);
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

void Job::retry_planning() {
  std::vector<WorkItem> items;
  for (auto& ring : rings_) ring->retry_planning(items);
  if (!items.empty()) queue_.push(std::move(items));
}

void Job::touch_leases(std::uint32_t rank, std::uint32_t reader) { ring_of(rank).touch_leases(reader); }

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
