// The client's one check of a job's shared-memory segment, as a pure function of what the
// daemon said (the Welcome), what the segment's header says (copied out of shared memory
// once) and how many bytes are really mapped. Everything the client later addresses inside
// the mapping is derived from the returned SegmentLayout, never re-read from shared memory.
//
// Invariant (what `ok` promises; tests/fuzz/fuzz_segment_check.cpp checks it on every input):
// every byte of this connection's ring entry and of each of its slots (header, images, labels,
// ids) lies inside [0, mapped_size), and no offset computation overflowed on the way.
#pragma once

#include <cstdint>

#include "base/status.hpp"
#include "stoker/proto/control.hpp"
#include "stoker/proto/layout.hpp"

namespace stoker::client {

struct SegmentLayout {
  proto::BatchGeometry geometry;
  proto::SegmentPlan plan;           // offsets, as proto::plan_segment derives them
  bool soft_labels = false;          // float rows (mixup/cutmix) rather than int64 indices
  std::uint32_t label_width = 1;     // values per sample
  std::uint64_t label_bytes = 8;     // bytes per sample's labels
  std::uint64_t ring_entry_offset = 0;  // this connection's RingHeader, from the segment base
  std::uint64_t first_slot_offset = 0;  // this connection's slot 0, from the segment base
};

// Whether this libstoker reads the header's layout at all (magic and major version); a
// mismatch is a version error, told apart from a malformed segment.
bool layout_is_readable(const proto::SegmentHeader& header);

// The segment's geometry and offsets checked against the handshake, the layout rules and the
// mapping's real size. On error, the message says which part did not hold.
base::Result<SegmentLayout> check_segment(const proto::SegmentHeader& header, const proto::WelcomeMsg& welcome,
                                          std::uint64_t mapped_size);

// The connection's ring entry (read at layout.ring_entry_offset) agrees with the layout.
base::Status check_ring_entry(const proto::RingHeader& ring, const SegmentLayout& layout,
                              const proto::WelcomeMsg& welcome);

}  // namespace stoker::client
