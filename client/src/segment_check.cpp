#include "segment_check.hpp"

#include <string>

namespace stoker::client {

namespace {

using base::Status;

bool geometry_is_valid(const proto::BatchGeometry& g) {
  const bool dtype_ok = g.dtype == proto::DType::kUInt8 || g.dtype == proto::DType::kFloat16 ||
                        g.dtype == proto::DType::kFloat32;
  // The bounds keep every product below 2^64: image_bytes <= 4*2^14*2^14*4 = 2^32,
  // a batch's images <= 2^48.
  return dtype_ok && (g.layout == proto::Layout::kNCHW || g.layout == proto::Layout::kNHWC) &&
         g.batch_size >= 1 && g.batch_size <= 65536 && g.channels >= 1 && g.channels <= 4 && g.height >= 1 &&
         g.height <= 16384 && g.width >= 1 && g.width <= 16384 &&
         g.image_bytes == std::uint64_t{g.channels} * g.height * g.width * proto::dtype_size(g.dtype);
}

}  // namespace

bool layout_is_readable(const proto::SegmentHeader& header) {
  return header.magic == proto::kSegmentMagic && header.layout_major == proto::kLayoutMajor;
}

base::Result<SegmentLayout> check_segment(const proto::SegmentHeader& header, const proto::WelcomeMsg& welcome,
                                          std::uint64_t mapped_size) {
  if (!layout_is_readable(header)) {
    return Status::error("shared memory layout " + std::to_string(header.layout_major) + "." +
                         std::to_string(header.layout_minor) + " but this libstoker reads " +
                         std::to_string(proto::kLayoutMajor) + "." + std::to_string(proto::kLayoutMinor));
  }
  SegmentLayout out;
  out.geometry = header.geometry;
  if (!geometry_is_valid(out.geometry) || welcome.ring_index >= header.ring_count || header.ring_count > (1u << 20) ||
      header.slots_per_ring != welcome.slot_count || welcome.slot_count == 0 || welcome.slot_count > 1024) {
    return Status::error("shared memory header does not describe a valid segment for this handshake");
  }
  // Labels (layout 1.1): 0 is int64 class indices (a 1.0 daemon leaves both fields zero);
  // a float dtype is a mixing job's soft targets, one row of num_classes per sample.
  out.soft_labels = header.label_dtype != 0;
  const bool labels_ok =
      out.soft_labels ? (header.label_dtype == static_cast<std::uint32_t>(proto::DType::kFloat16) ||
                         header.label_dtype == static_cast<std::uint32_t>(proto::DType::kFloat32)) &&
                            header.label_width == header.num_classes && header.label_width >= 1 &&
                            header.label_width <= (1u << 24)
                      : header.label_width <= 1;
  if (!labels_ok) return Status::error("shared memory header describes labels this client cannot read");
  out.label_width = out.soft_labels ? header.label_width : 1;
  out.label_bytes = proto::label_row_bytes(header.label_dtype, out.label_width);

  out.plan = proto::plan_segment(out.geometry, header.ring_count, header.slots_per_ring, out.label_bytes);
  // plan_segment's one product that can pass 2^64 under the bounds above is the slots' total
  // (stride <= ~2^50 times up to 2^30 slots): recomputed wide, a wrapped size is refused.
  const unsigned __int128 wide_size =
      static_cast<unsigned __int128>(out.plan.slot_stride) * header.ring_count * header.slots_per_ring +
      out.plan.first_slot_offset;
  if (wide_size != out.plan.segment_size || header.ring_table_offset != out.plan.ring_table_offset ||
      header.slot_stride != out.plan.slot_stride || header.payload_offset != out.plan.payload_offset ||
      header.labels_offset != out.plan.labels_offset || header.ids_offset != out.plan.ids_offset ||
      out.plan.segment_size > mapped_size || out.plan.segment_size != welcome.segment_size) {
    return Status::error("shared memory ring table does not match the handshake");
  }
  out.ring_entry_offset = out.plan.ring_table_offset + sizeof(proto::RingHeader) * std::uint64_t{welcome.ring_index};
  out.first_slot_offset = out.plan.first_slot_offset +
                          std::uint64_t{welcome.ring_index} * welcome.slot_count * out.plan.slot_stride;
  return out;
}

Status check_ring_entry(const proto::RingHeader& ring, const SegmentLayout& layout, const proto::WelcomeMsg& welcome) {
  if (ring.first_slot_offset != layout.first_slot_offset || ring.slot_count != welcome.slot_count) {
    return Status::error("shared memory ring table does not match the handshake");
  }
  return {};
}

}  // namespace stoker::client
