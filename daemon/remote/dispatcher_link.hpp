// The GPU node's side of one worker endpoint (dispatcher.hpp's Link): private to the
// dispatcher's files. One thread connects and sends (link_connect.cpp, link_send.cpp); while a
// stream lives, a second reads its answers on the stream and a third on the results connection
// (link_receive.cpp). Invariants (dispatcher.hpp): an item ends exactly once, its entry leaving
// outstanding_ under mu_ with its answer or for re-issue; a worker's answers are read only while
// its stream lives.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "base/mutex.hpp"
#include "image/sample_processor.hpp"
#include "job/job.hpp"
#include "remote/dispatcher.hpp"
#include "remote/reply_view.hpp"
#include "remote/results_channel.hpp"
#include "remote/split_receiver.hpp"
#include "sched/work_queue.hpp"
#include "stoker/remote/worker.grpc.pb.h"

namespace stoker::remote {

using Clock = std::chrono::steady_clock;

// One endpoint: a thread that connects, sends and watches deadlines, and while a stream lives
// a second one that reads its answers.
class Dispatcher::Link : private SlotClaims {
 public:
  Link(Dispatcher& d, std::string address, std::string endpoint, std::string target);
  ~Link() { stop(); }

  const std::string& endpoint() const { return endpoint_; }

  void stop();

  WorkerLinkStatus status() const;

 private:
  // The most items a link holds (its window, adapted to the rate: adapt_window).
  static constexpr std::uint32_t kWindowMax = 512;

  struct Outstanding {
    sched::WorkItem item;
    job::Job::RemoteSample sample;
    Clock::time_point sent;
    // Its pixels are being received straight into its slot (a split frame): never hedged then,
    // since the kernel may be writing the slot (SlotClaims: claim, release).
    bool receiving = false;
  };

  // --- link_connect.cpp: the connection, its backoff and the Open ---

  void run();

  std::shared_ptr<grpc::ChannelCredentials> credentials();

  void fail(const std::string& why);

  // One stream, from connect to its end. true: it was accepted (the backoff starts over).
  bool serve_stream();

  // Sends the Open and reads the answer (the stream is cancelled if none comes in 10 s).
  bool open(grpc::ClientReaderWriter<v1::Request, ReplyView>& stream, grpc::ClientContext& ctx);

  // --- link_send.cpp: items out, the window, hedging, remote.verify's draw ---

  void send_loop(grpc::ClientReaderWriter<v1::Request, ReplyView>& stream, grpc::ClientContext& ctx);

  // How long an item may be outstanding before it is made here instead (kHedgeFactor).
  double hedge_after() const STOKER_REQUIRES(mu_);

  // The sender sleeps until the oldest item's hedge time or the link's deadline, whichever
  // comes first: everything else that lets it act notifies cv_ (an answer bringing the table
  // to half the window, a hedged item's answer, a released receive, stop, a reader's end). A
  // fixed 20 ms poll woke it ~50 times a second for nothing: ~40% of its wake-ups (issue #36).
  // Never less than kMinWait (the oldest item may be being received into its slot, which is
  // not hedged, so its time can pass with nothing to do), nor more than kMaxWait (the window
  // adapts only when the sender runs).
  void wait_until_due(base::MutexLock& lock, Clock::time_point now, double deadline) STOKER_REQUIRES(mu_);

  // An ItemBatch on the results connection (protocol 1.4). A worker that takes none of it for
  // remote.deadline_s is as one that answers nothing: the link ends and its items are re-issued.
  bool send_items(const v1::Request& req);

  // The items outstanding past the hedge time, moved from outstanding_ to hedged_ (whose
  // entries wait for the worker's answer, to discard it, or for the deadline).
  std::vector<sched::WorkItem> take_overdue(Clock::time_point now) STOKER_REQUIRES(mu_);

  // Whether this result is made again here and compared (remote.verify): a draw per sample and
  // epoch from a key the worker never sees, so it cannot tell which of its answers are checked.
  bool chosen_for_verify(const job::Job::RemoteSample& s) const;

  // Window: two items per worker thread (one decoding, one queued behind it) plus what the
  // link holds while answers travel: the rate times the link's own round trip (the least of
  // the last second's round trips less each item's wait and work at the worker, so items
  // queued there do not count: that would feed back into an ever larger window).
  // Two items per worker thread, and at least 16: the sender refills at half the window, so a
  // worker with few threads still gets its items 8 or more to a message (each message is a
  // wake-up of this node's threads, which is most of what a remote sample costs it).
  std::uint32_t floor_window() const STOKER_REQUIRES(mu_);

  void adapt_window(Clock::time_point now) STOKER_REQUIRES(mu_);

  // --- link_receive.cpp: answers in, slots claimed, each answer taken and settled ---

  // One Reply after the OpenReply, from the stream or the results connection: its results taken
  // (one reader at a time: the take state is the readers'). Empty, or why the worker is dropped.
  // `placed`: for a split frame, which results' pixels were received into their slots.
  std::string handle_reply(const ReplyView& reply, std::vector<char>* placed = nullptr);

  // A reader's end (the stream's or the results connection's): the link is broken, the sender
  // stops, the first to notice (or one with a reason) says why.
  void reader_ended(const std::string& why, const char* ended);

  void read_loop(grpc::ClientReaderWriter<v1::Request, ReplyView>& stream);

  // The results connection's reader (results_channel.hpp): split frames from a 1.5 worker
  // (split_receiver.hpp), else each frame a whole Reply parsed in place by the stream's parser.
  void results_loop(grpc::ClientContext& ctx);

