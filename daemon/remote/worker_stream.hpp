// One GPU node's stream at a `stokerd --worker`, on gRPC's callback API (issue #34, A3/A4):
// a stream holds no thread while it waits — for its Open, for items, or for its node to read
// what was made — so the worker's threads do not grow with its streams.
//
// Flow control (A3): a stream's finished results wait in its outbox until gRPC has written the
// previous reply; while the outbox (plus the samples being made for it) holds
// kStreamBufferBytes or more, the decode threads make none of the stream's items — the stream
// is parked, holds no thread, and is picked up again when a write completes. A node that never
// reads its stream therefore costs the worker at most about kStreamBufferBytes, a gRPC window,
// and its queued Items (at most kMaxInFlight), and blocks no decode thread.
//
// Linger (issue #36): a result that finds no write outstanding still waits, up to
// settings().result_linger after the oldest waiting result was made, for others to leave with
// it — but only while more are coming (an item of the stream is being made, or one waits with
// room to be made), and only until kMaxBatch results or kBatchBytes are waiting. A result
// therefore waits at most the linger, and never for an item that is not in the worker's hands;
// the host's timer (StreamHost::wake_at) writes what a linger ended with. Parking is unaffected:
// kBatchBytes is below every stream's park threshold.
//
// Results connection (issue #36, protocol 1.3; results_channel.hpp): once a plaintext stream's
// node binds one, each reply is written there by the stream's writer thread instead of by
// gRPC; the flags above (writing_, parking) are the same, the writer completes a write as
// OnWriteDone does. From protocol 1.4 the node sends its ItemBatches on that connection too: a
// reader thread of the stream's takes them with the same checks as the stream's own reads, until
// the connection or the stream's reads end; the stream does not finish before that reader has.
//
// Life: created by the server for each call, kept alive by its own `self_` until gRPC's OnDone
// and by the decode threads' references while they make its items. Invariant: no gRPC
// operation (StartRead, StartWrite, Finish) is started after `finished_` is set, and Finish is
// called exactly once, when no read or write is outstanding and no decode thread holds one of
// its items; gRPC calls are made outside `mu_` (a reaction may run on the calling thread).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>

#include <grpcpp/grpcpp.h>

#include "base/mutex.hpp"
#include "remote/results_channel.hpp"
#include "remote/worker_session.hpp"
#include "stoker/remote/worker.grpc.pb.h"

