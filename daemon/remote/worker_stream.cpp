#include "remote/worker_stream.hpp"

#include <algorithm>
#include <system_error>
#include <thread>
#include <utility>

#include <sys/socket.h>
#include <unistd.h>

#include "log/log.hpp"
#include "remote/protocol.hpp"
#include "remote/results_listener.hpp"
#include "remote/send_limits.hpp"
#include "remote/split_frames.hpp"

namespace stoker::remote {

WorkerStream* WorkerStream::start(StreamHost& host, grpc::CallbackServerContext* ctx, std::uint64_t serial) {
  auto s = std::make_shared<WorkerStream>(host, ctx, serial);
  s->self_ = s;
  {
    base::MutexLock lock(s->mu_);
    s->reading_ = true;
  }
  host.watch(ctx, std::chrono::steady_clock::now() + host.settings().open_timeout);
  s->StartRead(&s->read_);
  return s.get();
}

WorkerStream::WorkerStream(StreamHost& host, grpc::CallbackServerContext* ctx, std::uint64_t serial)
    : host_(host), ctx_(ctx), serial_(serial), peer_(ctx->peer()) {}

// ---- the Open -------------------------------------------------------------------------------

void WorkerStream::open_read_done(bool ok) {
  const bool in_time = host_.unwatch(ctx_);
  if (!ok || !in_time) {
    if (!in_time && host_.first_from(peer_, StreamHost::PeerLog::kTimeout)) {
      stoker::log::warn(
          "worker: cancelled a stream from {}: no Open within {} ms (--open-timeout; logged once per peer)", peer_,
          host_.settings().open_timeout.count());
    }
    base::MutexLock lock(mu_);
    reading_ = false;
    if (!in_time) {
      end_ = grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED,
                          "no Open within " + std::to_string(host_.settings().open_timeout.count()) + " ms");
    }
    break_locked();
    const bool fin = want_finish_locked();
    lock.unlock();
    act(false, false, fin);
    return;
  }
  if (!read_.has_open()) {
    refuse(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "the first message of a stream must be an Open"), "");
    return;
  }
  // The token (and protocol major) before the stream's session, buffers or items exist.
  if (std::string why = open_precheck(read_.open(), host_.settings().token); !why.empty()) {
    if (host_.first_from(peer_, StreamHost::PeerLog::kToken)) {
      stoker::log::warn("worker: refused a stream from {}: {} (logged once per peer; counted in refused)", peer_, why);
    }
    refuse(grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, why), why);
    return;
  }
  host_.counters().sessions++;
  session_.emplace(host_.settings());
  v1::OpenReply reply = session_->open(read_.open());
  if (!reply.accepted()) {
    stoker::log::warn("worker: refused a stream from {}: {}", peer_, reply.error());
    const std::string why = reply.error();
    refuse(grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, why), why);
    return;
  }
  const std::size_t sample = session_->pipeline().sample_bytes();
  buffer_bytes_ = std::max<std::size_t>(kStreamBufferBytes, 2 * std::max(1u, host_.settings().threads) * sample);
  // Enough to cover a store's round trip (~10-50 ms) at a decode rate of ~1 ms a sample per
  // thread, and no more than a node's ItemBatch: a few MB of encoded bytes at most.
  fetch_ahead_ = std::min<std::size_t>(kMaxBatch, 8 + 4 * std::max(1u, host_.settings().threads));
  // A plaintext node asks for its results on a connection of their own (results_channel.hpp).
  if (ResultsListener* results = host_.results_listener();
      results != nullptr && read_.open().results_nonce().size() == kNonceBytes) {
    results_nonce_ = read_.open().results_nonce();
    results->offer(results_nonce_, weak_from_this());
    reply.set_results_port(static_cast<std::uint32_t>(results->port()));
  }
  opened_ = true;  // before the first item can be read: the decode threads see it through mu_
  host_.counters().streams++;
  stoker::log::info("worker: stream from {} for job {}", peer_, session_->job());
  {
    base::MutexLock lock(mu_);
    writing_ = true;  // the OpenReply; results wait behind it
    write_started_ = std::chrono::steady_clock::now();
  }
  *write_.mutable_open() = std::move(reply);
  StartWrite(&write_);
  StartRead(&read_);  // reading_ is still true: no Finish can come between
}

