#include "remote/reply_view.hpp"

#include <algorithm>
#include <cstring>

#include "remote/protocol.hpp"

namespace stoker::remote {

namespace {

// Protobuf's wire types (the low three bits of a field's key).
enum WireType : std::uint32_t { kVarint = 0, kFixed64 = 1, kLengthDelimited = 2, kFixed32 = 5 };

// Reads [pos, end) of a message held in slices. Invariant: pos_ <= end_ <= the message's size,
// and every read checks what is left first, so no byte past end_ is ever touched.
class Reader {
 public:
  Reader(const std::vector<grpc::Slice>& slices, const std::vector<std::size_t>& starts, std::size_t begin,
         std::size_t end)
      : slices_(slices), starts_(starts), pos_(begin), end_(end) {}

  bool at_end() const { return pos_ >= end_; }
  std::size_t pos() const { return pos_; }
  std::size_t left() const { return end_ - pos_; }

  // Up to 10 bytes, 7 bits each; the tenth may carry only the top bit of 64.
  bool varint(std::uint64_t& v) {
    v = 0;
    for (int shift = 0; shift < 70; shift += 7) {
      if (at_end()) return false;
      const std::uint8_t b = byte();
      if (shift == 63 && b > 1) return false;
      v |= static_cast<std::uint64_t>(b & 0x7f) << shift;
      if ((b & 0x80) == 0) return true;
    }
    return false;
  }

  bool skip(std::uint64_t n) {
    if (n > left()) return false;
    pos_ += static_cast<std::size_t>(n);
    return true;
  }

  // A length-delimited field's length, checked against what is left of this message.
  bool length(std::uint64_t& n) { return varint(n) && n <= left(); }

  Reader sub(std::size_t n) const {
    Reader r(slices_, starts_, pos_, pos_ + n);
    r.slice_ = slice_;  // at or before pos_'s slice: byte() only ever moves it forward
    return r;
  }

 private:
  std::uint8_t byte() {
    while (pos_ >= starts_[slice_ + 1]) ++slice_;  // pos_ < end_ <= starts_.back(): stops in range
    const std::uint8_t b = slices_[slice_].begin()[pos_ - starts_[slice_]];
    ++pos_;
    return b;
  }

