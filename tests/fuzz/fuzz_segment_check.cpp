// Fuzz harness: the client's check of a job's shared-memory segment (client/src/
// segment_check.hpp). The input is XORed over a valid record — a segment header, the Welcome,
// the mapping's size and this connection's ring entry — so an empty input is a segment the
// check must accept and every other input is a scribbled one. Whatever the bytes, an accepted
// segment must keep every address the client will use inside the mapping (recomputed here in
// 128-bit arithmetic, independently of the check), and a refusal must say why.
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "../support/segment_record.hpp"
#include "segment_check.hpp"

namespace {

using stoker::proto::SegmentHeader;
using stoker::proto::WelcomeMsg;
using stoker::proto::RingHeader;
using u128 = unsigned __int128;

struct Record {
  SegmentHeader header;
  WelcomeMsg welcome;
  std::uint64_t mapped_size;
  RingHeader ring;
};

Record valid_record() {
  namespace proto = stoker::proto;
  const proto::BatchGeometry g{8, 3, 32, 32, proto::DType::kUInt8, proto::Layout::kNCHW, 3 * 32 * 32};
  const stoker::test::SegmentRecord written = stoker::test::segment_as_written(g, 2, 4);
  Record r{};
  r.header = written.header;
  r.header.num_classes = 4;
  r.welcome = written.welcome;
  r.mapped_size = written.welcome.segment_size;
  r.ring.slot_count = 4;
  const proto::SegmentPlan p = proto::plan_segment(g, 2, 4);
  r.ring.first_slot_offset = p.first_slot_offset + 4 * p.slot_stride;  // ring 1's slot 0
  return r;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const Record baseline = valid_record();
  Record r = baseline;
  auto* bytes = reinterpret_cast<std::uint8_t*>(&r);
  for (std::size_t i = 0; i < size && i < sizeof r; ++i) bytes[i] ^= data[i];

  const auto checked = stoker::client::check_segment(r.header, r.welcome, r.mapped_size);
  if (size == 0 && !checked) std::abort();  // the valid record must pass
  if (!checked) {
    if (checked.status().message().empty()) std::abort();
    return 0;
  }
  const stoker::client::SegmentLayout& l = *checked;
  const u128 mapped = r.mapped_size;
  if (u128{l.ring_entry_offset} + sizeof(RingHeader) > mapped) std::abort();
  if (!stoker::client::check_ring_entry(r.ring, l, r.welcome)) return 0;
  const u128 stride = l.plan.slot_stride;
  const u128 batch = l.geometry.batch_size;
  // Every slot of this ring, whole, inside the mapping.
  if (u128{l.first_slot_offset} + stride * r.welcome.slot_count > mapped) std::abort();
  // Inside one slot: the header before the payload, then images, labels and ids in order.
  if (l.plan.payload_offset < sizeof(stoker::proto::SlotHeader)) std::abort();
  if (u128{l.geometry.image_bytes} * batch > l.plan.labels_offset) std::abort();
  if (u128{l.plan.labels_offset} + u128{l.label_bytes} * batch > l.plan.ids_offset) std::abort();
  if (u128{l.plan.payload_offset} + l.plan.ids_offset + 8 * batch > stride) std::abort();
  return 0;
}