void WorkerStream::refuse(grpc::Status status, const std::string& reply_error) {
  host_.counters().refused++;
  {
    base::MutexLock lock(mu_);
    reading_ = false;
    broken_ = true;
    finished_ = true;  // reading_ was true until now, so nothing else has finished the stream
    end_ = status;
  }
  if (reply_error.empty()) {
    Finish(std::move(status));
    return;
  }
  write_.Clear();
  v1::OpenReply* r = write_.mutable_open();
  r->set_protocol_major(kWorkerMajor);
  r->set_protocol_minor(kWorkerMinor);
  r->set_error(reply_error);
  StartWriteAndFinish(&write_, grpc::WriteOptions(), std::move(status));
}

// ---- items in -------------------------------------------------------------------------------

void WorkerStream::OnReadDone(bool ok) {
  if (!opened_) {
    open_read_done(ok);
    return;
  }
  if (!ok) {  // the node half-closed (what was asked is still made and written) or is gone
    base::MutexLock lock(mu_);
    reading_ = false;
    // The stream's reads have ended, so have the results connection's: its reader returns.
    if (results_fd_ >= 0) ::shutdown(results_fd_, SHUT_RD);
    const bool fin = want_finish_locked();
    lock.unlock();
    act(false, false, fin);
    return;
  }
  if (std::string bad = queue_items(read_); !bad.empty()) {
    base::MutexLock lock(mu_);
    reading_ = false;
    end_for_locked(bad);
    const bool fin = want_finish_locked();
    lock.unlock();
    act(false, false, fin);
    return;
  }
  StartRead(&read_);  // reading_ stays true
}

std::string WorkerStream::queue_items(v1::Request& req) {
  std::string bad;
  const bool one = req.has_item();
  const std::size_t n = one ? 1 : static_cast<std::size_t>(req.items().items_size());
  if (!one && !req.has_items()) {
    bad = "only items may follow a stream's Open";
  } else if (n > kMaxBatch) {
    bad = "an ItemBatch of " + std::to_string(n) + " items (at most " + std::to_string(kMaxBatch) + ")";
  }
  const auto now = std::chrono::steady_clock::now();
  base::MutexLock lock(mu_);
  if (bad.empty() && todo_.size() + making_ + outbox_.size() + in_write_ + n > kMaxInFlight) {
    bad = "more than " + std::to_string(kMaxInFlight) + " items in flight on one stream";
  }
  if (!bad.empty() || broken_) return bad;  // a broken stream drops what it is sent
  if (one) {
    todo_.push_back(Taken{std::move(*req.mutable_item()), now, {}, false});
  } else {
    for (v1::Item& item : *req.mutable_items()->mutable_items())
      todo_.push_back(Taken{std::move(item), now, {}, false});
  }
  fetch_ahead_locked();
  const bool queue = want_queue_locked();
  lock.unlock();
  act(false, queue, false);
  return {};
}

void WorkerStream::end_for_locked(const std::string& bad) {
  end_ = grpc::Status(bad.find("in flight") != std::string::npos ? grpc::StatusCode::RESOURCE_EXHAUSTED
                                                                 : grpc::StatusCode::INVALID_ARGUMENT,
                      bad);
  break_locked();
  host_.counters().errors++;
  stoker::log::warn("worker: ended the stream from {}: {}", peer_, bad);
}

// ---- the decode threads ---------------------------------------------------------------------

std::optional<WorkerStream::Taken> WorkerStream::take() {
  base::MutexLock lock(mu_);
  queued_ = false;
  if (broken_ || todo_.empty()) return std::nullopt;
  if (!has_room_locked()) return std::nullopt;  // parked (want_queue_locked counted it)
  Taken t = std::move(todo_.front());
  todo_.pop_front();
  ++making_;
  fetch_ahead_locked();
  const bool queue = want_queue_locked();
  lock.unlock();
  act(false, queue, false);
  return t;
}

