// A job's shared-memory segment as the layout (proto/stoker/proto/layout.hpp) sees it: the
// header and ring table the daemon writes once, the addresses of each slot's header, payload,
// labels and ids, and the repair of a layout another process scribbled over. The raw sealed
// memfd and its mapping are ShmSegment's (shm_segment.hpp).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "job/shm_segment.hpp"
#include "stoker/proto/layout.hpp"

namespace stoker::job {

class Segment {
 public:
  // Maps a segment of plan.segment_size bytes with `rings` rings of `slots` slots, and writes
  // `header` (its job fields: generation, geometry, samples, labels, name) completed with the
  // layout's fields, and the ring table. Throws std::runtime_error as ShmSegment does.
  Segment(const std::string& name, const proto::SegmentPlan& plan, std::uint32_t rings, std::uint32_t slots,
          proto::SegmentHeader header);
  Segment(const Segment&) = delete;
  Segment& operator=(const Segment&) = delete;

  const ShmSegment& shm() const { return *shm_; }
  const proto::SegmentPlan& plan() const { return plan_; }

  // Rewrites the header and ring table if another process overwrote them; true when it had to.
  bool restore_layout();

  proto::RingHeader* ring_header(std::uint32_t ring) const;
  proto::SlotHeader* slot_header(std::uint32_t ring, std::uint32_t slot) const;
  std::uint8_t* payload(std::uint32_t ring, std::uint32_t slot) const;
  // The slot's labels: int64 class indices, or a mixing job's soft rows (label_row_bytes each).
  std::uint8_t* label_region(std::uint32_t ring, std::uint32_t slot) const;
  std::int64_t* ids(std::uint32_t ring, std::uint32_t slot) const;

 private:
  std::uint64_t first_slot_offset(std::uint32_t ring) const;
  void write_ring_header(std::uint32_t ring);

  const proto::SegmentPlan plan_;
  const std::uint32_t rings_;
  const std::uint32_t slots_;
  std::unique_ptr<ShmSegment> shm_;
  proto::SegmentHeader header_copy_{};  // what the header must say for the life of the segment
};

}  // namespace stoker::job
