// libFuzzer harness: the GPU node's hand parser of a worker's Reply (daemon/remote/
// reply_view.hpp, issue #36), which reads what a worker sends in gRPC's slices. A worker is not
// trusted, so any bytes may arrive.
//
// Input: the first byte picks where the message is cut into slices (gRPC hands a message over
// in pieces of any size); the rest is the message.
//
// Invariants checked (abort on violation): parsing never reads outside the message (ASan); a
// Reply the view accepts as results protobuf parses too, with the same fields, and every pixel
// range copies the bytes protobuf reads; at most kMaxBatch results; a refused Reply has a reason
// and no results. Then as protocol 1.5's split frame (attach_pixels) with pixels after the
// message, of the total its results claim (an even first byte) or of another length: accepted
// only when the results claim exactly those bytes, none inside the message, each result's range
// copying its own bytes in order; refused with a reason and no results otherwise.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "remote/protocol.hpp"
#include "remote/reply_view.hpp"
#include "stoker/remote/worker.pb.h"

namespace remote = stoker::remote;
namespace v1 = stoker::remote::v1;

namespace {

[[noreturn]] void broken(const char* why) {
  std::fprintf(stderr, "fuzz_remote_reply: invariant broken: %s\n", why);
  std::abort();
}

void check(const remote::ReplyView& view, const std::string& bytes) {
  using Kind = remote::ReplyView::Kind;
  if (view.kind() == Kind::kMalformed) {
    if (view.why().empty() || !view.results().empty()) broken("a refused Reply without a reason, or with results");
    return;
  }
  if (view.kind() != Kind::kResult && view.kind() != Kind::kResults) return;
  if (view.results().size() > remote::kMaxBatch) broken("more than kMaxBatch results");
  v1::Reply pb;
  if (!pb.ParseFromString(bytes)) broken("accepted a Reply protobuf refuses");
  std::vector<const v1::Result*> want;
  if (pb.has_result()) want.push_back(&pb.result());
  for (const v1::Result& r : pb.results().results()) want.push_back(&r);
  if (want.size() != view.results().size()) broken("another number of results than protobuf reads");
  std::string copied, scratch;
  for (std::size_t i = 0; i < want.size(); ++i) {
    const remote::ResultView& v = view.results()[i];
    const v1::Result& r = *want[i];
    if (v.id != r.id() || v.error != r.error() || v.warnings != r.warnings() || v.format != r.format() ||
        v.compressed != r.compressed() || v.busy_ns != r.busy_ns() || v.queued_ns != r.queued_ns() ||
        v.epoch != r.epoch() || v.draw != r.draw() ||
        v.reason != r.reason().substr(0, remote::ReplyView::kMaxReasonBytes)) {
      broken("a field differs from protobuf's reading");
    }
    if (v.pixels.size != r.pixels().size()) broken("a pixel field of another size than protobuf reads");
    copied.assign(v.pixels.size, '\0');
    view.copy(v.pixels, reinterpret_cast<std::uint8_t*>(copied.data()));
    if (copied != r.pixels() || view.contiguous(v.pixels, scratch) != r.pixels()) broken("other pixel bytes");
  }
}

void check_split(remote::ReplyView& view, std::size_t total) {
  using Kind = remote::ReplyView::Kind;
  const bool results = view.kind() == Kind::kResult || view.kind() == Kind::kResults;
  std::string pixels(total, '\0');
  for (std::size_t i = 0; i < total; ++i) pixels[i] = static_cast<char>(i * 131 + (i >> 8));
  if (!view.attach_pixels(total == 0 ? grpc::Slice() : grpc::Slice(pixels.data(), total))) {
    if (view.kind() != Kind::kMalformed || view.why().empty() || !view.results().empty()) {
      broken("a refused split frame without a reason, or with results");
    }
    return;
  }
  if (!results) broken("pixels attached to a Reply without results");
  std::size_t at = 0;
  std::string copied;
  for (const remote::ResultView& r : view.results()) {
    if (r.pixels.size != r.pixel_bytes) broken("a split result's range is not its pixel_bytes");
    copied.assign(r.pixels.size, '\0');
    view.copy(r.pixels, reinterpret_cast<std::uint8_t*>(copied.data()));
    if (copied != pixels.substr(at, r.pixels.size)) broken("a split result's pixels are not its own bytes");
    at += r.pixels.size;
  }
  if (at != total) broken("a split frame's pixels not all claimed");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0 || size > (4u << 20)) return 0;
  const std::uint8_t cut = data[0];
  const std::string bytes(reinterpret_cast<const char*>(data + 1), size - 1);
  // Slices of 1 + (cut % 64) bytes, then the same step doubled each time (small and large
  // pieces, fields split anywhere); cut 0: the message in one slice.
  std::vector<grpc::Slice> slices;
  std::size_t at = 0, step = 1 + cut % 64;
  while (at < bytes.size()) {
    const std::size_t n = cut == 0 ? bytes.size() : std::min(step, bytes.size() - at);
    slices.emplace_back(bytes.data() + at, n);
    at += n;
    step *= 2;
  }
  grpc::ByteBuffer buffer(slices.data(), slices.size());
  remote::ReplyView view;
  view.parse(buffer);
  check(view, bytes);
  view.parse_bytes(bytes);
  check(view, bytes);
  view.parse_in_place(bytes);  // as the results connection's reader parses a split frame's message
  check(view, bytes);
  // As a split frame: the total its results claim (as protobuf reads them), or another one.
  std::uint64_t claimed = 0;
  v1::Reply pb;
  if (pb.ParseFromString(bytes)) {
    if (pb.has_result()) claimed += pb.result().pixel_bytes();
    for (const v1::Result& r : pb.results().results()) claimed += r.pixel_bytes();
  }
  const std::uint64_t total = cut % 2 == 0 ? claimed : claimed + 1 + cut % 7;
  if (total <= (1u << 20)) check_split(view, static_cast<std::size_t>(total));
  return 0;
}