void WorkerStream::deliver(v1::Result&& result) {
  base::MutexLock lock(mu_);
  --making_;
  if (!broken_) {
    if (outbox_.empty()) oldest_ = std::chrono::steady_clock::now();
    outbox_bytes_ += result.pixels().size();
    outbox_.push_back(std::move(result));
  }
  const bool write = next_write_locked();
  const bool queue = want_queue_locked();
  const bool fin = want_finish_locked();
  lock.unlock();
  act(write, queue, fin);
}

bool WorkerStream::results_wait_on_link() {
  base::MutexLock lock(mu_);
  if (!writing_ || (write_busy_share_ < kLinkBusyToCompress &&
                    std::chrono::steady_clock::now() - write_started_ < kLinkWaitToCompress)) {
    return false;
  }
  return !write_via_results_ || results_fd_ < 0 || !peer_window_closed(results_fd_);
}

// ---- results out ----------------------------------------------------------------------------

void WorkerStream::OnWriteDone(bool ok) {
  base::MutexLock lock(mu_);
  const auto now = std::chrono::steady_clock::now();
  if (last_write_done_ != std::chrono::steady_clock::time_point{} && now > last_write_done_) {
    const double busy = std::chrono::duration<double>(now - write_started_).count();
    const double span = std::chrono::duration<double>(now - last_write_done_).count();
    write_busy_share_ = 0.5 * write_busy_share_ + 0.5 * std::min(1.0, busy / span);
  }
  last_write_done_ = now;
  writing_ = false;
  in_write_ = 0;
  if (!ok) break_locked();  // the node is gone
  const bool write = next_write_locked();
  const bool queue = want_queue_locked();  // a parked stream resumes as its results leave
  const bool fin = want_finish_locked();
  lock.unlock();
  act(write, queue, fin);
}

void WorkerStream::linger_due() {
  base::MutexLock lock(mu_);
  timer_set_ = false;
  const bool write = next_write_locked();  // or a later linger asks for the timer again
  const bool fin = want_finish_locked();
  lock.unlock();
  act(write, false, fin);
}

void WorkerStream::OnCancel() {
  base::MutexLock lock(mu_);
  break_locked();
  const bool fin = want_finish_locked();
  lock.unlock();
  act(false, false, fin);
}

void WorkerStream::OnDone() {
  StreamHost::Counters& c = host_.counters();
  if (!results_nonce_.empty()) {
    if (ResultsListener* results = host_.results_listener()) results->withdraw(results_nonce_);
  }
  if (opened_) {
    c.streams--;
    stoker::log::info("worker: stream from {} for job {} ended", peer_, session_->job());
  }
  c.active--;
  self_.reset();  // last: `this` may be freed here (or when a decode thread lets go of it)
}

// ---- decisions under mu_ --------------------------------------------------------------------

void WorkerStream::break_locked() {
  broken_ = true;
  if (results_fd_ >= 0) ::shutdown(results_fd_, SHUT_RDWR);  // a write blocked on the node returns
  todo_.clear();
  outbox_.clear();
  outbox_bytes_ = 0;
}

bool WorkerStream::has_room_locked() const {
  const std::size_t sample = opened_ ? session_->pipeline().sample_bytes() : 0;
  return outbox_bytes_ + making_ * sample < buffer_bytes_;
}

bool WorkerStream::want_queue_locked() {
  if (queued_ || broken_ || todo_.empty()) return false;
  if (!has_room_locked()) {
    // Parked until a write completes (OnWriteDone asks again); counted once per parking.
    if (!parked_) host_.counters().stalls++;
    parked_ = true;
    return false;
  }
  parked_ = false;
  queued_ = true;
  return true;
}

bool WorkerStream::lingering_locked(std::chrono::steady_clock::time_point now) const {
  const auto linger = host_.settings().result_linger;
  if (linger.count() <= 0) return false;
  const bool more_coming = making_ > 0 || (!todo_.empty() && has_room_locked());
  return more_coming && outbox_.size() < kMaxBatch && outbox_bytes_ < kBatchBytes && now < oldest_ + linger;
}

