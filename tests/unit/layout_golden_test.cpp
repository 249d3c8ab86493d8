// Golden layout test: the shared-memory and control-message byte layout is a contract with
// clients built from other versions. Every number here is written out by hand from
// proto/LAYOUT.md; if this test fails, either revert the change or bump kLayoutMajor /
// kProtoMajor and update LAYOUT.md and these numbers together.
#include <catch2/catch.hpp>

#include <cstddef>
#include <cstring>

#include "stoker/proto/control.hpp"
#include "stoker/proto/layout.hpp"
#include "stoker/proto/names.hpp"

using namespace stoker::proto;

TEST_CASE("segment header magic and versions sit at fixed offsets", "[layout]") {
  CHECK(kSegmentMagic == 0x314d48534b4f5453ull);  // "STOKSHM1" read as little-endian u64
  const char expect[8] = {'S', 'T', 'O', 'K', 'S', 'H', 'M', '1'};
  CHECK(std::memcmp(&kSegmentMagic, expect, 8) == 0);
  CHECK(kLayoutMajor == 1);
  CHECK(offsetof(SegmentHeader, magic) == 0);
  CHECK(offsetof(SegmentHeader, layout_major) == 8);
  CHECK(offsetof(SegmentHeader, layout_minor) == 12);
}

TEST_CASE("segment header fields", "[layout]") {
  CHECK(sizeof(SegmentHeader) == 256);
  CHECK(offsetof(SegmentHeader, segment_size) == 16);
  CHECK(offsetof(SegmentHeader, daemon_generation) == 24);
  CHECK(offsetof(SegmentHeader, ring_count) == 32);
  CHECK(offsetof(SegmentHeader, slots_per_ring) == 36);
  CHECK(offsetof(SegmentHeader, ring_table_offset) == 40);
  CHECK(offsetof(SegmentHeader, slot_stride) == 48);
  CHECK(offsetof(SegmentHeader, payload_offset) == 56);
  CHECK(offsetof(SegmentHeader, labels_offset) == 64);
  CHECK(offsetof(SegmentHeader, ids_offset) == 72);
  CHECK(offsetof(SegmentHeader, geometry) == 80);
  CHECK(offsetof(SegmentHeader, samples_per_epoch) == 112);
  CHECK(offsetof(SegmentHeader, num_classes) == 120);
  CHECK(offsetof(SegmentHeader, job_name) == 128);
  CHECK(offsetof(SegmentHeader, label_dtype) == 192);  // layout 1.1
  CHECK(offsetof(SegmentHeader, label_width) == 196);
  CHECK(offsetof(SegmentHeader, reserved) == 200);
  CHECK(sizeof(BatchGeometry) == 32);
  CHECK(offsetof(BatchGeometry, channels) == 4);
  CHECK(offsetof(BatchGeometry, height) == 8);
  CHECK(offsetof(BatchGeometry, width) == 12);
  CHECK(offsetof(BatchGeometry, dtype) == 16);
  CHECK(offsetof(BatchGeometry, layout) == 20);
  CHECK(offsetof(BatchGeometry, image_bytes) == 24);
}

TEST_CASE("ring and slot headers", "[layout]") {
  CHECK(sizeof(RingHeader) == 64);
  CHECK(offsetof(RingHeader, slot_count) == 4);
  CHECK(offsetof(RingHeader, first_slot_offset) == 8);
  CHECK(offsetof(RingHeader, batches_published) == 16);
  CHECK(offsetof(RingHeader, batches_released) == 24);
  CHECK(sizeof(SlotHeader) == 256);
  CHECK(offsetof(SlotHeader, state) == 0);
  CHECK(offsetof(SlotHeader, generation) == 4);
  CHECK(offsetof(SlotHeader, epoch) == 8);
  CHECK(offsetof(SlotHeader, batch_index) == 16);
  CHECK(offsetof(SlotHeader, count) == 24);
  CHECK(offsetof(SlotHeader, flags) == 28);
  CHECK(offsetof(SlotHeader, device_mem_handle) == 32);
  CHECK(offsetof(SlotHeader, device_event_handle) == 96);
  CHECK(offsetof(SlotHeader, device_offset) == 160);
  CHECK(offsetof(SlotHeader, device_bytes) == 168);
  CHECK(static_cast<std::uint32_t>(SlotState::kFree) == 0);
  CHECK(static_cast<std::uint32_t>(SlotState::kFilling) == 1);
  CHECK(static_cast<std::uint32_t>(SlotState::kReady) == 2);
  CHECK(static_cast<std::uint32_t>(SlotState::kLeased) == 3);
}

