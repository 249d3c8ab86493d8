// `stokerd --worker`'s gRPC side: the Worker service (proto/stoker/remote/worker.proto) on
// HOST:PORT, one WorkerSession per stream, and one pool of decode threads shared by every
// stream (items of all streams in arrival order). Stateless between streams: a GPU node that
// reconnects starts afresh.
//
// Bounds: a request of at most kMaxRequestBytes (gRPC refuses more), at most kMaxInFlight
// items held per stream (the stream is ended with RESOURCE_EXHAUSTED past that), keepalive
// pings answered so a GPU node notices a dead link. Issue #34, A3/A4: streams run on gRPC's
// callback API (worker_stream.hpp) and hold no thread while they wait, so the worker's threads
// are its decode threads, its Open watchdog and gRPC's own pool, whatever the number of
// streams; a stream whose results go unread is parked at kStreamBufferBytes (its items wait,
// no decode thread blocks). At most settings.max_streams are served at once (more are refused
// with RESOURCE_EXHAUSTED naming the cap, before anything is allocated); one without an Open
// within settings.open_timeout is cancelled (counted, logged once per peer host); the Open's
// token is checked before the stream's session, buffers or items exist.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "remote/worker_session.hpp"

namespace stoker::remote {

struct TlsFiles {
  std::string cert, key;  // this side's certificate and key (PEM)
  std::string ca;         // the peers' certificates must be signed by this one; empty: no client check
  bool enabled() const { return !cert.empty(); }
};

// A worker that misbehaves on purpose, for the GPU node's tests (`stokerd --worker
// --inject-fault KIND:N`, hidden from --help): every Nth result is spoiled so, as a broken or
// hostile worker's would be. Never set in production. kCorruptFrame flips a byte of every Nth
// compressed result's zstd frame (under zstd, a sample zstd cannot shrink leaves raw, and is
// neither spoiled nor counted).
// kOversizeFrame spoils the results connection's framing instead: every Nth frame's length
// says 2 GiB (results_channel.hpp; a stream whose results stay on gRPC is not spoiled);
// kUnboundResults closes every results connection unbound (the node keeps them on the stream);
// kStallFrame pauses every Nth split results frame halfway through its pixels for
// kStallFrameFor (a link that stalls inside a frame: the node hedges what it was receiving);
// kMiscountFrame makes every Nth split frame's pixel total one byte short of what its results
// claim (a 1.4 frame, which has no such total, is sent whole and true); kFlipPixels flips one
// bit of every Nth uncompressed sample (compressed ones are not counted), keeping its size: an answer only
// remote.verify can catch. kSlowResults paces the results connection at N KiB/s (a link slower than the worker's
// decoding, for remote.compression auto): after each frame the writer sleeps what the frame
// would take at that rate, its write still outstanding.
enum class Fault : std::uint8_t {
  kNone,
  kWrongSize,
  kUnknownId,
  kCorruptFrame,
  kOversizeFrame,
  kUnboundResults,
  kStallFrame,
  kMiscountFrame,
  kFlipPixels,
  kSlowResults
};
inline constexpr std::chrono::milliseconds kStallFrameFor{3000};
struct FaultPlan {
  Fault kind = Fault::kNone;
  std::uint64_t every = 0;
};

struct WorkerStats {
  std::uint64_t items = 0, errors = 0, refused = 0, bytes_sent = 0;
  std::uint64_t busy_ns = 0;
  std::uint32_t streams = 0;
  std::uint64_t open_timeouts = 0;  // streams cancelled for no Open in time (in `refused` too)
  std::uint64_t sessions = 0;       // streams given a session (their Open passed version and token)
  std::uint64_t stalls = 0;         // times a stream was parked for its unread results (A3)
};

class WorkerServer {
 public:
  // Listens on `listen` ("HOST:PORT"; port 0: any, see port()) and starts `settings.threads`
  // decode threads. Throws std::runtime_error naming the address when it cannot listen.
  WorkerServer(WorkerSettings settings, const std::string& listen, const TlsFiles& tls, FaultPlan fault = {});
  ~WorkerServer();  // shutdown()
  WorkerServer(const WorkerServer&) = delete;
  WorkerServer& operator=(const WorkerServer&) = delete;

  int port() const;
  // Where plaintext streams' results connections bind (results_channel.hpp); 0: none (TLS).
  int results_port() const;
  WorkerStats stats() const;
  // Ends every stream (their GPU nodes re-issue what was in flight) and stops the threads.
  void shutdown();

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

// Reads a PEM or token file whole (errors name the file).
base::Result<std::string> read_secret_file(const std::string& path, const char* what);

}  // namespace stoker::remote
