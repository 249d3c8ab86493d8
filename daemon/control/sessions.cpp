// Sessions: the table of connections, reading from them, delivery of ready batches, and the
// housekeeping that evicts silent, stuck or overdue clients. The protocol itself is in
// session_messages.cpp, sending in session_send.cpp.
#include "control/sessions.hpp"

#include <cerrno>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "log/log.hpp"
#include "core/check.hpp"
#include "delivery/device_delivery.hpp"
#include "job/job.hpp"
#include "jobs/job_table.hpp"

namespace stoker::control {

using job::Job;
using jobs::JobTable;

std::string reader_suffix(const Job* job, std::uint32_t reader) {
  return job != nullptr && job->readers() > 1 ? " reader " + std::to_string(reader) : std::string();
}

Sessions::Sessions(int epoll_fd, JobTable& jobs, delivery::DeviceDelivery& delivery, std::uint64_t daemon_generation,
                   const Limits& limits)
    : epoll_fd_(epoll_fd), jobs_(jobs), delivery_(delivery), daemon_generation_(daemon_generation), limits_(limits) {}

Sessions::~Sessions() { close_all(); }

void Sessions::set_handlers(SessionHandlers handlers) {
  STOKER_CHECK(handlers.command && handlers.status && handlers.released, "a session handler is missing");
  handlers_ = std::move(handlers);
}

void Sessions::close_all() {
  for (auto& [fd, s] : sessions_) {
    if (s.job != nullptr) delivery_.retire(s.job->detach(s.rank, s.reader), s.peer);
    ::close(fd);
  }
  sessions_.clear();
  doomed_.clear();
}

void Sessions::add(int fd, const PeerCredentials& peer) {
  Session s;
  s.fd = fd;
  s.pid = static_cast<std::uint32_t>(peer.pid);
  s.peer_pid = peer.pid;
  s.peer_uid = peer.uid;
  s.peer_gid = peer.gid;
  s.peer_groups = peer.groups;
  s.token = next_token_++;
  s.connected_at = s.last_message = std::chrono::steady_clock::now();
  // The kernel hands out an fd only once it is closed, and evict() closes it only after erasing.
  STOKER_CHECK(sessions_.count(fd) == 0, "accepted fd {} is still a session's", fd);
  sessions_[fd] = s;
  epoll_event ev{};
  ev.events = EPOLLIN | EPOLLRDHUP;
  ev.data.u64 = static_cast<std::uint64_t>(fd);
  ::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev);
}

Session* Sessions::find(int fd, std::uint64_t token) {
  auto it = sessions_.find(fd);
  return it != sessions_.end() && it->second.token == token ? &it->second : nullptr;
}

bool Sessions::serves(const Job* job) const {
  for (const auto& [fd, s] : sessions_) {
    if (s.job == job) return true;
  }
  return false;
}

std::size_t Sessions::consumers_of(const Job* job) const {
  std::size_t n = 0;
  for (const auto& [fd, s] : sessions_) n += s.job == job ? 1 : 0;
  return n;
}

void Sessions::evict_doomed() {
  // A client that released its batches and closed while a batch was being announced to it
  // fails that send (EPIPE) with its last releases and credits still queued here. Unread, its
  // releases would go uncounted and the batches it took would be handed back as untaken
  // (served twice). So a session a send failed on is read first; one doomed for what it sent
  // is not read further. The bound keeps a live client that floods from holding the loop.
  constexpr std::size_t kDrainMessages = 4096;
  std::vector<int> doomed;
  doomed.swap(doomed_);
  for (int fd : doomed) {
    auto it = sessions_.find(fd);
    if (it == sessions_.end() || !it->second.send_failed) continue;
    it->second.send_failed = false;  // read once, even if the fd is listed twice
    on_readable(it->second, kDrainMessages);
  }
  doomed_.clear();  // on_readable dooms the same sessions again
  for (int fd : doomed) evict(fd, nullptr);  // logged where it was found
}

void Sessions::on_event(int fd, std::uint32_t epoll_events) {
  auto it = sessions_.find(fd);
  if (it == sessions_.end()) return;
  if ((epoll_events & EPOLLOUT) && !flush(it->second)) doomed_.push_back(it->first);
  if (epoll_events & (EPOLLIN | EPOLLHUP | EPOLLERR)) on_readable(it->second);
}

