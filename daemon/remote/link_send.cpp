// A link's sending side (dispatcher_link.hpp): items taken from the work queue and sent a
// window at a time, the window adapted to the worker's rate, hedging (items late past the
// hedge time made here), the deadline, and remote.verify's choice of which answers are made
// again here.

#include <algorithm>
#include <chrono>
#include <optional>
#include <utility>

#include "log/log.hpp"
#include "remote/dispatcher_link.hpp"
#include "remote/protocol.hpp"

namespace stoker::remote {

namespace {

// The window also holds this many seconds of the worker's own output, so that the sender, which
// refills at half the window, sends an ItemBatch at most every ~30 ms of it rather than every 8
// items: each send costs this node a syscall and (on loopback) the worker's receive and wake-up
// (issue #36: 11% of the node's CPU per remote sample at 8 items a message; 30 ms -> 60 ms took
// the sending thread from 4.3 to 3.2 us a sample, docs/PERFORMANCE.md). Scaled by the measured
// rate, so a slow worker holds no more than 60 ms of its own output beyond the floor and the
// link; a worker lost re-issues that much.
constexpr double kRefillSpanS = 0.06;
// Hedging (issue #34, A7): an item outstanding longer than kHedgeFactor times the link's mean
// answer time (stats_.rtt_s, from answers that were used), and at least kHedgeFloor, is made
// here instead: an answer before that wins; after it, this node's make does and the worker's
// answer is discarded. A worker that is always late is therefore always hedged (its late
// answers never raise the mean it is measured by).
constexpr double kHedgeFactor = 4, kHedgeFloor = 0.5;

// A 64-bit mix (splitmix64's finaliser): the per-item draw of remote.verify.
std::uint64_t mix64(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

}  // namespace

void Dispatcher::Link::send_loop(grpc::ClientReaderWriter<v1::Request, ReplyView>& stream, grpc::ClientContext& ctx) {
  job::Job& job = d_.job_;
  const double deadline = d_.cfg_.deadline_s;
  for (;;) {
    bool stalled = false;
    std::size_t room = 0;
    std::vector<sched::WorkItem> hedge;
    {
      base::MutexLock lock(mu_);
      if (stop_ || broken_) return;
      const auto now = Clock::now();
      // Ids ascend in the order sent, so the first entry is the oldest (of each table).
      auto oldest = Clock::time_point::max();
      if (!outstanding_.empty()) oldest = outstanding_.begin()->second.sent;
      if (!hedged_.empty()) oldest = std::min(oldest, hedged_.begin()->second);
      if (oldest != Clock::time_point::max() && std::chrono::duration<double>(now - oldest).count() > deadline) {
        stalled = true;
        broken_ = true;
      } else {
        adapt_window(now);
        hedge = take_overdue(now);
        if (hedge.empty()) {
          // Refill only once half the window has come back: one message and one wake-up for
          // many items, rather than one per answer. A link with hedged items still due gets
          // none until they are answered (or its deadline passes): a slow worker holds at most
          // one window at a time.
          if (outstanding_.size() > window_ / 2 || !hedged_.empty()) {
            wait_until_due(lock, now, deadline);
            continue;
          }
          room = std::min<std::size_t>(window_ - outstanding_.size(), kMaxBatch);
        }
      }
    }
    if (!hedge.empty()) {
      // Made here, as a local worker makes an item (the job's own read rules and on_error):
      // each left the link's table under its mutex, so the worker's answer, if it comes, is
      // discarded (the item ends once).
      if (!hedge_processor_) hedge_processor_ = std::make_unique<image::SampleProcessor>(job.pipeline());
      for (const sched::WorkItem& it : hedge) job.run(it, *hedge_processor_, hedge_buffer_);
      continue;
    }
    if (stalled) {
      fail("an item unanswered for " + std::to_string(static_cast<int>(deadline)) +
           " s (stalled or unreachable): its items are re-issued");
      ctx.TryCancel();
      return;
    }
    v1::Request req;
    std::vector<std::pair<std::uint64_t, Outstanding>> sent;
    sched::WorkItem item{};
    const auto asked = Clock::now();
    // The first item may be waited for; the rest only taken if queued now.
    while (sent.size() < room &&
           d_.queue_.pop_remote(job.index(), item, std::chrono::milliseconds(sent.empty() ? 50 : 0))) {
      std::optional<job::Job::RemoteSample> sample = job.begin_remote(item);
      if (!sample) continue;  // quarantined, cached or job stopped: ended by the job
      const std::uint64_t id = next_id_++;
      v1::Item* it = req.mutable_items()->add_items();
      it->set_id(id);
      it->set_path(sample->path);
      it->set_offset(sample->offset);
      it->set_size(sample->size);
      it->set_member(sample->member);
      it->set_epoch(sample->epoch);
      it->set_draw(sample->draw);
      sent.emplace_back(id, Outstanding{item, std::move(*sample), Clock::now()});
    }
    if (sent.empty()) {
      // pop_remote answers at once when the queue stopped or the lane closed (the daemon or
      // the job is ending): wait here instead of spinning until this link is stopped.
      if (Clock::now() - asked < std::chrono::milliseconds(10)) {
        base::MutexLock lock(mu_);
        if (!stop_) cv_.wait_for(lock, std::chrono::milliseconds(50));
      }
      continue;
    }
    {
      base::MutexLock lock(mu_);
      for (auto& [id, o] : sent) outstanding_.emplace(id, std::move(o));
    }
    if (!(items_tcp_ ? send_items(req) : stream.Write(req))) {
      bool first = false;
      {
        base::MutexLock lock(mu_);
        first = !broken_ && !stop_;
        broken_ = true;
      }
      if (first) fail("the stream broke (worker gone?): its items are re-issued");
      return;
    }
  }
}

double Dispatcher::Link::hedge_after() const { return std::max(kHedgeFloor, kHedgeFactor * stats_.rtt_s); }

void Dispatcher::Link::wait_until_due(base::MutexLock& lock, Clock::time_point now, double deadline) {
  constexpr Clock::duration kMinWait = std::chrono::milliseconds(20), kMaxWait = std::chrono::milliseconds(250);
  const double after = std::min(deadline, hedge_after());
  const auto plus = [](Clock::time_point t, double s) {
    return t + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
  };
  Clock::time_point due = now + kMaxWait;
  if (!outstanding_.empty()) due = std::min(due, plus(outstanding_.begin()->second.sent, after));
  if (!hedged_.empty()) due = std::min(due, plus(hedged_.begin()->second, deadline));
  cv_.wait_for(lock, std::clamp(due - now, kMinWait, kMaxWait));
}

bool Dispatcher::Link::send_items(const v1::Request& req) {
  items_frame_.assign(4, '\0');
  req.AppendToString(&items_frame_);
  const auto since = Clock::now();
  const double deadline = d_.cfg_.deadline_s;
  return write_items_frame(results_fd_, items_frame_, [&] {
    base::MutexLock lock(mu_);
    return !stop_ && !broken_ && std::chrono::duration<double>(Clock::now() - since).count() < deadline;
  });
}

std::vector<sched::WorkItem> Dispatcher::Link::take_overdue(Clock::time_point now) {
  std::vector<sched::WorkItem> out;
  const double after = hedge_after();
  if (after >= d_.cfg_.deadline_s) return out;  // the deadline comes first: the stream is dropped
  for (auto at = outstanding_.begin();
       at != outstanding_.end() && std::chrono::duration<double>(now - at->second.sent).count() > after;) {
    if (at->second.receiving) {
      ++at;
      continue;
    }
    out.push_back(at->second.item);
    hedged_.emplace(at->first, at->second.sent);
    at = outstanding_.erase(at);
  }
  if (!out.empty()) {
    stats_.hedged += out.size();
    if (stats_.hedged == out.size()) {
      stoker::log::warn("job {}: remote worker {}: items unanswered after {:.2f} s are made here (hedged)",
                        d_.job_.name(), endpoint_, after);
    }
  }
  return out;
}

bool Dispatcher::Link::chosen_for_verify(const job::Job::RemoteSample& s) const {
  const double f = d_.cfg_.verify;
  if (f <= 0) return false;
  if (f >= 1) return true;
  const std::uint64_t h = mix64(d_.verify_key_ ^ mix64(s.epoch * 0x100000001b3ULL + s.id));
  return static_cast<double>(h >> 11) * 0x1.0p-53 < f;
}

std::uint32_t Dispatcher::Link::floor_window() const { return std::max<std::uint32_t>(16, 2 * stats_.threads + 2); }

void Dispatcher::Link::adapt_window(Clock::time_point now) {
  const double dt = std::chrono::duration<double>(now - rate_mark_).count();
  if (dt < 1.0) return;
  stats_.samples_per_s = static_cast<double>(stats_.samples - rate_samples_) / dt;
  rate_mark_ = now;
  rate_samples_ = stats_.samples;
  const double link_s = link_rtt_min_ < 1e9 ? link_rtt_min_ : 0;
  link_rtt_min_ = 1e18;
  const double want = floor_window() + stats_.samples_per_s * (link_s * 2 + kRefillSpanS);
  window_ = static_cast<std::uint32_t>(std::clamp<double>(want, floor_window(), kWindowMax));
}

void Dispatcher::Link::reissue_all() {
  std::vector<sched::WorkItem> back;
  {
    base::MutexLock lock(mu_);
    for (auto& [id, o] : outstanding_) back.push_back(o.item);  // ids ascend: planned order
    stats_.reissued += back.size();
    outstanding_.clear();
    hedged_.clear();  // ended here already; the stream that owed their answers is gone
  }
  if (!back.empty()) {
    stoker::log::info("job {}: {} item(s) of remote worker {} re-issued", d_.job_.name(), back.size(), endpoint_);
    d_.queue_.push_front(d_.job_.index(), std::move(back));
  }
}

}  // namespace stoker::remote