bool WorkerStream::next_write_locked() {
  if (writing_ || finished_ || broken_ || outbox_.empty()) return false;
  if (lingering_locked(std::chrono::steady_clock::now())) {
    if (!timer_set_) timer_set_ = timer_wanted_ = true;
    return false;
  }
  // Results that finished while the previous reply was written leave together, as one
  // ResultBatch (one message and one wake-up on the GPU node for many samples).
  write_.Clear();
  std::size_t n = 0, bytes = 0;
  while (!outbox_.empty() && n < kMaxBatch && bytes < kBatchBytes) {
    bytes += outbox_.front().pixels().size();
    if (outbox_.size() == 1 && n == 0) {
      *write_.mutable_result() = std::move(outbox_.front());
    } else {
      *write_.mutable_results()->add_results() = std::move(outbox_.front());
    }
    outbox_.pop_front();
    ++n;
  }
  outbox_bytes_ -= bytes;
  in_write_ = n;
  writing_ = true;
  write_started_ = std::chrono::steady_clock::now();
  write_via_results_ = results_fd_ >= 0;
  if (write_via_results_) results_posted_ = true;
  return true;
}

void WorkerStream::fetch_ahead_locked() {
  if (!opened_ || broken_) return;
  const std::size_t n = std::min(fetch_ahead_, todo_.size());
  for (std::size_t i = 0; i < n; ++i) {
    Taken& t = todo_[i];
    if (t.fetch_tried) continue;
    t.fetch_tried = true;
    t.fetched = session_->prefetch(t.item);  // queued on the fetch threads; takes no lock of ours
  }
}

bool WorkerStream::want_finish_locked() {
  if (finished_ || (reading_ && !read_abandoned_) || items_reading_ || writing_ || making_ > 0) return false;
  if (!broken_ && (!todo_.empty() || !outbox_.empty())) return false;
  finished_ = true;  // the results writer, if any, ends (act() wakes it)
  return true;
}

void WorkerStream::act(bool write, bool queue, bool finish) {
  std::optional<std::chrono::steady_clock::time_point> timer;
  bool via_results = false;
  {
    base::MutexLock lock(mu_);
    if (timer_wanted_) timer = oldest_ + host_.settings().result_linger;
    timer_wanted_ = false;
    via_results = write_via_results_;
  }
  if (timer) host_.wake_at(shared_from_this(), *timer);
  if (write && via_results) results_cv_.notify_all();
  if (write && !via_results) StartWrite(&write_);
  if (finish) results_cv_.notify_all();  // a results writer ends
  if (queue) host_.schedule(shared_from_this());
  if (finish) {
    grpc::Status end;
    {
      base::MutexLock lock(mu_);
      end = end_;  // not written once finished_ is set
    }
    Finish(std::move(end));
  }
}

// ---- the results connection (protocol 1.3) ---------------------------------------------------

bool WorkerStream::bind_results(int fd) {
  base::MutexLock lock(mu_);
  // Not once the stream's reads have ended (the items reader would then wait for nothing).
  if (finished_ || broken_ || !reading_ || results_fd_ >= 0 || results_writer_gone_ || host_.refuse_results_binding()) {
    return false;
  }
  // Both threads first (each waits for mu_, and touches fd only once results_fd_ names it): out
  // of threads, the node reads its results from the stream and sends its items there.
  try {
    std::thread(&WorkerStream::results_writer, this, shared_from_this()).detach();
  } catch (const std::system_error&) {
    return false;
  }
  try {
    std::thread(&WorkerStream::items_reader, this, shared_from_this(), fd).detach();
  } catch (const std::system_error&) {
    results_writer_gone_ = true;  // the writer returns at once
    results_cv_.notify_all();
    return false;
  }
  // The acknowledgement goes first, before any frame: one byte on a fresh connection (its send
  // buffer is empty, so this never blocks under mu_).
  const char ack = kResultsBound;
  if (::send(fd, &ack, 1, MSG_NOSIGNAL | MSG_DONTWAIT) != 1) {
    results_writer_gone_ = true;  // both threads return without touching fd
    results_cv_.notify_all();
    return false;
  }
  results_fd_ = fd;  // writes decided from now on go to the writer
  items_reading_ = true;
  return true;
}