namespace stoker::remote {

class WorkerStream;
class ResultsListener;

// What a stream needs from its server (worker_server.cpp): the decode pool, the Open
// deadlines, the counters and the once-per-peer log.
class StreamHost {
 public:
  enum class PeerLog { kBusy, kTimeout, kToken };
  struct Counters {
    std::atomic<std::uint64_t> refused{0}, errors{0}, sessions{0}, stalls{0};
    std::atomic<std::uint32_t> streams{0};
    std::atomic<unsigned> active{0};  // streams in the server, opened or not (at most max_streams)
  };
  virtual ~StreamHost() = default;
  virtual const WorkerSettings& settings() const = 0;
  virtual Counters& counters() = 0;
  // The stream has items to make and room for their results: queue it for a decode thread.
  virtual void schedule(std::shared_ptr<WorkerStream> stream) = 0;
  // The Open deadline: watched from the stream's start until its first read completes.
  // unwatch() is false when the deadline passed first (the stream was cancelled).
  virtual void watch(grpc::CallbackServerContext* ctx, std::chrono::steady_clock::time_point until) = 0;
  virtual bool unwatch(grpc::CallbackServerContext* ctx) = 0;
  virtual bool first_from(const std::string& peer, PeerLog why) = 0;
  // Calls stream->linger_due() at `when` or soon after (once per call), from a thread of the
  // host's, outside every lock of the host's.
  virtual void wake_at(std::shared_ptr<WorkerStream> stream, std::chrono::steady_clock::time_point when) = 0;
  // Where a plaintext stream's results connection binds (results_channel.hpp); null: none (TLS,
  // or the listener could not start).
  virtual ResultsListener* results_listener() = 0;
  // --inject-fault oversize-frame, miscount-frame (tests): how this results frame is to lie.
  virtual FrameLie spoil_results_frame() = 0;
  // --inject-fault unbound-results (tests): every results connection is closed unbound.
  virtual bool refuse_results_binding() = 0;
  // --inject-fault stall-frame (tests): how long this split results frame pauses halfway.
  virtual std::chrono::milliseconds stall_results_frame() = 0;
  // --inject-fault slow-results (tests): how long a results frame of `bytes` holds its write
  // after it is sent (zero: not at all).
  virtual std::chrono::microseconds pace_results_frame(std::size_t bytes) = 0;
};

class WorkerStream final : public grpc::ServerBidiReactor<v1::Request, v1::Reply>,
                           public std::enable_shared_from_this<WorkerStream> {
 public:
  // Starts the stream (its Open deadline and first read). The returned pointer is gRPC's to
  // drive; the object frees itself after OnDone once no decode thread holds it.
  static WorkerStream* start(StreamHost& host, grpc::CallbackServerContext* ctx, std::uint64_t serial);

  WorkerStream(StreamHost& host, grpc::CallbackServerContext* ctx, std::uint64_t serial);
  WorkerStream(const WorkerStream&) = delete;
  WorkerStream& operator=(const WorkerStream&) = delete;

  // For the decode threads. take(): the next item to make, or nothing (the stream is ended,
  // has none, or is parked for its unread results: counted in stalls); when it returns an item
  // and more can be made, the stream is queued again (round robin among streams).
  struct Taken {
    v1::Item item;
    std::chrono::steady_clock::time_point arrived;
    // An object URL's bytes, fetched ahead (WorkerSession::prefetch); not valid(): read when
    // made. `fetch_tried`: prefetch was asked already (a refused item is not asked again).
    std::shared_future<Fetched> fetched;
    bool fetch_tried = false;
  };
  std::optional<Taken> take();
  // A result made from an item take() gave (exactly one per item).
  void deliver(v1::Result&& result);
  // The stream's results wait on its link: a write is outstanding, and the writes have lately
  // taken kLinkBusyToCompress of the time or more (back to back: the link is slower than this
  // worker's decoding), or this one has for kLinkWaitToCompress. remote.compression auto
  // compresses the results made meanwhile: fewer bytes for the link, with CPU the worker would
  // otherwise leave idle while the stream parks. A link that keeps up completes a write as soon
  // as the socket buffer takes it: a small share of the time. On the results connection, false
  // while the node's receive window is closed (send_limits.hpp): then the node is not reading,
  // and the link is not what holds the writes back.
  bool results_wait_on_link();
  const WorkerSession& session() const { return *session_; }
  // The host's timer: a linger may have ended; writes what waited for it.
  void linger_due();
  std::uint64_t serial() const { return serial_; }
  // The results connection the Open's nonce named (results_channel.hpp): from now on replies are
  // written there, by a thread of the stream's own. false (fd not taken) when the stream has
  // ended or is bound already. Sends kResultsBound before any frame.
  bool bind_results(int fd);

  void OnReadDone(bool ok) override;
  void OnWriteDone(bool ok) override;
  void OnCancel() override;
  void OnDone() override;

 private:
  void open_read_done(bool ok);
  // Items from the node, on the stream or the results connection: checked against the bounds
  // and queued. Empty, or why the stream is to end (the caller ends it: end_for_locked).
  std::string queue_items(v1::Request& req);
  // Ends the stream for what its node sent (counted, logged).
  void end_for_locked(const std::string& bad) STOKER_REQUIRES(mu_);
  void refuse(grpc::Status status, const std::string& reply_error);
  // Everything queued or unwritten is dropped; results still being made are dropped on delivery.
  void break_locked() STOKER_REQUIRES(mu_);
  // Room for one more sample: the outbox and the samples being made below kStreamBufferBytes.
  bool has_room_locked() const STOKER_REQUIRES(mu_);
  // Marks the stream queued when it should be and is not; the caller then schedules it.
  bool want_queue_locked() STOKER_REQUIRES(mu_);
  // Moves a batch of the outbox into write_ when no write is outstanding and no linger holds
  // it (the caller writes it); a linger that holds it asks act() for the timer.
  bool next_write_locked() STOKER_REQUIRES(mu_);
  bool lingering_locked(std::chrono::steady_clock::time_point now) const STOKER_REQUIRES(mu_);
  // Starts the fetches of the first fetch_ahead_ items waiting (object URLs only): while the
  // decode threads make one item, the next ones' bytes are on their way, so a round trip to
  // the store is paid once per window, not once per sample. Bounded: at most fetch_ahead_
  // items' bytes wait per stream.
  void fetch_ahead_locked() STOKER_REQUIRES(mu_);
  // Marks the stream finished when nothing is outstanding (the caller calls Finish(end_)).
  bool want_finish_locked() STOKER_REQUIRES(mu_);
  // Acts on the decisions taken under mu_ (and on a timer next_write_locked asked for), after
  // releasing it.
  void act(bool write, bool queue, bool finish);
  // The results connection's writer: writes each write_ handed to it, then completes it as
  // gRPC's OnWriteDone would. Holds `self` (the stream) until the stream finishes.
  void results_writer(std::shared_ptr<WorkerStream> self);
  // The results connection's reader (protocol 1.4): each frame is a Request of items.
  void items_reader(std::shared_ptr<WorkerStream> self, int fd);

  StreamHost& host_;
  grpc::CallbackServerContext* const ctx_;
  const std::uint64_t serial_;
  const std::string peer_;
  std::shared_ptr<WorkerStream> self_;      // set by start(), dropped in OnDone
  std::optional<WorkerSession> session_;   // made after the token check; const once opened_
  v1::Request read_;                        // the one read outstanding at a time
  v1::Reply write_;                         // the one write outstanding at a time
  bool opened_ = false;                     // the Open was accepted (set before any item is read)
  std::size_t buffer_bytes_ = 0;            // the park threshold (set with opened_)
  std::size_t fetch_ahead_ = 0;             // items fetched ahead at most (set with opened_)

  base::Mutex mu_;
  std::deque<Taken> todo_ STOKER_GUARDED_BY(mu_);        // received, not taken
  std::size_t making_ STOKER_GUARDED_BY(mu_) = 0;        // taken, not delivered
  std::deque<v1::Result> outbox_ STOKER_GUARDED_BY(mu_);  // made, not in a write yet
  std::size_t outbox_bytes_ STOKER_GUARDED_BY(mu_) = 0;
  std::size_t in_write_ STOKER_GUARDED_BY(mu_) = 0;      // results in write_ while writing_
  std::chrono::steady_clock::time_point write_started_ STOKER_GUARDED_BY(mu_);  // of the write outstanding
  std::chrono::steady_clock::time_point last_write_done_ STOKER_GUARDED_BY(mu_);
  // The share of the time writes were outstanding, averaged over the last few writes (halving weights) (each from
  // the previous one's end to its own): ~0 on a link that keeps up, ~1 on one that does not.
  double write_busy_share_ STOKER_GUARDED_BY(mu_) = 0;
  // When the outbox's oldest result was delivered (meaningful while the outbox is not empty).
  std::chrono::steady_clock::time_point oldest_ STOKER_GUARDED_BY(mu_);
  bool timer_set_ STOKER_GUARDED_BY(mu_) = false;     // a wake_at is pending (at most one)
  bool timer_wanted_ STOKER_GUARDED_BY(mu_) = false;  // act() is to ask for one, at oldest_ + linger
  bool reading_ STOKER_GUARDED_BY(mu_) = false;
  bool writing_ STOKER_GUARDED_BY(mu_) = false;
  bool queued_ STOKER_GUARDED_BY(mu_) = false;    // in the host's ready list
  bool parked_ STOKER_GUARDED_BY(mu_) = false;    // items wait for its results to be read
  bool broken_ STOKER_GUARDED_BY(mu_) = false;    // cancelled, a write failed, or a bad request
  bool finished_ STOKER_GUARDED_BY(mu_) = false;  // Finish was (or is about to be) called
  grpc::Status end_ STOKER_GUARDED_BY(mu_);       // what Finish reports
  // The results connection (protocol 1.3): -1 until bound; closed by its writer as it ends.
  // Invariant: while results_fd_ >= 0 every write after the bind goes to the writer, which
  // alone uses write_ then; shutdown() of the descriptor happens under mu_, its close too.
  std::string results_nonce_;  // offered to the listener (withdrawn in OnDone); set with opened_
  int results_fd_ STOKER_GUARDED_BY(mu_) = -1;
  bool results_posted_ STOKER_GUARDED_BY(mu_) = false;     // write_ is the writer's to write
  bool write_via_results_ STOKER_GUARDED_BY(mu_) = false;  // the write next_write_locked made
  // The items reader runs (set when the bind succeeds): holds Finish off, so the descriptor
  // and ctx_ outlive its use of them.
  bool items_reading_ STOKER_GUARDED_BY(mu_) = false;
  bool results_writer_gone_ STOKER_GUARDED_BY(mu_) = false;  // a bind failed after its threads started
  // The items reader ended the stream for a bad frame: Finish need not wait for the stream's
  // outstanding read (gRPC completes it with ok=false after Finish).
  bool read_abandoned_ STOKER_GUARDED_BY(mu_) = false;
  base::CondVar results_cv_;
};

}  // namespace stoker::remote
