// Segment (segment.hpp): the layout written once, its addresses, and its repair.
#include "job/segment.hpp"

#include <cstring>

namespace stoker::job {

Segment::Segment(const std::string& name, const proto::SegmentPlan& plan, std::uint32_t rings, std::uint32_t slots,
                 proto::SegmentHeader header)
    : plan_(plan), rings_(rings), slots_(slots), shm_(std::make_unique<ShmSegment>(name, plan.segment_size)) {
  header.magic = proto::kSegmentMagic;
  header.layout_major = proto::kLayoutMajor;
  header.layout_minor = proto::kLayoutMinor;
  header.segment_size = plan_.segment_size;
  header.ring_count = rings;
  header.slots_per_ring = slots;
  header.ring_table_offset = plan_.ring_table_offset;
  header.slot_stride = plan_.slot_stride;
  header.payload_offset = plan_.payload_offset;
  header.labels_offset = plan_.labels_offset;
  header.ids_offset = plan_.ids_offset;
  // Byte for byte (padding included), as restore_layout compares them.
  std::memcpy(shm_->base(), &header, sizeof header);
  std::memcpy(&header_copy_, shm_->base(), sizeof header_copy_);
  for (std::uint32_t r = 0; r < rings_; ++r) write_ring_header(r);
}

std::uint64_t Segment::first_slot_offset(std::uint32_t ring) const {
  return plan_.first_slot_offset + static_cast<std::uint64_t>(ring) * slots_ * plan_.slot_stride;
}

void Segment::write_ring_header(std::uint32_t ring) {
  auto* rh = ring_header(ring);
  rh->rank = ring;
  rh->slot_count = slots_;
  rh->first_slot_offset = first_slot_offset(ring);
}

bool Segment::restore_layout() {
  // Only the daemon writes the segment's layout; a process of the same user can still open
  // the memfd through /proc and scribble on it. Consumers check the layout at attach and
  // refuse a wrong one, so it is put back before each attach: other jobs are unaffected and
  // the job recovers without a restart. The ring headers' statistics are left as they are.
  auto* h = reinterpret_cast<proto::SegmentHeader*>(shm_->base());
  bool repaired = std::memcmp(h, &header_copy_, sizeof header_copy_) != 0;
  if (repaired) std::memcpy(h, &header_copy_, sizeof header_copy_);
  for (std::uint32_t r = 0; r < rings_; ++r) {
    const auto* rh = ring_header(r);
    if (rh->rank != r || rh->slot_count != slots_ || rh->first_slot_offset != first_slot_offset(r)) {
      write_ring_header(r);
      repaired = true;
    }
  }
  return repaired;
}

proto::RingHeader* Segment::ring_header(std::uint32_t ring) const {
  return reinterpret_cast<proto::RingHeader*>(shm_->base() + plan_.ring_table_offset) + ring;
}

proto::SlotHeader* Segment::slot_header(std::uint32_t ring, std::uint32_t slot) const {
  const std::uint64_t off = plan_.first_slot_offset +
                            (static_cast<std::uint64_t>(ring) * slots_ + slot) * plan_.slot_stride;
  return reinterpret_cast<proto::SlotHeader*>(shm_->base() + off);
}

std::uint8_t* Segment::payload(std::uint32_t ring, std::uint32_t slot) const {
  return reinterpret_cast<std::uint8_t*>(slot_header(ring, slot)) + plan_.payload_offset;
}

std::uint8_t* Segment::label_region(std::uint32_t ring, std::uint32_t slot) const {
  return payload(ring, slot) + plan_.labels_offset;
}

std::int64_t* Segment::ids(std::uint32_t ring, std::uint32_t slot) const {
  return reinterpret_cast<std::int64_t*>(payload(ring, slot) + plan_.ids_offset);
}

}  // namespace stoker::job
