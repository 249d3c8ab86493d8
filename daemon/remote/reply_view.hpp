// A worker's Reply (proto/stoker/remote/worker.proto) as the GPU node receives it, read in
// place from gRPC's receive slices (issue #36): the small fields are parsed here by hand, the
// pixels are not copied at all until the dispatcher copies them straight into the ring slot.
// Through protobuf's own parser every sample crossed memory twice more (slices -> the Result's
// std::string -> the slot) and each message allocated fresh strings of ~150 KB, whose pages
// fault on first touch.
//
// Same wire format, so no protocol change: a worker of any 1.x minor is read the same way.
// The parser trusts nothing: every length is checked against what is left of its enclosing
// message before it is used, varints longer than 10 bytes, groups, field number 0 and a known
// field sent with another wire type are malformed, as is a Reply with two kinds or a batch of
// more than kMaxBatch results. Unknown fields are skipped (a newer minor may add some). A
// malformed message is not a gRPC error: it arrives as kind kMalformed with the reason, so the
// node can say what the worker sent before dropping it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "stoker/remote/worker.pb.h"

namespace stoker::remote {

// Where a bytes field lies in the message: [offset, offset + size) of its concatenated slices.
struct ByteRange {
  std::size_t offset = 0;
  std::size_t size = 0;
};

// One Result's fields (as worker.proto names them); `pixels` is where its bytes lie.
struct ResultView {
  std::uint64_t id = 0;
  std::uint32_t error = 0;
  std::string reason;  // at most kMaxReasonBytes; the rest is skipped
  std::uint32_t warnings = 0;
  std::uint32_t format = 0;
  ByteRange pixels;
  bool compressed = false;
  std::uint64_t busy_ns = 0;
  std::uint64_t queued_ns = 0;
  std::uint64_t epoch = 0;
  std::uint32_t draw = 0;
  std::uint64_t pixel_bytes = 0;  // protocol 1.5's split frames: the pixels' length after the message
};

class ReplyView {
 public:
  enum class Kind { kNone, kOpen, kResult, kResults, kMalformed };
  static constexpr std::size_t kMaxReasonBytes = 1024;

  // Takes the message's slices (by reference count, no copy) and parses it. Never fails as a
  // call: a bad message leaves kind() == kMalformed and why() saying what was wrong.
  void parse(grpc::ByteBuffer& buffer);
  // The same over bytes already in memory (tests, and nothing else).
  void parse_bytes(std::string_view bytes);
  // The same over bytes the caller keeps unchanged while this view is used (a split frame's
  // message in the results connection's buffer): no copy and no ByteBuffer, whose creation,
  // Dump and destruction were ~5% of the node's CPU per remote sample.
  void parse_in_place(std::string_view bytes);

  Kind kind() const { return kind_; }
  const std::string& why() const { return why_; }
  const v1::OpenReply& open() const { return open_; }         // kind kOpen
  const std::vector<ResultView>& results() const { return results_; }  // kResult (one) or kResults

  // Protocol 1.5's split frame (results_channel.hpp): the results' pixels follow the message.
  // Appends `pixels` (their bytes, or where they will be received) after the message's slices
  // and gives each result the range of its pixel_bytes there, in order. false, leaving kind()
  // kMalformed with why(), when a result also carries pixels inside the message, or their
  // lengths do not add up to pixels.size(). The slice must outlive every copy() from it.
  bool attach_pixels(grpc::Slice pixels);

  // Copies a field's bytes to `out` (which holds range.size bytes): the only copy they get.
  void copy(ByteRange range, std::uint8_t* out) const;
  // A field's bytes in one piece: in place when they lie in one slice, else gathered into
  // `scratch` (reused by the caller, so its pages stay mapped).
  std::string_view contiguous(ByteRange range, std::string& scratch) const;

 private:
  void reset();
  void parse_one(grpc::Slice slice);  // the message in one slice (parse_bytes, parse_in_place)
  void finish_parse();

  std::vector<grpc::Slice> slices_;
  std::vector<std::size_t> starts_;  // starts_[i]: the offset of slices_[i]; one more at the end
  Kind kind_ = Kind::kNone;
  std::string why_;
  v1::OpenReply open_;
  std::vector<ResultView> results_;
};

}  // namespace stoker::remote

// gRPC reads a ReplyView off the wire with this instead of protobuf's parser (the GPU node's
// stream is typed ClientReaderWriter<v1::Request, ReplyView>; link_connect.cpp).
template <>
class grpc::SerializationTraits<stoker::remote::ReplyView, void> {
 public:
  static grpc::Status Serialize(const stoker::remote::ReplyView&, grpc::ByteBuffer*, bool*) {
    return grpc::Status(grpc::StatusCode::UNIMPLEMENTED, "a ReplyView is only ever received");
  }
  static grpc::Status Deserialize(grpc::ByteBuffer* buffer, stoker::remote::ReplyView* msg) {
    msg->parse(*buffer);
    buffer->Clear();
    return grpc::Status::OK;  // a malformed message is reported by kind(), with its reason
  }
};
