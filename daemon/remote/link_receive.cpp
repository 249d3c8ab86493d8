// A link's receiving side (dispatcher_link.hpp): the stream's and the results connection's
// readers, the slots claimed for pixels received in place (SlotClaims), and take(), where each
// answer is matched with the item it names, checked, made again here when it is a "bad file"
// verdict or a remote.verify pick, and settled.

#include <chrono>
#include <cstring>
#include <string>

#include "log/log.hpp"
#include "remote/dispatcher_link.hpp"
#include "remote/protocol.hpp"

namespace stoker::remote {

std::string Dispatcher::Link::handle_reply(const ReplyView& reply, std::vector<char>* placed) {
  std::string why;
  const ReplyView::Kind kind = reply.kind();
  if (kind == ReplyView::Kind::kResult || kind == ReplyView::Kind::kResults) {
    {
      base::MutexLock take_lock(take_mu_);
      const std::vector<ResultView>& results = reply.results();  // at most kMaxBatch (the parser's bound)
      for (std::size_t i = 0; i < results.size(); ++i) {
        if (base::Status s = take(results[i], reply, placed != nullptr && (*placed)[i] != 0); !s) {
          why = s.message();
          // Results after it that were received into their slots are still owed: re-issued.
          if (placed != nullptr) release(results, *placed, i + 1);
          break;
        }
      }
    }
    // The sender refills at half the window: woken once for the whole message (a wake-up
    // per result, once below half, cost the node a context switch for each).
    bool refill = false;
    {
      base::MutexLock lock(mu_);
      refill = outstanding_.size() <= window_ / 2;
    }
    if (refill) cv_.notify_all();
  } else if (kind == ReplyView::Kind::kMalformed) {
    why = "sent " + reply.why();
    base::MutexLock lock(mu_);
    misbehaved_ = true;
  } else {
    why = "answered something other than results";
  }
  return why;
}

void Dispatcher::Link::reader_ended(const std::string& why, const char* ended) {
  bool first = false;
  {
    base::MutexLock lock(mu_);
    first = !broken_ && !stop_;
    broken_ = true;
  }
  cv_.notify_all();
  if (first || !why.empty()) fail(why.empty() ? std::string(ended) : why);
}

void Dispatcher::Link::read_loop(grpc::ClientReaderWriter<v1::Request, ReplyView>& stream) {
  // One ReplyView for the stream's life: its vectors keep their capacity between messages.
  ReplyView reply;
  std::string why;
  while (why.empty() && stream.Read(&reply)) why = handle_reply(reply);
  reader_ended(why, "the stream ended (worker gone?): its items are re-issued");
}

void Dispatcher::Link::results_loop(grpc::ClientContext& ctx) {
  const std::size_t max = max_reply_bytes(d_.job_.pipeline().sample_bytes());
  bool split = false;
  {
    base::MutexLock lock(mu_);
    split = worker_minor_ >= 5;
  }
  std::string why = split ? read_split_frames(max) : read_whole_frames(max);
  {
    base::MutexLock lock(mu_);
    if (stop_ || broken_) why.clear();  // shut down by this node, after the link ended otherwise
  }
  reader_ended(why, "the results connection ended (worker gone?): its items are re-issued");
  ctx.TryCancel();  // the stream ends with it
}

std::string Dispatcher::Link::unread_frame(FrameRead got, const std::string& read_why) {
  if (got == FrameRead::kTooLong) {
    base::MutexLock lock(mu_);
    misbehaved_ = true;
  }
  return got == FrameRead::kClosed ? std::string() : "results connection: " + read_why;
}

std::string Dispatcher::Link::read_whole_frames(std::size_t max) {
  std::vector<std::uint8_t> frame;  // reused: its pages stay mapped
  ReplyView reply;
  std::string why;
  while (why.empty()) {
    std::string read_why;
    if (const FrameRead got = read_results_frame(results_fd_, frame, max, read_why); got != FrameRead::kFrame) {
      return unread_frame(got, read_why);
    }
    grpc::Slice slice(frame.data(), frame.size(), grpc::Slice::STATIC_SLICE);  // no copy
    grpc::ByteBuffer bytes(&slice, 1);
    reply.parse(bytes);
    why = handle_reply(reply);
  }
  return why;
}

std::string Dispatcher::Link::read_split_frames(std::size_t max) {
  SplitReceiver frames(results_fd_, d_.job_.pipeline().sample_bytes(), max);
  std::string why;
  while (why.empty()) {
    std::string read_why;
    if (const FrameRead got = frames.next(*this, read_why); got != FrameRead::kFrame) {
      return unread_frame(got, read_why);
    }
    why = handle_reply(frames.reply(), &frames.claimed());
  }
  return why;
}

void Dispatcher::Link::claim(std::span<const ResultView> results, std::span<char> claimed,
                             std::span<std::uint8_t*> slots) {
  base::MutexLock lock(mu_);
  for (std::size_t i = 0; i < results.size(); ++i) {
    if (claimed[i] == 0) continue;
    const ResultView& r = results[i];
    const auto at = outstanding_.find(r.id);
    claimed[i] = at != outstanding_.end() && !at->second.receiving && r.epoch == at->second.sample.epoch &&
                 r.draw == at->second.sample.draw && !chosen_for_verify(at->second.sample);
    if (claimed[i] == 0) continue;
    at->second.receiving = true;
    slots[i] = d_.job_.sample_out(at->second.item);
  }
}

bool Dispatcher::Link::stalled_too_long(std::span<const ResultView> results, std::span<const char> claimed,
                                        std::size_t from) {
  const auto now = Clock::now();
  bool overdue = false;
  std::size_t held = 0;
  {
    base::MutexLock lock(mu_);
    const double after = hedge_after();
    for (std::size_t i = from; i < results.size(); ++i) {
      if (claimed[i] == 0) continue;
      ++held;
      const auto at = outstanding_.find(results[i].id);
      overdue =
          overdue || (at != outstanding_.end() && std::chrono::duration<double>(now - at->second.sent).count() > after);
    }
  }
  if (!overdue) return false;
  const std::uint64_t k = ++stalled_frames_;
  if ((k & (k - 1)) == 0) {
    stoker::log::info(
        "job {}: remote worker {}: stalled inside a results frame: its {} item(s) there go back to hedging ({} such "
        "frame(s) so far)",
        d_.job_.name(), endpoint_, held, k);
  }
  return true;
}

void Dispatcher::Link::release(std::span<const ResultView> results, std::span<const char> claimed, std::size_t from) {
  {
    base::MutexLock lock(mu_);
    for (std::size_t i = from; i < results.size(); ++i) {
      if (claimed[i] == 0) continue;
      if (const auto at = outstanding_.find(results[i].id); at != outstanding_.end()) at->second.receiving = false;
    }
  }
  cv_.notify_all();  // the sender hedges what is due
}

std::string Dispatcher::Link::settle(const Outstanding& o, const ResultView& r, const ReplyView& msg,
                                     const image::SampleResult& result, bool pick, bool in_slot, std::uint8_t* out) {
  job::Job& job = d_.job_;
  const std::uint64_t n = job.pipeline().sample_bytes();
  if (!local_) local_ = std::make_unique<image::SampleProcessor>(job.pipeline());
  std::string why;  // set when this node's pixels differ from the worker's word
  if (result.error == image::SampleErrorKind::kIo) {
    // The worker could not read it (its storage, its --allow-root, or its object storage
    // credentials: issue #35): made here instead, where the job's own read rules (retries,
    // missing files) apply; never a verdict on the file. Its reason (the URL and where the
    // worker's credentials came from, never a value) is the link's last_error, logged at
    // the 1st, 2nd, 4th, 8th... failure (a worker denied a whole bucket fails every item).
    job.run(o.item, *local_, buffer_);
    base::MutexLock lock(mu_);
    const std::uint64_t failures = ++stats_.read_failures;
    stats_.last_error = "could not read: " + result.reason.substr(0, 512) + "; made here";
    if ((failures & (failures - 1)) == 0) {
      stoker::log::warn("job {}: remote worker {}: {} ({} read failure(s) so far)", job.name(), endpoint_,
                        stats_.last_error, failures);
    }
  } else if (!result.ok()) {
    // A worker's "bad file" verdict never quarantines (A5): the sample is made here. Made
    // fine, the worker lied; failing here too, run() makes it once more as a local worker
    // would and the job's own policy (on_error, quarantine) applies to this node's verdict.
    check_.resize(n);
    const image::SampleResult here = job.make_remote_here(o.sample, *local_, buffer_, check_.data());
    if (here.ok()) {
      std::memcpy(out, check_.data(), n);
      job.finish_remote(o.item, o.sample, here);
      why = "called sample " + std::to_string(o.sample.id) + " bad (" + result.reason.substr(0, 200) +
            "), which is made fine here";
    } else {
      job.run(o.item, *local_, buffer_);
    }
  } else if (pick) {
    // remote.verify (A6): made again here and compared byte for byte where the worker's
    // pixels lie: in the slot when decompressed there, else still in msg (a pick is never
    // claimed a slot: claim()). Reading or writing the slot through this process's mapping
    // is what a pick cost most here, besides its re-make (ShmSegment::write).
    check_.resize(n);
    const image::SampleResult here = job.make_remote_here(o.sample, *local_, buffer_, check_.data());
    const std::uint8_t* theirs =
        in_slot ? out : reinterpret_cast<const std::uint8_t*>(msg.contiguous(r.pixels, zstd_scratch_).data());
    if (here.ok() && std::memcmp(theirs, check_.data(), n) != 0) {
      job.put_sample(o.item, check_.data());  // this node's pixels serve
      job.finish_remote(o.item, o.sample, here);
      why = "sent pixels for sample " + std::to_string(o.sample.id) + " (epoch " + std::to_string(o.sample.epoch) +
            ") that differ from this node's";
    } else if (here.ok() || here.error == image::SampleErrorKind::kIo) {
      // Equal (this node's copy, just made, is the one in cache), or cannot be checked now
      // (unread here: the worker's pixels serve).
      if (!in_slot) job.put_sample(o.item, here.ok() ? check_.data() : theirs);
      job.finish_remote(o.item, o.sample, result);
    } else {
      why = "sent pixels for sample " + std::to_string(o.sample.id) + ", which does not decode here";
      job.run(o.item, *local_, buffer_);
    }
  } else {
    job.finish_remote(o.item, o.sample, result);
  }
  return why;
}

base::Status Dispatcher::Link::take(const ResultView& r, const ReplyView& msg, bool placed) {
  std::string why;
  job::Job& job = d_.job_;
  const std::uint64_t n = job.pipeline().sample_bytes();
  Outstanding o;
  bool echo_ok = true;
  {
    base::MutexLock lock(mu_);
    auto at = outstanding_.find(r.id);
    if (at == outstanding_.end()) {
      if (hedged_.erase(r.id) != 0) {
        // The late answer of an item made here meanwhile (hedged): discarded, the item ended.
        cv_.notify_all();  // the sender may take items again once none is due
        return {};
      }
      misbehaved_ = true;
      return base::Status::error("answered item " + std::to_string(r.id) + ", which it does not hold");
    }
    o = std::move(at->second);
    outstanding_.erase(at);
    // A 1.1 worker echoes the item's epoch and draw: an answer must name exactly the item
    // sent under its id (a worker that swaps ids is refused here; one that swaps pixels is
    // found by remote.verify).
    echo_ok = worker_minor_ < 1 || (r.epoch == o.sample.epoch && r.draw == o.sample.draw);
  }
  image::SampleResult result;
  result.error = static_cast<image::SampleErrorKind>(r.error);
  result.reason = r.reason;  // at most ReplyView::kMaxReasonBytes
  result.warnings = r.warnings;
  result.format = r.format < static_cast<std::uint32_t>(image::kImageFormats)
                      ? static_cast<image::ImageFormat>(r.format)
                      : image::ImageFormat::kUnknown;
  bool good = r.error <= static_cast<std::uint32_t>(image::SampleErrorKind::kTooLarge);
  std::uint8_t* out = job.sample_out(o.item);
  // remote.verify (A6): this answer is made again here and compared byte for byte.
  const bool pick = echo_ok && good && result.ok() && chosen_for_verify(o.sample);
  bool in_slot = placed;  // whether out holds the worker's pixels (else, a pick's, msg does)
  if (!echo_ok) {
    good = false;
    why = "answered item " + std::to_string(r.id) + " as epoch " + std::to_string(r.epoch) + " draw " +
          std::to_string(r.draw) + ", sent as epoch " + std::to_string(o.sample.epoch) + " draw " +
          std::to_string(o.sample.draw);
  } else if (good && result.ok()) {
    if (placed) {
      // Received into the slot already.
    } else if (r.compressed) {
      const base::Status s = decompress(msg.contiguous(r.pixels, zstd_scratch_), std::span<std::uint8_t>(out, n));
      good = s.ok();
      in_slot = good;
      if (!good) why = "sent a bad compressed sample: " + s.message();
    } else if (r.pixels.size == n) {
      if (!pick) msg.copy(r.pixels, out);
      in_slot = !pick;
    } else {
      good = false;
      why = "sent " + std::to_string(r.pixels.size) + " bytes for a sample of " + std::to_string(n);
    }
  } else if (!good) {
    why = "sent an unknown error kind " + std::to_string(r.error);
  }
  if (!good) {
    d_.queue_.push_front(job.index(), {o.item});  // made again elsewhere
    base::MutexLock lock(mu_);
    stats_.reissued++;
    misbehaved_ = true;
    return base::Status::error(why.empty() ? std::string("sent a malformed result") : why);
  }
  const std::string refused = settle(o, r, msg, result, pick, in_slot, out);
  base::MutexLock lock(mu_);
  if (!refused.empty()) {
    // The worker is dropped (the caller ends the stream; what it holds is re-issued).
    stats_.mismatches++;
    misbehaved_ = true;
    return base::Status::error(refused + ": dropped, its items re-issued");
  }
  stats_.samples++;
  stats_.bytes_received += r.pixels.size;
  if (r.compressed) stats_.compressed++;
  const double rtt = std::chrono::duration<double>(Clock::now() - o.sent).count();
  stats_.rtt_s = stats_.rtt_s == 0 ? rtt : 0.9 * stats_.rtt_s + 0.1 * rtt;
  // The link's share: the round trip less the item's wait and work at the worker (both
  // reported by it, bounded by the round trip: a peer's figures are not trusted further).
  const double at_worker = (static_cast<double>(r.busy_ns) + static_cast<double>(r.queued_ns)) * 1e-9;
  link_rtt_min_ = std::min(link_rtt_min_, std::max(0.0, rtt - at_worker));
  return {};  // the sender is woken once per message (read_loop), not per result
}

}  // namespace stoker::remote
