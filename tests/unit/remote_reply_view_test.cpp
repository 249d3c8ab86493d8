// Unit tier: the GPU node's hand parser of a worker's Reply (daemon/remote/reply_view.hpp,
// issue #36), which reads results in gRPC's slices instead of through protobuf. What protobuf
// serialises it reads the same, split into slices anywhere; what a lying worker could send
// (truncated messages, a pixel field longer than its message, overlong varints, groups, a
// field of the wrong wire type, two kinds, more than kMaxBatch results) is refused with a
// reason, never read past; and on mutated messages it never accepts what protobuf would read
// differently.
#include <catch2/catch.hpp>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "remote/protocol.hpp"
#include "remote/reply_view.hpp"
#include "stoker/remote/worker.pb.h"

namespace remote = stoker::remote;
namespace v1 = stoker::remote::v1;
using Catch::Contains;
using Kind = remote::ReplyView::Kind;

namespace {

void fill(v1::Result& r, std::uint64_t id, std::size_t pixels) {
  r.set_id(id);
  r.set_error(id % 3 == 0 ? 0 : 2);
  r.set_reason("reason " + std::to_string(id));
  r.set_warnings(static_cast<std::uint32_t>(id * 7));
  r.set_format(1);
  std::string px(pixels, '\0');
  for (std::size_t i = 0; i < pixels; ++i) px[i] = static_cast<char>((i * 131 + id) & 0xff);
  r.set_pixels(px);
  r.set_compressed(id % 2 == 1);
  r.set_busy_ns(id * 1000 + 1);
  r.set_queued_ns(id * 10 + 1);
  r.set_epoch(id + (std::uint64_t{1} << 40));
  r.set_draw(static_cast<std::uint32_t>(id * 3 + 0x80000000u));
}

std::string batch_bytes(int n, std::size_t pixels) {
  v1::Reply reply;
  for (int i = 0; i < n; ++i) fill(*reply.mutable_results()->add_results(), 100 + static_cast<std::uint64_t>(i), pixels);
  return reply.SerializeAsString();
}

// The view's fields equal protobuf's reading of the same message (the pixels compared byte
// for byte, through both copy() and contiguous()).
void require_same(const remote::ReplyView& view, const v1::Reply& pb) {
  std::vector<const v1::Result*> want;
  if (pb.has_result()) want.push_back(&pb.result());
  for (const v1::Result& r : pb.results().results()) want.push_back(&r);
  REQUIRE(view.results().size() == want.size());
  std::string scratch;
  for (std::size_t i = 0; i < want.size(); ++i) {
    const remote::ResultView& v = view.results()[i];
    const v1::Result& r = *want[i];
    CHECK(v.id == r.id());
    CHECK(v.error == r.error());
    CHECK(v.reason == r.reason().substr(0, remote::ReplyView::kMaxReasonBytes));
    CHECK(v.warnings == r.warnings());
    CHECK(v.format == r.format());
    CHECK(v.compressed == r.compressed());
    CHECK(v.busy_ns == r.busy_ns());
    CHECK(v.queued_ns == r.queued_ns());
    CHECK(v.epoch == r.epoch());
    CHECK(v.draw == r.draw());
    REQUIRE(v.pixels.size == r.pixels().size());
    std::string copied(v.pixels.size, '\0');
    view.copy(v.pixels, reinterpret_cast<std::uint8_t*>(copied.data()));
    CHECK(copied == r.pixels());
    CHECK(view.contiguous(v.pixels, scratch) == r.pixels());
  }
}

// `bytes` as gRPC would hand them over, cut into slices at `cuts` (ascending offsets).
grpc::ByteBuffer sliced(const std::string& bytes, const std::vector<std::size_t>& cuts) {
  std::vector<grpc::Slice> slices;
  std::size_t at = 0;
  for (std::size_t c : cuts) {
    slices.emplace_back(bytes.data() + at, c - at);
    at = c;
  }
  slices.emplace_back(bytes.data() + at, bytes.size() - at);
  return grpc::ByteBuffer(slices.data(), slices.size());
}

std::string varint(std::uint64_t v) {
  std::string s;
  do {
    s.push_back(static_cast<char>((v & 0x7f) | (v > 0x7f ? 0x80 : 0)));
    v >>= 7;
  } while (v != 0);
  return s;
}
std::string key(std::uint32_t field, std::uint32_t wire) { return varint(std::uint64_t{field} << 3 | wire); }
std::string delimited(std::uint32_t field, const std::string& body) { return key(field, 2) + varint(body.size()) + body; }

remote::ReplyView parsed(const std::string& bytes) {
  remote::ReplyView v;
  v.parse_bytes(bytes);
  return v;
}

}  // namespace

