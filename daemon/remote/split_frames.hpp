// Protocol 1.5's results frames on the results connection (issue #36): the pixels after the
// message, so the GPU node receives each sample's pixels straight into its ring slot.
//
// Why: a 1.3/1.4 frame is a whole Reply, pixels inside, so the node had to receive the frame
// into a buffer before it could know where each sample goes, then copy every pixel into the
// slot (`memmove`: 16% of the node's CPU per remote sample, as much as the kernel's own copy).
// A split frame says first which results it holds and how long their pixels are; the node looks
// up each result's slot, then receives all the pixels in one recvmsg whose buffers are the slots.
//
// Layout (little-endian): u32 the message's length (1 .. kMaxSplitHeadBytes), u32 the pixels'
// total (0 .. max_reply_bytes), the Reply (its Results with `pixels` empty and `pixel_bytes`
// set), then each result's pixels in the message's order. Sent only between a node and a worker
// that both speak 1.5; items frames keep the 1.4 framing.
#pragma once

#include <sys/uio.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "remote/results_channel.hpp"

namespace stoker::remote {

// A split frame's message: its results without their pixels (ids, outcomes, reasons).
inline constexpr std::size_t kMaxSplitHeadBytes = 1u << 20;
inline constexpr std::size_t kSplitPrefixBytes = 8;
// How long the node's reader waits before it asks whether a stalled frame is overdue: both the
// results connection's SO_RCVTIMEO (SplitReceiver sets it) and receive_parts' pixel wait.
inline constexpr int kStallCheckMs = 250;

// The worker's side: `head` holds kSplitPrefixBytes of room and then the message; `pixels`
// follow it. The room is filled with both lengths (as `lie` says; with `pause`, the writer
// waits that long halfway through the pixels: stall-frame). false when the connection failed.
bool write_split_frame(int fd, std::string& head, std::span<const std::string> pixels, FrameLie lie = FrameLie::kNone,
                       std::chrono::milliseconds pause = std::chrono::milliseconds(0));

// The node's side, over a socket whose SO_RCVTIMEO is set (a wait that times out between
// frames is waited again: only shutdown() or the peer ends it). Reads the two lengths and the
// message into `head`; `pixels` is the total that follows. kTooLong: a length out of bounds.
FrameRead read_split_head(int fd, std::vector<std::uint8_t>& head, std::size_t max_pixels, std::size_t& pixels,
                          std::string& why);

// Receives into `parts` in order, advancing them as they fill: `next` is the first part not yet
// full (parts.size() once all are). It first waits, up to kStallCheckMs, for all that is missing to
// have arrived (one wake-up a frame), then takes it. 0: all received; EAGAIN: not all came in
// that wait (call again to go on); -1: the peer closed; else errno.
int receive_parts(int fd, std::vector<iovec>& parts, std::size_t& next);

}  // namespace stoker::remote
