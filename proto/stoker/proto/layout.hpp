// Shared-memory layout between stokerd and libstoker. See proto/LAYOUT.md for the byte map.
//
// Rules (checked by static_asserts here and by tests/unit/layout_golden_test.cpp):
//  - fixed-width fields only, explicit zeroed padding, no pointers (offsets from segment base);
//  - `magic` and `layout_major`/`layout_minor` stay at offsets 0, 8 and 12 forever;
//  - any change of a field's offset, size or meaning bumps kLayoutMajor; appending a field
//    into reserved bytes that old readers may ignore bumps kLayoutMinor.
//
// Ownership: only the daemon writes the segment. Clients map it read-only and lease/release
// slots over the control socket, so a client that dies can never leave anything in shared
// memory locked or half-written.
#pragma once

#include <cstddef>
#include <cstdint>

namespace stoker::proto {

inline constexpr std::uint64_t kSegmentMagic = 0x314d48534b4f5453ull;  // "STOKSHM1" little-endian
inline constexpr std::uint32_t kLayoutMajor = 1;
inline constexpr std::uint32_t kLayoutMinor = 1;  // 1.1: label_dtype/label_width (soft labels)

// Payloads start on this boundary so that they can be pinned/registered page by page and
// so that every image in a batch stays 64-byte aligned for vector loads.
inline constexpr std::uint64_t kPayloadAlign = 4096;

enum class DType : std::uint32_t { kUInt8 = 1, kFloat16 = 2, kFloat32 = 3 };
enum class Layout : std::uint32_t { kNCHW = 1, kNHWC = 2 };

constexpr std::uint32_t dtype_size(DType t) {
  return t == DType::kUInt8 ? 1u : t == DType::kFloat16 ? 2u : 4u;
}

// Slot state machine; only the daemon moves it:
//   FREE -> FILLING (planned, workers writing) -> READY (complete, waiting for the consumer)
//   READY -> LEASED (handed to the consumer) -> FREE (consumer released or disconnected)
//   READY -> FREE (prefetched batch dropped because a consumer asked for another position)
enum class SlotState : std::uint32_t { kFree = 0, kFilling = 1, kReady = 2, kLeased = 3 };

// Batch flags.
inline constexpr std::uint32_t kBatchLastInEpoch = 1u << 0;  // no further batch in this epoch
inline constexpr std::uint32_t kBatchOnDevice = 1u << 1;     // device copy valid (CUDA IPC)

struct BatchGeometry {
  std::uint32_t batch_size;    // N, samples per full batch
  std::uint32_t channels;      // C (always 3 today)
  std::uint32_t height;        // H
  std::uint32_t width;         // W
  DType dtype;
  Layout layout;
  std::uint64_t image_bytes;   // bytes of one sample: C*H*W*dtype_size
};
static_assert(sizeof(BatchGeometry) == 32);
static_assert(offsetof(BatchGeometry, image_bytes) == 24);

// At offset 0 of every segment.
struct SegmentHeader {
  std::uint64_t magic;               // kSegmentMagic
  std::uint32_t layout_major;        // kLayoutMajor
  std::uint32_t layout_minor;        // kLayoutMinor
  std::uint64_t segment_size;        // bytes
  std::uint64_t daemon_generation;   // random per daemon start; invalidates cached mappings
  std::uint32_t ring_count;          // consumers of the job
  std::uint32_t slots_per_ring;
  std::uint64_t ring_table_offset;   // RingHeader[ring_count]
  std::uint64_t slot_stride;         // bytes from one slot's header to the next
  std::uint64_t payload_offset;      // from a slot header to its payload (kPayloadAlign multiple)
  std::uint64_t labels_offset;       // from the payload start to the labels (see label_dtype)
  std::uint64_t ids_offset;          // from the payload start to int64 sample ids[batch_size]
  BatchGeometry geometry;
  std::uint64_t samples_per_epoch;   // dataset size
  std::uint32_t num_classes;
  std::uint32_t reserved0;
  char job_name[64];                 // NUL-terminated
  // Layout 1.1. 0: labels are int64 class indices, labels[batch_size] (layout 1.0's only
  // format). DType::kFloat16/kFloat32: soft targets labels[batch_size][label_width] of that
  // type (a job with mixup/cutmix; label_width = num_classes). A 1.0 reader sees zero here and
  // plans int64 labels, so its geometry check refuses a soft-label segment rather than
  // misreading floats as class indices.
  std::uint32_t label_dtype;
  std::uint32_t label_width;         // values per sample: 1 for class indices
  std::uint8_t reserved[56];         // zero
};
static_assert(sizeof(SegmentHeader) == 256);
static_assert(offsetof(SegmentHeader, magic) == 0);
static_assert(offsetof(SegmentHeader, layout_major) == 8);
static_assert(offsetof(SegmentHeader, layout_minor) == 12);
static_assert(offsetof(SegmentHeader, segment_size) == 16);
static_assert(offsetof(SegmentHeader, daemon_generation) == 24);
static_assert(offsetof(SegmentHeader, ring_count) == 32);
static_assert(offsetof(SegmentHeader, slots_per_ring) == 36);
static_assert(offsetof(SegmentHeader, ring_table_offset) == 40);
static_assert(offsetof(SegmentHeader, slot_stride) == 48);
static_assert(offsetof(SegmentHeader, payload_offset) == 56);
static_assert(offsetof(SegmentHeader, labels_offset) == 64);
static_assert(offsetof(SegmentHeader, ids_offset) == 72);
static_assert(offsetof(SegmentHeader, geometry) == 80);
static_assert(offsetof(SegmentHeader, samples_per_epoch) == 112);
static_assert(offsetof(SegmentHeader, num_classes) == 120);
static_assert(offsetof(SegmentHeader, job_name) == 128);
static_assert(offsetof(SegmentHeader, label_dtype) == 192);
static_assert(offsetof(SegmentHeader, label_width) == 196);
static_assert(offsetof(SegmentHeader, reserved) == 200);

// Bytes of one sample's labels: 8 for an int64 class index (label_dtype 0), else a soft row.
constexpr std::uint64_t label_row_bytes(std::uint32_t label_dtype, std::uint32_t label_width) {
  return label_dtype == 0 ? 8u : std::uint64_t{dtype_size(static_cast<DType>(label_dtype))} * label_width;
}

// One per consumer rank, right after the segment header.
struct RingHeader {
  std::uint32_t rank;
  std::uint32_t slot_count;
  std::uint64_t first_slot_offset;   // from segment base; slot i at first + i*slot_stride
  std::uint64_t batches_published;   // statistics, written by the daemon only
  std::uint64_t batches_released;
  std::uint8_t reserved[32];
};
static_assert(sizeof(RingHeader) == 64);
static_assert(offsetof(RingHeader, first_slot_offset) == 8);
static_assert(offsetof(RingHeader, batches_published) == 16);

// At the start of every slot; the payload follows at SegmentHeader::payload_offset.
// The consumer learns a slot is its own from the control socket, never from these fields:
// they mirror the daemon's view for inspection (stokerctl, debuggers).
struct SlotHeader {
  std::uint32_t state;               // SlotState, atomic 32-bit word
  std::uint32_t generation;          // bumped on every FREE -> FILLING
  std::uint64_t epoch;
  std::uint64_t batch_index;
  std::uint32_t count;               // valid samples (<= batch_size)
  std::uint32_t flags;               // kBatch*
  std::uint8_t device_mem_handle[64];    // cudaIpcMemHandle_t when kBatchOnDevice
  std::uint8_t device_event_handle[64];  // cudaIpcEventHandle_t when kBatchOnDevice
  std::uint64_t device_offset;       // offset of this slot's data inside the IPC allocation
  std::uint64_t device_bytes;        // bytes of device image data
  std::uint8_t reserved[80];
};
static_assert(sizeof(SlotHeader) == 256);
static_assert(offsetof(SlotHeader, generation) == 4);
static_assert(offsetof(SlotHeader, epoch) == 8);
static_assert(offsetof(SlotHeader, batch_index) == 16);
static_assert(offsetof(SlotHeader, count) == 24);
static_assert(offsetof(SlotHeader, flags) == 28);
static_assert(offsetof(SlotHeader, device_mem_handle) == 32);
static_assert(offsetof(SlotHeader, device_event_handle) == 96);
static_assert(offsetof(SlotHeader, device_offset) == 160);
static_assert(offsetof(SlotHeader, device_bytes) == 168);

constexpr std::uint64_t align_up(std::uint64_t v, std::uint64_t a) { return (v + a - 1) / a * a; }

// The one place that derives all offsets from the geometry; daemon and golden test use it.
struct SegmentPlan {
  std::uint64_t ring_table_offset;
  std::uint64_t first_slot_offset;
  std::uint64_t payload_offset;
  std::uint64_t labels_offset;
  std::uint64_t ids_offset;
  std::uint64_t slot_stride;
  std::uint64_t segment_size;
};

// `label_bytes`: one sample's labels (label_row_bytes; 8 for int64 class indices).
constexpr SegmentPlan plan_segment(const BatchGeometry& g, std::uint32_t rings,
                                   std::uint32_t slots_per_ring, std::uint64_t label_bytes = 8) {
  SegmentPlan p{};
  p.ring_table_offset = sizeof(SegmentHeader);
  p.first_slot_offset = align_up(p.ring_table_offset + sizeof(RingHeader) * rings, kPayloadAlign);
  p.payload_offset = kPayloadAlign;  // slot header padded to one page
  const std::uint64_t images = g.image_bytes * g.batch_size;
  p.labels_offset = align_up(images, 64);
  p.ids_offset = p.labels_offset + align_up(label_bytes * g.batch_size, 64);
  p.slot_stride = p.payload_offset + align_up(p.ids_offset + 8ull * g.batch_size, kPayloadAlign);
  p.segment_size = p.first_slot_offset + p.slot_stride * rings * slots_per_ring;
  return p;
}

}  // namespace stoker::proto
