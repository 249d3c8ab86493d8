// The GPU node's reader of protocol 1.5 split results frames (split_frames.hpp): the frame's
// message, then its pixels received straight into the ring slots of the results whose items
// the link lets it claim, the rest into a buffer of its own.
//
// Why apart from the link (link_receive.cpp): what is received where, and how a stall inside a
// frame hands claimed items back, is framing; which items may be claimed, and when one is
// overdue, is the link's bookkeeping. The link answers through SlotClaims, under its own lock.
//
// Invariant: a claimed item's slot may be written by the kernel until the frame's pixels are
// all received or the claim is released; the link neither hedges nor re-issues it meanwhile
// (Outstanding::receiving).
#pragma once

#include <sys/uio.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "remote/reply_view.hpp"
#include "remote/results_channel.hpp"

namespace stoker::remote {

class SlotClaims {
 public:
  virtual ~SlotClaims() = default;
  // On entry claimed[i] is 1 where result i could go to a slot as it stands (ok, uncompressed,
  // of the sample's size). The link keeps it 1, and sets slots[i], where it claims the item;
  // clears it where not (the pixels then go to the buffer, and take() judges them as ever).
  virtual void claim(std::span<const ResultView> results, std::span<char> claimed, std::span<std::uint8_t*> slots) = 0;
  // No byte of the pixels for the socket's receive timeout: true when the claims of
  // results[from..] (where `claimed`) are to be given up, since one is past its hedge time. They
  // still stand: the caller moves what came of their pixels out of the slots, then release()s.
  virtual bool stalled_too_long(std::span<const ResultView> results, std::span<const char> claimed,
                                std::size_t from) = 0;
  // Claims of results[from..] (where `claimed`) released without taking them: owed as before
  // (hedged when due, re-issued when the link ends). The slots are not written after this.
  virtual void release(std::span<const ResultView> results, std::span<const char> claimed, std::size_t from) = 0;
};

class SplitReceiver {
 public:
  // `fd`: the bound results connection. Its SO_RCVTIMEO is set to kStallCheckMs, bounding each
  // wait: between frames the reader just waits again; pixels that have not all come within it
  // ask SlotClaims::stalled_too_long().
  SplitReceiver(int fd, std::size_t sample_bytes, std::size_t max_pixels);

  // Reads the next frame whole. kFrame: reply() holds it, and claimed()[i] says whether result
  // i's pixels are in its slot (its claim stands: the caller takes or releases it). A frame
  // whose message is no results, or whose results do not claim exactly its pixels, is kFrame
  // too, with reply() malformed and nothing claimed (the caller says why the worker is dropped).
  // kTooLong: a length out of bounds (garbage); kCut, kClosed: the connection ended, with
  // nothing claimed; `why` says how.
  FrameRead next(SlotClaims& claims, std::string& why);

  const ReplyView& reply() const { return reply_; }
  std::vector<char>& claimed() { return claimed_; }

 private:
  // Gives up the claims of a stalled frame once the link says they are overdue: what came of
  // their pixels is copied into the buffer and the rest is received there. Else nothing.
  void give_up_if_overdue(SlotClaims& claims);

  const int fd_;
  const std::size_t sample_bytes_, max_pixels_;
  // Reused between frames, so their pages stay mapped (receive_memory.hpp).
  std::vector<std::uint8_t> head_, rest_;
  std::vector<iovec> parts_;
  std::vector<std::uint8_t*> slots_;
  std::vector<char> claimed_;
  std::size_t next_ = 0;  // the first part not yet received
  ReplyView reply_;
};

}  // namespace stoker::remote