void Sessions::on_readable(Session& s, std::size_t max_messages) {
  alignas(8) static std::uint8_t buf[proto::kMaxMessageBytes];
  // A client that closes with messages unread on its side (announced batches it never took)
  // makes the kernel report ECONNRESET here before the messages it sent last (its final
  // releases): those are still read, then the session ends. The error is reported once.
  bool reset = false;
  for (std::size_t read = 0; read < max_messages; ++read) {
    const ssize_t n = ::recv(s.fd, buf, sizeof buf, MSG_DONTWAIT | MSG_TRUNC);
    if (n < 0) {
      if (errno == ECONNRESET && !reset) {
        reset = true;
        continue;
      }
      if (!reset && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return;
      doomed_.push_back(s.fd);
      return;
    }
    if (n == 0) {  // peer closed (or died): liveness is the socket
      doomed_.push_back(s.fd);
      return;
    }
    if (static_cast<std::size_t>(n) > sizeof buf || !handle_message(s, buf, static_cast<std::size_t>(n))) {
      s.send_failed = false;  // doomed for what it sent: nothing more of it is read
      doomed_.push_back(s.fd);
      return;
    }
    s.spoke = true;
    s.last_message = std::chrono::steady_clock::now();
  }
}

void Sessions::deliver_ready() {
  for (auto& [fd, s] : sessions_) {
    if (s.job == nullptr) continue;
    const bool announce = s.window > 0;
    // Acquire mode: only when asked. Announce mode: while the window has room.
    if (!announce ? !s.acquire_pending : s.announced - s.taken >= s.window) continue;
    if (auto f = s.job->failure()) {
      send_error(s, proto::ErrorCode::kJobFailed, "job '" + s.job->name() + "' stopped: " + *f);
      doomed_.push_back(fd);
      continue;
    }
    bool sent = false;
    while (auto msg = s.job->take_ready(s.rank, s.reader)) {
      sent = true;
      // Counted as announced before the send: an announcement that cannot be sent (the
      // consumer just hung up) is one it never took, and goes back with the untaken (evict).
      if (announce) s.slot_seq[msg->slot] = s.announced++;
      if (!send_all(s, &*msg, sizeof *msg)) {
        if (!announce) s.unsent_slot = msg->slot;
        doomed_.push_back(fd);
        break;
      }
      if (!announce) {
        s.acquire_pending = false;
        break;
      }
      if (s.announced - s.taken >= s.window) break;
    }
    // Drained: told once the consumer has taken every batch it was sent (announce mode: its
    // Credit before it waits says so), so none is lost behind the error.
    if (!sent && (!announce || s.announced == s.taken) && s.job->drained_for(s.rank, s.reader)) {
      const JobTable::Entry* e = jobs_.entry(s.job);
      send_error(s, proto::ErrorCode::kJobDrained,
                 "job '" + s.job->name() + "' was drained (" + (e ? e->drain_reason : std::string("drained")) +
                     "): every batch already planned was delivered, no more will come");
      doomed_.push_back(fd);
    }
  }
}

void Sessions::close_silent_connections() {
  // A connection that never says anything would hold a descriptor forever: close it.
  const auto now = std::chrono::steady_clock::now();
  // One that spoke but is attached to no job (status, top) is closed once idle for
  // idle_timeout_s: a few hundred idle `status` callers must not hold descriptors forever.
  // One waiting for a command's reply (a job definition scanning its dataset, a reload) is
  // not idle: the daemon owes it an answer, however long the load takes.
  for (const auto& [fd, s] : sessions_) {
    if (!s.spoke && std::chrono::duration<double>(now - s.connected_at).count() > limits_.handshake_timeout_s) {
      stoker::log::warn("closing a connection from pid {} that sent nothing for {} s", s.pid,
                        limits_.handshake_timeout_s);
      doomed_.push_back(fd);
    } else if (s.spoke && s.job == nullptr && s.outbox.empty() && !s.command_pending &&
               std::chrono::duration<double>(now - s.last_message).count() > limits_.idle_timeout_s) {
      stoker::log::debug("closing an idle connection from pid {} (no job, {} s without a message)", s.pid,
                         limits_.idle_timeout_s);
      doomed_.push_back(fd);
    }
  }
}

void Sessions::evict_stuck_consumers() {
  // Alive but stuck (it stopped releasing): only its own ring starves, and with the job's
  // lease_timeout_s it is told why and disconnected so its slots come back.
  for (auto& [fd, s] : sessions_) {
    if (s.job == nullptr || s.job->config().lease_timeout_s <= 0) continue;
    const double held = s.job->oldest_lease_s(s.rank, s.reader);
    if (held <= s.job->config().lease_timeout_s) continue;
    const std::string why = "held a batch for " + std::to_string(static_cast<int>(held)) +
                            " s, longer than the job's lease_timeout_s (" +
                            std::to_string(s.job->config().lease_timeout_s) + " s)";
    stoker::log::warn("job {} rank {}{}: consumer pid {} {}; disconnecting it", s.job->name(), s.rank,
                      reader_suffix(s.job, s.reader), s.pid, why);
    send_error(s, proto::ErrorCode::kLeaseTimeout, "stokerd: this consumer " + why);
    doomed_.push_back(fd);
  }
}

void Sessions::evict_overdue_drains(double drain_timeout_s) {
  const auto now = std::chrono::steady_clock::now();
  for (auto& [fd, s] : sessions_) {
    if (s.job == nullptr || !s.job->draining()) continue;
    const JobTable::Entry* e = jobs_.entry(s.job);
    if (e == nullptr || std::chrono::duration<double>(now - e->drain_started).count() < drain_timeout_s) {
      continue;
    }
    send_error(s, proto::ErrorCode::kJobDrained,
               "job '" + s.job->name() + "' was drained (" + e->drain_reason + ") and this consumer did not finish its " +
                   "batches within " + std::to_string(static_cast<int>(drain_timeout_s)) + " s");
    doomed_.push_back(fd);
  }
}

void Sessions::evict(int fd, const char* why) {
  auto it = sessions_.find(fd);
  if (it == sessions_.end()) return;
  Session& s = it->second;
  if (s.job != nullptr) {
    stoker::log::info("consumer pid {} of job {} rank {}{} disconnected{}{}", s.pid, s.job->name(), s.rank,
                      reader_suffix(s.job, s.reader), why ? ": " : "", why ? why : "");
    // Announce mode: the batches it was sent (or was being sent) and is not known to have
    // taken go back to it; Acquire mode: the one whose reply failed.
    std::vector<std::uint32_t> untaken;
    for (std::uint32_t slot = 0; slot < s.slot_seq.size(); ++slot) {
      if (s.announced > 0 && s.slot_seq[slot] >= s.taken && s.slot_seq[slot] < s.announced) untaken.push_back(slot);
    }
    if (s.unsent_slot) untaken.push_back(*s.unsent_slot);
    delivery_.retire(s.job->detach(s.rank, s.reader, untaken), s.peer);
  }
  ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, fd, nullptr);
  ::close(fd);
  sessions_.erase(it);
}

}  // namespace stoker::control
