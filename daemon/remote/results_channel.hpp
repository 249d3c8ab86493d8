// A plaintext link's results on a TCP connection of their own (issue #36, protocol 1.3).
//
// Why: through gRPC each remote sample cost the GPU node two to three times what a bare TCP
// receive of the same bytes costs (docs/PERFORMANCE.md: HTTP/2 framing and flow-control
// WINDOW_UPDATEs, the completion queue's polling and hand-offs). The Open and the stream's
// life stay on gRPC (the items too, before protocol 1.4: below); the worker's Replies after its
// OpenReply move here, each framed as a 4-byte little-endian length and then the Reply's protobuf bytes — the bytes the
// stream would have carried, read on the node by the same ReplyView parser (fuzzed), so the
// only new thing a worker's bytes meet is the length, bounded by max_reply_bytes().
//
// Binding: the node's Open carries kNonceBytes random bytes (results_nonce); a worker with a
// results listener answers its port (OpenReply.results_port); the node connects to that port on
// the host it reached, sends kResultsMagic and the nonce; the worker binds the connection to the
// stream whose Open carried that nonce (each nonce once, only while that stream lives, compared
// in constant time) and answers one byte, kResultsBound, before any frame. Only plaintext links
// ask: the nonce is exactly as private as the stream it came on. A TLS link keeps its results on
// the stream.
//
// Failure: a node that cannot connect or is not answered within kBindTimeout reads its results
// from the stream (the worker writes there until a connection is bound). Once bound, the
// connection's end is the stream's: the node cancels the stream and re-issues what it held; a
// frame longer than the bound, or one the parser refuses, drops the worker as misbehaving.
// The worker's side, its listener, is results_listener.hpp.
//
// Items (protocol 1.4): a node whose worker answered 1.4 or later writes its ItemBatches on the
// bound connection too, in the same framing (a Request's protobuf bytes, at most
// kMaxRequestBytes), instead of on the stream; the worker reads them with the stream's own checks
// (worker_stream.hpp). A bad frame ends the stream, as a bad Request on the stream would.
//
// Split frames (protocol 1.5): between a 1.5 node and worker, each results frame carries the
// pixels after the Reply, so the node receives them straight into the ring slots
// (split_frames.hpp); these helpers keep framing items, and a 1.3/1.4 peer's results.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace stoker::remote {

inline constexpr std::size_t kNonceBytes = 32;
inline constexpr char kResultsMagic[8] = {'S', 'T', 'K', 'R', 'E', 'S', '1', '\n'};
inline constexpr char kResultsBound = 'K';
inline constexpr std::chrono::milliseconds kBindTimeout{2000};

// recv() of exactly n bytes (the socket's SO_RCVTIMEO, if any, bounds each wait; with
// `wait_again`, a wait that times out is waited again). 0: all read; else the errno, or -1 when
// the peer closed after `got` bytes.
int recv_exact(int fd, void* to, std::size_t n, std::size_t& got, bool wait_again = false);

// The node's side. 32 random bytes (getrandom).
std::string make_results_nonce();
// Connects to host:port, presents the nonce and waits for kResultsBound, all within
// kBindTimeout: the connected descriptor, or -1 with `why`.
int connect_results(const std::string& host, std::uint32_t port, const std::string& nonce, std::string& why);

// How a worker's frame lies (--inject-fault, tests only): its length or pixel total says
// 2^31 - 1 (oversize-frame), or its pixel total one byte fewer than its results claim and
// follow (miscount-frame; split frames only, a 1.4 frame has no such total).
enum class FrameLie : std::uint8_t { kNone, kLength, kPixelCount };

// One frame: `frame` holds 4 bytes of room and then the body; the room is filled with the body's
// length (with `lie`, 2^31 - 1 instead: --inject-fault oversize-frame). false when the
// connection failed (shut down, reset).
bool write_results_frame(int fd, std::string& frame, bool lie = false);
// The node's items (protocol 1.4), framed as write_results_frame frames. The bound connection's
// send timeout bounds each wait; between waits `go_on` says whether to keep trying. false when
// the connection failed or `go_on` said no (the frame may then be cut: the link is ending).
bool write_items_frame(int fd, std::string& frame, const std::function<bool()>& go_on);
// Reads one frame's body into `body` (at most `max` bytes). Anything but kFrame leaves `why`
// saying what happened: kClosed, the peer closed between frames (or this node shut the
// connection down); kCut, it broke inside a frame (a worker gone, not a lie); kTooLong, the
// length was 0 or past `max` (garbage: the worker is dropped as misbehaving).
// `what` names the frames in `why` ("a results", or "an items" on the worker's side).
enum class FrameRead { kFrame, kClosed, kCut, kTooLong };
FrameRead read_results_frame(int fd, std::vector<std::uint8_t>& body, std::size_t max, std::string& why,
                             const char* what = "a results");

}  // namespace stoker::remote