TEST_CASE("a ResultBatch reads as protobuf reads it, however gRPC slices it", "[unit][remote]") {
  const std::string bytes = batch_bytes(3, 1000);
  v1::Reply pb;
  REQUIRE(pb.ParseFromString(bytes));
  remote::ReplyView view;
  view.parse_bytes(bytes);
  REQUIRE(view.kind() == Kind::kResults);
  require_same(view, pb);
  view.parse_in_place(bytes);  // the split frame's way: over the caller's bytes, no copy
  REQUIRE(view.kind() == Kind::kResults);
  require_same(view, pb);
  std::string scratch;
  CHECK(view.contiguous(view.results()[1].pixels, scratch).data() > bytes.data());  // in place
  CHECK(view.contiguous(view.results()[1].pixels, scratch).data() < bytes.data() + bytes.size());
  // Cut at every offset (each field, varint and pixel run split across two slices), and into
  // one-byte slices.
  for (std::size_t cut = 1; cut < bytes.size(); cut += 7) {
    grpc::ByteBuffer buf = sliced(bytes, {cut});
    view.parse(buf);
    INFO("cut at " << cut << ": " << view.why());
    REQUIRE(view.kind() == Kind::kResults);
    require_same(view, pb);
  }
  std::vector<std::size_t> every;
  for (std::size_t i = 1; i < bytes.size(); ++i) every.push_back(i);
  grpc::ByteBuffer bytewise = sliced(bytes, every);
  view.parse(bytewise);
  REQUIRE(view.kind() == Kind::kResults);
  require_same(view, pb);
}

TEST_CASE("a lone Result, an OpenReply, an empty Reply and unknown fields", "[unit][remote]") {
  v1::Reply one;
  fill(*one.mutable_result(), 7, 300);
  remote::ReplyView view = parsed(one.SerializeAsString());
  REQUIRE(view.kind() == Kind::kResult);
  require_same(view, one);

  v1::Reply open;
  open.mutable_open()->set_accepted(true);
  open.mutable_open()->set_protocol_major(1);
  open.mutable_open()->set_protocol_minor(2);
  open.mutable_open()->set_decoder_versions("jpeg-turbo x");
  view = parsed(open.SerializeAsString());
  REQUIRE(view.kind() == Kind::kOpen);
  CHECK(view.open().accepted());
  CHECK(view.open().protocol_minor() == 2);
  CHECK(view.open().decoder_versions() == "jpeg-turbo x");

  CHECK(parsed("").kind() == Kind::kNone);

  // A newer minor's fields, of every wire type, at each level: skipped.
  const std::string result = key(1, 0) + varint(5) + key(40, 1) + std::string(8, 'x') + key(41, 5) + std::string(4, 'y') +
                             delimited(42, "later") + key(43, 0) + varint(1u << 30) + delimited(6, "px");
  view = parsed(delimited(3, delimited(1, result) + key(9, 0) + varint(3)) + key(20, 0) + varint(1));
  INFO(view.why());
  REQUIRE(view.kind() == Kind::kResults);
  REQUIRE(view.results().size() == 1);
  CHECK(view.results()[0].id == 5);
  CHECK(view.results()[0].pixels.size == 2);
  // A reason past kMaxReasonBytes is cut there.
  view = parsed(delimited(2, delimited(3, std::string(5000, 'r'))));
  REQUIRE(view.kind() == Kind::kResult);
  CHECK(view.results()[0].reason.size() == remote::ReplyView::kMaxReasonBytes);
}