void WorkerStream::items_reader(std::shared_ptr<WorkerStream> self, int fd) {
  {
    base::MutexLock lock(mu_);  // bind_results decides under it whether fd is ours
    if (results_fd_ != fd || !items_reading_) return;
  }
  std::vector<std::uint8_t> frame;  // reused: its pages stay mapped
  v1::Request req;
  std::string bad;
  for (;;) {
    std::string why;
    const FrameRead got = read_results_frame(fd, frame, kMaxRequestBytes, why, "an items");
    // Closed or cut: the node ended the connection, or the stream's end shut it (the stream's
    // own end says why); a frame past the bound is garbage.
    if (got == FrameRead::kTooLong) bad = why;
    if (got != FrameRead::kFrame) break;
    if (!req.ParseFromArray(frame.data(), static_cast<int>(frame.size()))) {
      bad = "an items frame that is not a Request";
      break;
    }
    bad = queue_items(req);
    if (!bad.empty()) break;
  }
  base::MutexLock lock(mu_);
  if (!bad.empty() && !finished_) {
    // The stream's own read is still outstanding: it need not end first (gRPC completes it with
    // ok=false once the stream is finished), so the node is told why, as for a bad Request.
    read_abandoned_ = true;
    end_for_locked(bad);
  }
  items_reading_ = false;
  const bool fin = want_finish_locked();
  lock.unlock();
  act(false, false, fin);
  self.reset();  // may free the stream (its last reference after OnDone)
}

void WorkerStream::results_writer(std::shared_ptr<WorkerStream> self) {
  std::string frame;  // reused: its pages stay mapped
  std::vector<std::string> pixels;  // a split frame's, moved out of write_'s results
  for (;;) {
    int fd = -1;
    {
      base::MutexLock lock(mu_);
      while (!results_posted_ && !finished_ && !results_writer_gone_) results_cv_.wait(lock);
      if (results_writer_gone_) break;  // the bind failed: fd was never this stream's
      if (!results_posted_) {
        // Finished: nothing is being written (Finish waits for writes). The descriptor's close
        // is under mu_, as every shutdown() of it is.
        ::close(results_fd_);
        results_fd_ = -1;
        break;
      }
      results_posted_ = false;
      fd = results_fd_;
      // The write starts now, not when it was posted: this thread's own wake-up (long on a
      // loaded machine) is not the link's time (results_wait_on_link).
      write_started_ = std::chrono::steady_clock::now();
    }
    bool ok = false;
    if (session_->split_results()) {
      // Protocol 1.5: the pixels leave from the results' own strings, after the message.
      pixels.clear();
      const auto split = [&](v1::Result& r) {
        r.set_pixel_bytes(static_cast<std::uint32_t>(r.pixels().size()));
        pixels.push_back(std::move(*r.mutable_pixels()));
        r.clear_pixels();
      };
      if (write_.has_result()) {
        split(*write_.mutable_result());
      } else {  // (mutable_results() would clear a oneof's result)
        for (v1::Result& r : *write_.mutable_results()->mutable_results()) split(r);
      }
      frame.assign(kSplitPrefixBytes, '\0');
      write_.AppendToString(&frame);  // write_ is this writer's until the write completes
      ok = write_split_frame(fd, frame, pixels, host_.spoil_results_frame(), host_.stall_results_frame());
    } else {
      frame.assign(4, '\0');
      write_.AppendToString(&frame);
      ok = write_results_frame(fd, frame, host_.spoil_results_frame() == FrameLie::kLength);
    }
    std::size_t sent = frame.size();
    for (const std::string& p : pixels) sent += p.size();
    if (const auto pace = host_.pace_results_frame(sent); ok && pace.count() > 0) std::this_thread::sleep_for(pace);
    OnWriteDone(ok);
  }
  self.reset();  // may free the stream (its last reference after OnDone)
}

}  // namespace stoker::remote
