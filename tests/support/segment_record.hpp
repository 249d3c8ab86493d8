// A segment header and Welcome as stokerd writes them for a geometry, `rings` x `slots`, this
// client on ring `ring_index`: the valid record the segment check's unit test and fuzz harness
// start from (client/src/segment_check.hpp).
#pragma once

#include <cstdint>

#include "stoker/proto/control.hpp"
#include "stoker/proto/layout.hpp"

namespace stoker::test {

struct SegmentRecord {
  proto::SegmentHeader header{};
  proto::WelcomeMsg welcome{};
};

inline SegmentRecord segment_as_written(const proto::BatchGeometry& g, std::uint32_t rings, std::uint32_t slots,
                                        std::uint32_t ring_index = 1) {
  SegmentRecord r;
  const proto::SegmentPlan p = proto::plan_segment(g, rings, slots);
  r.header.magic = proto::kSegmentMagic;
  r.header.layout_major = proto::kLayoutMajor;
  r.header.layout_minor = proto::kLayoutMinor;
  r.header.segment_size = p.segment_size;
  r.header.ring_count = rings;
  r.header.slots_per_ring = slots;
  r.header.ring_table_offset = p.ring_table_offset;
  r.header.slot_stride = p.slot_stride;
  r.header.payload_offset = p.payload_offset;
  r.header.labels_offset = p.labels_offset;
  r.header.ids_offset = p.ids_offset;
  r.header.geometry = g;
  r.welcome.segment_size = p.segment_size;
  r.welcome.ring_index = ring_index;
  r.welcome.slot_count = slots;
  return r;
}

}  // namespace stoker::test