TEST_CASE("malformed Replies are refused with a reason, never read past", "[unit][remote][security]") {
  const std::string good = batch_bytes(2, 500);
  // Every truncation of a real message: its length prefixes then claim more than is there.
  for (std::size_t n = 1; n < good.size(); ++n) {
    const remote::ReplyView v = parsed(good.substr(0, n));
    INFO("first " << n << " bytes");
    REQUIRE(v.kind() == Kind::kMalformed);
    CHECK(v.results().empty());
  }
  struct Case {
    const char* what;
    std::string bytes;
    const char* says;
  };
  const std::string px = delimited(6, "abc");
  const std::vector<Case> cases = {
      {"a pixel field longer than its Result", delimited(2, key(6, 2) + varint(1u << 30) + "abc"), "longer than"},
      {"a pixel field longer than the message", key(2, 2) + varint(5) + key(6, 2) + varint(100) + "ab", "longer than"},
      {"a Result longer than the message", key(2, 2) + varint(1000) + px, "longer than"},
      {"an 11-byte varint", delimited(2, key(1, 0) + std::string(10, '\xff') + "\x01"), "varint"},
      {"a 10th varint byte above 1", delimited(2, key(1, 0) + std::string(9, '\xff') + "\x02"), "varint"},
      {"a truncated varint", delimited(2, key(1, 0) + "\xff"), "varint"},
      {"a group", delimited(2, key(30, 3) + key(30, 4)), "wire type 3"},
      {"pixels as a varint", delimited(2, key(6, 0) + varint(5)), "wire type 0"},
      {"an id as bytes", delimited(2, delimited(1, "12345678")), "wire type 2"},
      {"results as a varint", key(3, 0) + varint(1), "wire type 0"},
      {"field number 0", delimited(2, key(0, 0) + varint(1)), "field number 0"},
      {"two kinds", delimited(2, px) + delimited(3, delimited(1, px)), "two kinds"},
      {"an OpenReply that does not parse", delimited(1, "\xff\xff\xff"), "OpenReply"},
      {"a ResultBatch entry of the wrong wire type", delimited(3, key(1, 0) + varint(1)), "whole message"},
  };
  for (const Case& c : cases) {
    INFO(c.what);
    const remote::ReplyView v = parsed(c.bytes);
    CHECK(v.kind() == Kind::kMalformed);
    CHECK_THAT(v.why(), Contains(c.says));
  }
  std::string many;
  for (std::size_t i = 0; i <= remote::kMaxBatch; ++i) many += delimited(1, key(1, 0) + varint(i));
  const remote::ReplyView v = parsed(delimited(3, many));
  CHECK(v.kind() == Kind::kMalformed);
  CHECK_THAT(v.why(), Contains("more than 64 results"));
  CHECK(parsed(delimited(3, many.substr(0, many.size() - 4))).kind() == Kind::kResults);  // 64: fine
}

TEST_CASE("mutated Replies: whatever the hand parser accepts, protobuf reads the same", "[unit][remote][security]") {
  const std::string base = batch_bytes(3, 64);
  std::mt19937 rng(36);
  int accepted = 0;
  for (int i = 0; i < 3000; ++i) {
    std::string m = base;
    const int edits = 1 + static_cast<int>(rng() % 4);
    for (int e = 0; e < edits; ++e) {
      const std::size_t at = rng() % m.size();
      switch (rng() % 4) {
        case 0: m[at] = static_cast<char>(rng()); break;
        case 1: m[at] = static_cast<char>(m[at] ^ (1 << (rng() % 8))); break;
        case 2: m.insert(at, 1, static_cast<char>(rng())); break;
        default: m.erase(at, 1 + rng() % 3); break;
      }
      if (m.empty()) m = base;
    }
    const remote::ReplyView v = parsed(m);
    if (v.kind() != Kind::kResult && v.kind() != Kind::kResults) continue;
    ++accepted;
    v1::Reply pb;
    INFO("mutation " << i);
    REQUIRE(pb.ParseFromString(m));
    require_same(v, pb);
  }
  // Some mutations (in pixel bytes, in values) leave a valid message: the comparison ran.
  CHECK(accepted > 100);
}