TEST_CASE("control messages", "[layout]") {
  CHECK(kControlMagic == 0x4b4f5453u);
  CHECK(sizeof(MessageHeader) == 16);
  CHECK(offsetof(MessageHeader, proto_major) == 4);
  CHECK(offsetof(MessageHeader, proto_minor) == 6);
  CHECK(offsetof(MessageHeader, type) == 8);
  CHECK(offsetof(MessageHeader, size) == 12);
  CHECK(sizeof(HelloMsg) == 160);
  CHECK(offsetof(HelloMsg, job) == 16);
  CHECK(offsetof(HelloMsg, rank) == 80);
  CHECK(offsetof(HelloMsg, flags) == 84);
  CHECK(offsetof(HelloMsg, start_epoch) == 88);
  CHECK(offsetof(HelloMsg, start_batch) == 96);
  CHECK(offsetof(HelloMsg, device_uuid) == 104);
  CHECK(offsetof(HelloMsg, pid) == 120);
  CHECK(offsetof(HelloMsg, device_backend) == 124);
  CHECK(offsetof(HelloMsg, reader) == 128);
  CHECK(offsetof(HelloMsg, start_position) == 136);  // 2.4
  CHECK(sizeof(WelcomeMsg) == 192);
  CHECK(offsetof(WelcomeMsg, segment_name) == 16);
  CHECK(offsetof(WelcomeMsg, segment_size) == 112);
  CHECK(offsetof(WelcomeMsg, daemon_generation) == 120);
  CHECK(offsetof(WelcomeMsg, ring_index) == 128);
  CHECK(offsetof(WelcomeMsg, slot_count) == 132);
  CHECK(offsetof(WelcomeMsg, batches_per_epoch) == 136);
  CHECK(offsetof(WelcomeMsg, samples_per_rank) == 144);
  CHECK(offsetof(WelcomeMsg, readers) == 152);
  CHECK(offsetof(WelcomeMsg, reader) == 156);
  CHECK(offsetof(WelcomeMsg, rank) == 160);
  CHECK(sizeof(ErrorMsg) == 512);
  CHECK(offsetof(ErrorMsg, code) == 16);
  CHECK(offsetof(ErrorMsg, message) == 24);
  CHECK(sizeof(BatchMsg) == 48);
  CHECK(offsetof(BatchMsg, slot) == 16);
  CHECK(offsetof(BatchMsg, generation) == 20);
  CHECK(offsetof(BatchMsg, epoch) == 24);
  CHECK(offsetof(BatchMsg, batch_index) == 32);
  CHECK(offsetof(BatchMsg, count) == 40);
  CHECK(offsetof(BatchMsg, flags) == 44);
  CHECK(sizeof(ReleaseMsg) == 32);
  CHECK(offsetof(ReleaseMsg, slot) == 16);
  CHECK(offsetof(ReleaseMsg, generation) == 20);
  CHECK(offsetof(ReleaseMsg, wait_ns) == 24);  // 2.3
  CHECK(kReleaseV21Bytes == 24);               // the 2.1 Release: still accepted
  CHECK(kReleaseWaitMinor == 3);
}

TEST_CASE("segment plan keeps payloads page aligned and slots disjoint", "[layout]") {
  BatchGeometry g{};
  g.batch_size = 256;
  g.channels = 3;
  g.height = 224;
  g.width = 224;
  g.dtype = DType::kUInt8;
  g.layout = Layout::kNCHW;
  g.image_bytes = 3ull * 224 * 224;
  const SegmentPlan p = plan_segment(g, 8, 4);
  CHECK(p.ring_table_offset == 256);
  CHECK(p.first_slot_offset == 4096);
  CHECK(p.payload_offset == 4096);
  CHECK(p.labels_offset == 38535168);            // 256 * 150528, already 64-aligned
  CHECK(p.ids_offset == 38535168 + 2048);
  CHECK(p.slot_stride % 4096 == 0);
  CHECK(p.slot_stride >= p.payload_offset + p.ids_offset + 8 * 256);
  CHECK(p.segment_size == p.first_slot_offset + p.slot_stride * 32);
}

TEST_CASE("soft labels (layout 1.1) widen only the labels region", "[layout]") {
  CHECK(kLayoutMinor == 1);
  CHECK(label_row_bytes(0, 1) == 8);  // int64 class index, as layout 1.0
  CHECK(label_row_bytes(static_cast<std::uint32_t>(DType::kFloat32), 1000) == 4000);
  CHECK(label_row_bytes(static_cast<std::uint32_t>(DType::kFloat16), 10) == 20);
  BatchGeometry g{};
  g.batch_size = 256;
  g.channels = 3;
  g.height = 224;
  g.width = 224;
  g.dtype = DType::kUInt8;
  g.layout = Layout::kNCHW;
  g.image_bytes = 3ull * 224 * 224;
  // Default argument: int64 labels, the same plan as layout 1.0 (old and new readers agree).
  CHECK(plan_segment(g, 8, 4, 8).ids_offset == plan_segment(g, 8, 4).ids_offset);
  const SegmentPlan p = plan_segment(g, 8, 4, 4000);  // float32 rows of 1000 classes
  CHECK(p.labels_offset == 38535168);
  CHECK(p.ids_offset == 38535168 + 1024000);          // 256 * 4000, already 64-aligned
  CHECK(p.slot_stride % 4096 == 0);
  CHECK(p.slot_stride >= p.payload_offset + p.ids_offset + 8 * 256);
  const SegmentPlan q = plan_segment(g, 1, 1, 6);       // 3 float16 classes: rows padded to 64 in all
  CHECK(q.ids_offset == 38535168 + 1536);
}

TEST_CASE("segment names are per socket and per job", "[names]") {
  const auto a = segment_name("/run/a.sock", "train");
  CHECK(a == segment_name("/run/a.sock", "train"));
  CHECK(a != segment_name("/run/b.sock", "train"));
  CHECK(a != segment_name("/run/a.sock", "val"));
  CHECK(a.rfind("stoker-", 0) == 0);
  CHECK(a.size() < 96);
}
