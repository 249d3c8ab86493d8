// Job's per-ring and per-slot state, shared by job.cpp and job_device.cpp only.
#pragma once

#include <chrono>

#include <memory>
#include <mutex>
#include <vector>

#include "server/job.hpp"

namespace stoker::server {

using proto::SlotState;

// The rank's samples of one epoch and how far planning has taken them.
struct Job::EpochStream {
  std::uint64_t epoch = 0;
  std::vector<std::uint32_t> ids;
  std::size_t cursor = 0;          // next unclaimed position in ids
  std::uint64_t next_batch = 0;    // index the next planned batch gets
  bool last_planned = false;       // a batch flagged kBatchLastInEpoch exists
  // Outcome of the samples planned from this stream (guarded by the ring's lock), to end the
  // job when a whole epoch fails; only for streams that start at the epoch's beginning.
  bool whole_epoch = true;
  std::size_t planned = 0, done = 0, good = 0;
  std::vector<std::string> first_failures;  // "path: reason", at most 3

  std::size_t remaining() const { return ids.size() - cursor; }
};

struct Job::Slot {
  SlotState state = SlotState::kFree;
  std::uint32_t generation = 0;
  bool stale = false;              // FILLING but no longer wanted: freed when workers finish
  std::uint64_t epoch = 0;
  std::uint64_t batch_index = 0;
  std::uint32_t count = 0;
  std::uint32_t flags = 0;
  std::uint32_t pending = 0;       // positions still being processed
  std::shared_ptr<EpochStream> stream;
  std::vector<std::uint32_t> ids;  // sample id per position
  std::vector<std::int8_t> ok;     // per position: 1 good, 0 bad, -1 pending
  // The device ring whose copy of this slot may still be reading its host bytes; cleared
  // (after waiting) before the slot is planned again.
  std::shared_ptr<DeviceRing> copied_to;
  std::chrono::steady_clock::time_point leased_at;  // when it became LEASED (stuck consumers)
};

struct Job::Ring {
  mutable std::mutex mu;
  std::uint32_t rank = 0;
  std::vector<Slot> slots;                 // guarded by mu
  std::shared_ptr<EpochStream> planning;   // guarded by mu
  std::uint64_t want_epoch = 0;            // next batch the consumer gets; guarded by mu
  std::uint64_t want_batch = 0;
  bool attached = false;                   // guarded by mu
  std::shared_ptr<DeviceRing> device;      // the attached consumer's device ring; guarded by mu
};

}  // namespace stoker::server
