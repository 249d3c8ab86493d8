// The client's segment check (client/src/segment_check.hpp) as a pure function: what a
// scribbled or hostile header may not get past, beside the fuzz harness that checks the
// in-bounds promise on arbitrary bytes (tests/fuzz/fuzz_segment_check.cpp).
#include <catch2/catch.hpp>

#include "segment_check.hpp"
#include "segment_record.hpp"

namespace proto = stoker::proto;
using stoker::client::check_ring_entry;
using stoker::client::check_segment;
using stoker::client::layout_is_readable;

namespace {

using Handshake = stoker::test::SegmentRecord;

Handshake written_for(const proto::BatchGeometry& g, std::uint32_t rings, std::uint32_t slots) {
  return stoker::test::segment_as_written(g, rings, slots);
}

const proto::BatchGeometry kSmall{8, 3, 32, 32, proto::DType::kUInt8, proto::Layout::kNCHW, 3 * 32 * 32};

}  // namespace

TEST_CASE("segment check: the daemon's own segment is accepted, with the offsets of this client's ring", "[unit][segment]") {
  const Handshake h = written_for(kSmall, 2, 4);
  const auto l = check_segment(h.header, h.welcome, h.welcome.segment_size);
  REQUIRE(l.ok());
  const proto::SegmentPlan p = proto::plan_segment(kSmall, 2, 4);
  CHECK(l->first_slot_offset == p.first_slot_offset + 4 * p.slot_stride);
  CHECK(l->ring_entry_offset == p.ring_table_offset + sizeof(proto::RingHeader));
  proto::RingHeader ring{};
  ring.slot_count = 4;
  ring.first_slot_offset = l->first_slot_offset;
  CHECK(check_ring_entry(ring, *l, h.welcome).ok());
  ring.first_slot_offset += 4096;  // scribbled: would point slots past the ring
  CHECK_FALSE(check_ring_entry(ring, *l, h.welcome).ok());
}

TEST_CASE("segment check: sizes whose product wraps past 2^64 are refused, though every 64-bit comparison holds",
          "[unit][segment]") {
  // The largest geometry the bounds allow, with 2^20 rings of 1024 slots: the slots' total is
  // about 2^78 bytes, which plan_segment's 64-bit arithmetic wraps to a small number.
  const proto::BatchGeometry huge{65536, 4, 16384, 16384, proto::DType::kFloat32, proto::Layout::kNCHW,
                                  std::uint64_t{4} * 16384 * 16384 * 4};
  Handshake h = written_for(huge, 1u << 20, 1024);
  const proto::SegmentPlan p = proto::plan_segment(huge, 1u << 20, 1024);
  const unsigned __int128 real = static_cast<unsigned __int128>(p.slot_stride) * (1u << 20) * 1024 + p.first_slot_offset;
  REQUIRE(real > static_cast<unsigned __int128>(p.segment_size));  // it wrapped
  // A mapping as large as the wrapped figure passes the comparisons the client made before
  // (offsets equal the plan's, plan size <= mapping, plan size == Welcome's size)...
  const std::uint64_t mapped = p.segment_size;
  const auto l = check_segment(h.header, h.welcome, mapped);
  // ...but slot 0 of ring 1 alone would start ~2^58 bytes past the mapping.
  REQUIRE_FALSE(l.ok());
  CHECK_THAT(l.status().message(), Catch::Contains("does not match the handshake"));
}

TEST_CASE("segment check: each scribbled field is refused with the part that did not hold", "[unit][segment]") {
  const Handshake good = written_for(kSmall, 2, 4);
  const std::uint64_t size = good.welcome.segment_size;
  auto refused = [&](Handshake h, std::uint64_t mapped) {
    const auto l = check_segment(h.header, h.welcome, mapped);
    return l.ok() ? std::string() : l.status().message();
  };
  Handshake h = good;
  h.header.layout_major += 1;
  CHECK_FALSE(layout_is_readable(h.header));
  CHECK_THAT(refused(h, size), Catch::Contains("this libstoker reads"));
  h = good;
  h.header.geometry.image_bytes += 1;  // no longer C*H*W*dtype
  CHECK_THAT(refused(h, size), Catch::Contains("not describe a valid segment"));
  h = good;
  h.welcome.ring_index = 2;  // past the ring table
  CHECK_THAT(refused(h, size), Catch::Contains("not describe a valid segment"));
  h = good;
  h.header.label_dtype = static_cast<std::uint32_t>(proto::DType::kFloat32);  // soft labels without a width
  CHECK_THAT(refused(h, size), Catch::Contains("labels this client cannot read"));
  h = good;
  h.header.slot_stride -= 4096;
  CHECK_THAT(refused(h, size), Catch::Contains("does not match the handshake"));
  CHECK_THAT(refused(good, size - 1), Catch::Contains("does not match the handshake"));  // mapping too small
  CHECK(refused(good, size).empty());
}