  // A frame not read: why (empty when the worker closed between frames). A length out of
  // bounds is garbage, and the worker is dropped for it; a connection cut inside a frame is not.
  std::string unread_frame(FrameRead got, const std::string& read_why);

  std::string read_whole_frames(std::size_t max);

  std::string read_split_frames(std::size_t max);

  // SlotClaims (split_receiver.hpp), for the results connection's reader: an item is claimed
  // when owed, not claimed already (a frame naming it twice), echoing its epoch and draw, and
  // not a remote.verify pick (its pixels are compared where they lie in the receiver's buffer,
  // and only then written to the slot: take()).
  void claim(std::span<const ResultView> results, std::span<char> claimed, std::span<std::uint8_t*> slots) override;

  // A worker that stalls inside a frame delays the batch no longer than one that is late: once
  // a claimed item there is past its hedge time, all of them go back to hedging.
  bool stalled_too_long(std::span<const ResultView> results, std::span<const char> claimed, std::size_t from) override;

  void release(std::span<const ResultView> results, std::span<const char> claimed, std::size_t from) override;

  // One answer: matched with the item it names (an unknown id is garbage, the late answer of a
  // hedged item is discarded, a 1.1 worker's echo must equal what was sent), checked, written
  // into the slot and settled; a "bad file" verdict and a remote.verify pick are made again
  // here first. false with `why` when the worker misbehaved or its answer differs from this
  // node's (the item is re-issued, or served from this node's pixels; the caller ends the
  // stream).
  // `r` is one of `msg`'s results; its pixels are copied from msg's slices straight into the
  // slot, or were received there already (`placed`: a split frame's, checked before: owed, ok,
  // uncompressed, of the sample's size, its echo equal). A remote.verify pick's raw pixels
  // stay in msg until compared; the slot then gets them through Job::put_sample.
  base::Status take(const ResultView& r, const ReplyView& msg, bool placed = false);

  // A well-formed answer settled (take()), made here first where the worker could not read
  // it, called it bad (A5: never quarantined on its word) or it is a remote.verify pick (A6:
  // compared byte for byte where its pixels lie: in the slot `out` when `in_slot`, else still
  // in msg). Empty, or why this node's pixels refute the worker's (they serve; it is dropped).
  std::string settle(const Outstanding& o, const ResultView& r, const ReplyView& msg, const image::SampleResult& result,
                     bool pick, bool in_slot, std::uint8_t* out);

  // Every item the link holds, back to the front of the queue (link_send.cpp).
  void reissue_all();

  Dispatcher& d_;
  const std::string address_, endpoint_, target_;
  mutable base::Mutex mu_;
  base::CondVar cv_;
  bool stop_ STOKER_GUARDED_BY(mu_) = false;
  bool broken_ STOKER_GUARDED_BY(mu_) = false;
  std::shared_ptr<grpc::ClientContext> ctx_ STOKER_GUARDED_BY(mu_);
  // Items sent and not yet answered, by id. Invariant (as for hedged_): ids are given in send
  // order (next_id_) and an entry keeps its send time, so begin() is the oldest; the sender's
  // deadline check, wait_until_due and take_overdue rely on it.
  std::map<std::uint64_t, Outstanding> outstanding_ STOKER_GUARDED_BY(mu_);
  WorkerLinkStatus stats_ STOKER_GUARDED_BY(mu_);
  std::uint32_t window_ STOKER_GUARDED_BY(mu_) = 2;
  Clock::time_point rate_mark_ STOKER_GUARDED_BY(mu_);
  std::uint64_t rate_samples_ STOKER_GUARDED_BY(mu_) = 0;
  double link_rtt_min_ STOKER_GUARDED_BY(mu_) = 1e18;  // least (round trip - worker time) this second
  // Items hedged (made here) whose worker's answer is still due: by id, when sent. The answer
  // is discarded; the deadline still counts from the send.
  std::map<std::uint64_t, Clock::time_point> hedged_ STOKER_GUARDED_BY(mu_);
  std::uint32_t worker_minor_ STOKER_GUARDED_BY(mu_) = 0;    // the protocol minor of the open stream's worker
  bool misbehaved_ STOKER_GUARDED_BY(mu_) = false;           // the stream was ended for garbage or a mismatch
  std::uint64_t next_id_ = 1;                                // the sending thread's
  std::unique_ptr<image::SampleProcessor> hedge_processor_;  // the sending thread's (hedged items)
  std::vector<std::uint8_t> hedge_buffer_;
  // The reading thread's: worker read failures, "bad file" verdicts and remote.verify picks.
  std::unique_ptr<image::SampleProcessor> local_;
  std::vector<std::uint8_t> buffer_, check_;
  std::string zstd_scratch_;          // a compressed sample split over slices, gathered (reused)
  std::uint64_t stalled_frames_ = 0;  // the results connection's reader's (stalled_too_long)
  // Held by whichever reader takes results (the stream's or the results connection's: a worker
  // writes to one at a time, so it is not contended); guards the reading state above.
  base::Mutex take_mu_;
  // The results connection (protocol 1.3), -1 when none: set by open() on the link's thread,
  // read by results_loop, shut down and closed by serve_stream after both readers are joined.
  int results_fd_ = -1;
  bool items_tcp_ = false;   // the link's thread's: this stream's items go on results_fd_
  std::string items_frame_;  // the sending thread's (reused)
  std::thread thread_;
};

}  // namespace stoker::remote