  const std::vector<grpc::Slice>& slices_;
  const std::vector<std::size_t>& starts_;
  std::size_t pos_, end_;
  std::size_t slice_ = 0;  // the slice a byte was last read from: never past pos_'s
};

}  // namespace

void ReplyView::reset() {
  slices_.clear();
  starts_.assign(1, 0);
  kind_ = Kind::kNone;
  why_.clear();
  open_.Clear();
  results_.clear();  // keeps its capacity (and each reason's) for the next message
}

void ReplyView::parse(grpc::ByteBuffer& buffer) {
  reset();
  if (!buffer.Dump(&slices_).ok()) {
    kind_ = Kind::kMalformed;
    why_ = "a message gRPC could not read";
    return;
  }
  std::erase_if(slices_, [](const grpc::Slice& s) { return s.size() == 0; });
  for (const grpc::Slice& s : slices_) starts_.push_back(starts_.back() + s.size());
  finish_parse();
}

void ReplyView::parse_bytes(std::string_view bytes) {
  parse_one(grpc::Slice(bytes.data(), bytes.size()));  // a copy: tests only
}

void ReplyView::parse_in_place(std::string_view bytes) {
  parse_one(grpc::Slice(bytes.data(), bytes.size(), grpc::Slice::STATIC_SLICE));  // no copy
}

void ReplyView::parse_one(grpc::Slice slice) {
  reset();
  if (slice.size() > 0) {
    starts_.push_back(slice.size());
    slices_.push_back(std::move(slice));
  }
  finish_parse();
}

void ReplyView::finish_parse() {
  std::string why;
  auto bad = [&](std::string w) {
    why = std::move(w);
    return false;
  };
  // A field's key: its number (1 .. 2^29-1) and wire type.
  auto key = [&](Reader& r, std::uint32_t& field, std::uint32_t& wire) {
    std::uint64_t k = 0;
    if (!r.varint(k)) return bad("a truncated or overlong field key at byte " + std::to_string(r.pos()));
    field = static_cast<std::uint32_t>(k >> 3);
    wire = static_cast<std::uint32_t>(k & 7);
    if (field == 0 || k >> 32 != 0) return bad("field number 0 or out of range at byte " + std::to_string(r.pos()));
    return true;
  };
  auto skip_unknown = [&](Reader& r, std::uint32_t wire) {
    std::uint64_t n = 0;
    switch (wire) {
      case kVarint:
        return r.varint(n) || bad("a truncated varint");
      case kFixed64:
        return r.skip(8) || bad("a truncated fixed64");
      case kFixed32:
        return r.skip(4) || bad("a truncated fixed32");
      case kLengthDelimited:
        return (r.length(n) && r.skip(n)) || bad("a field longer than its message");
      default:
        return bad("wire type " + std::to_string(wire) + " (groups are not used by this protocol)");
    }
  };
  auto parse_result = [&](Reader r, ResultView& out) {
    while (!r.at_end()) {
      std::uint32_t field = 0, wire = 0;
      if (!key(r, field, wire)) return false;
      if (field > 12) {
        if (!skip_unknown(r, wire)) return false;
        continue;
      }
      const bool bytes_field = field == 3 || field == 6;
      if (wire != (bytes_field ? kLengthDelimited : kVarint)) {
        return bad("Result field " + std::to_string(field) + " sent as wire type " + std::to_string(wire));
      }
      std::uint64_t v = 0;
      if (bytes_field) {
        if (!r.length(v)) return bad("Result field " + std::to_string(field) + " longer than its message");
        if (field == 6) {
          out.pixels = ByteRange{r.pos(), static_cast<std::size_t>(v)};
        } else {
          out.reason.resize(std::min<std::size_t>(v, kMaxReasonBytes));
          copy(ByteRange{r.pos(), out.reason.size()}, reinterpret_cast<std::uint8_t*>(out.reason.data()));
        }
        r.skip(v);
        continue;
      }
      if (!r.varint(v)) return bad("Result field " + std::to_string(field) + ": a truncated varint");
      // Narrower fields keep their low bits, as protobuf's own parser does.
      switch (field) {
        case 1: out.id = v; break;
        case 2: out.error = static_cast<std::uint32_t>(v); break;
        case 4: out.warnings = static_cast<std::uint32_t>(v); break;
        case 5: out.format = static_cast<std::uint32_t>(v); break;
        case 7: out.compressed = v != 0; break;
        case 8: out.busy_ns = v; break;
        case 9: out.queued_ns = v; break;
        case 10: out.epoch = v; break;
        case 11: out.draw = static_cast<std::uint32_t>(v); break;
        case 12:
          out.pixel_bytes = v;
          break;
        default: break;
      }
    }
    return true;
  };

  Reader r(slices_, starts_, 0, starts_.back());
  bool ok = true;
  while (ok && !r.at_end()) {
    std::uint32_t field = 0, wire = 0;
    if (!key(r, field, wire)) {
      ok = false;
      break;
    }
    if (field > 3) {
      ok = skip_unknown(r, wire);
      continue;
    }
    std::uint64_t n = 0;
    if (wire != kLengthDelimited) {
      ok = bad("Reply field " + std::to_string(field) + " sent as wire type " + std::to_string(wire));
    } else if (!r.length(n)) {
      ok = bad("Reply field " + std::to_string(field) + " longer than the message");
    } else if (kind_ != Kind::kNone) {
      ok = bad("a Reply of two kinds");
    } else if (field == 1) {
      kind_ = Kind::kOpen;
      std::string scratch;
      if (!open_.ParseFromString(std::string(contiguous(ByteRange{r.pos(), static_cast<std::size_t>(n)}, scratch)))) {
        ok = bad("an OpenReply that does not parse");
      }
    } else if (field == 2) {
      kind_ = Kind::kResult;
      results_.emplace_back();
      ok = parse_result(r.sub(static_cast<std::size_t>(n)), results_.back());
    } else {
      kind_ = Kind::kResults;
      Reader batch = r.sub(static_cast<std::size_t>(n));
      while (ok && !batch.at_end()) {
        std::uint32_t f = 0, w = 0;
        std::uint64_t m = 0;
        if (!key(batch, f, w)) {
          ok = false;
        } else if (f != 1) {
          ok = skip_unknown(batch, w);
        } else if (w != kLengthDelimited || !batch.length(m)) {
          ok = bad("a ResultBatch entry that is not a whole message");
        } else if (results_.size() >= kMaxBatch) {
          ok = bad("a ResultBatch of more than " + std::to_string(kMaxBatch) + " results");
        } else {
          results_.emplace_back();
          ok = parse_result(batch.sub(static_cast<std::size_t>(m)), results_.back());
          batch.skip(m);
        }
      }
    }
    if (ok) r.skip(n);
  }
  if (!ok) {
    kind_ = Kind::kMalformed;
    why_ = "a malformed Reply: " + why;
    results_.clear();
  }
}

bool ReplyView::attach_pixels(grpc::Slice pixels) {
  if (kind_ != Kind::kResult && kind_ != Kind::kResults) {
    if (kind_ != Kind::kMalformed) {
      kind_ = Kind::kMalformed;
      why_ = "a split results frame whose message holds no results";
    }
    return false;
  }
  const std::size_t total = pixels.size();
  std::size_t at = starts_.back(), left = total;
  for (ResultView& r : results_) {
    if (r.pixels.size != 0 || r.pixel_bytes > left) {
      kind_ = Kind::kMalformed;
      why_ = r.pixels.size != 0 ? "a split results frame with pixels inside its message"
                                : "a split results frame whose results claim more than its " + std::to_string(total) +
                                      " bytes of pixels";
      results_.clear();
      return false;
    }
    r.pixels = ByteRange{at, static_cast<std::size_t>(r.pixel_bytes)};
    at += r.pixels.size;
    left -= r.pixels.size;
  }
  if (left != 0) {
    kind_ = Kind::kMalformed;
    why_ = "a split results frame with " + std::to_string(left) + " bytes of pixels no result claims";
    results_.clear();
    return false;
  }
  if (total != 0) {
    starts_.push_back(starts_.back() + total);
    slices_.push_back(std::move(pixels));
  }
  return true;
}

void ReplyView::copy(ByteRange range, std::uint8_t* out) const {
  // Ranges come from the parser, which checked them against the message; the first slice is
  // the last whose start is at or before the range's.
  std::size_t i = static_cast<std::size_t>(std::upper_bound(starts_.begin(), starts_.end(), range.offset) - starts_.begin());
  i = i == 0 ? 0 : i - 1;
  std::size_t at = range.offset, left = range.size;
  while (left > 0 && i < slices_.size()) {
    const std::size_t in = at - starts_[i];
    const std::size_t n = std::min(left, slices_[i].size() - in);
    std::memcpy(out, slices_[i].begin() + in, n);
    out += n;
    at += n;
    left -= n;
    ++i;
  }
}

std::string_view ReplyView::contiguous(ByteRange range, std::string& scratch) const {
  if (range.size == 0) return {};
  std::size_t i = static_cast<std::size_t>(std::upper_bound(starts_.begin(), starts_.end(), range.offset) - starts_.begin());
  i = i == 0 ? 0 : i - 1;
  if (i < slices_.size() && range.offset + range.size <= starts_[i + 1]) {
    return std::string_view(reinterpret_cast<const char*>(slices_[i].begin()) + (range.offset - starts_[i]), range.size);
  }
  scratch.resize(range.size);
  copy(range, reinterpret_cast<std::uint8_t*>(scratch.data()));
  return scratch;
}

}  // namespace stoker::remote
