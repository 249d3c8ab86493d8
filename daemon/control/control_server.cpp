#include "control/control_server.hpp"

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <stdexcept>
#include <fcntl.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <spdlog/spdlog.h>

#include "delivery/device_delivery.hpp"
#include "job/job.hpp"
#include "jobs/job_loader.hpp"
#include "jobs/job_table.hpp"

namespace stoker::control {

using delivery::DeviceDelivery;
using delivery::DeviceRing;
using delivery::PeerProcess;
using job::Job;
using job::AttachResult;
using job::JobStats;
using job::ReaderStatus;
using job::RingStatus;
using job::WorkerPool;
using jobs::JobLoader;
using jobs::JobTable;
using jobs::LoadResult;
namespace {

// " reader K" in log lines of fan-out jobs (nothing for a job with one reader per rank).
std::string reader_suffix(const Job* job, std::uint32_t reader) {
  return job != nullptr && job->readers() > 1 ? " reader " + std::to_string(reader) : std::string();
}

constexpr std::uint64_t kListenTag = ~0ull;
constexpr std::uint64_t kEventTag = ~0ull - 1;
constexpr std::uint64_t kSignalTag = ~0ull - 2;

std::string errno_text() { return std::strerror(errno); }

}  // namespace

ControlServer::ControlServer(std::string socket_path, JobTable& jobs,
                             std::uint64_t daemon_generation, unsigned workers,
                             DeviceDelivery& delivery, const Limits& limits, JobSources sources)
    : socket_path_(std::move(socket_path)),
      jobs_(jobs),
      sources_(std::move(sources)),
      daemon_generation_(daemon_generation),
      workers_(workers),
      delivery_(delivery),
      limits_(limits) {
  spare_fd_ = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (socket_path_.size() >= sizeof(addr.sun_path)) {
    throw std::runtime_error("socket path too long (max " + std::to_string(sizeof(addr.sun_path) - 1) +
                             " bytes): " + socket_path_);
  }
  std::memcpy(addr.sun_path, socket_path_.c_str(), socket_path_.size() + 1);

  listen_fd_ = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (listen_fd_ < 0) throw std::runtime_error("socket(): " + errno_text());
  ::unlink(socket_path_.c_str());  // stale from a killed daemon; the instance lock is ours
  const mode_t old_mask = ::umask(0177);
  const int rc = ::bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  ::umask(old_mask);
  if (rc != 0) {
    const std::string why = errno_text();
    ::close(listen_fd_);
    throw std::runtime_error("cannot bind control socket " + socket_path_ + ": " + why);
  }
  if (::listen(listen_fd_, 64) != 0) {
    const std::string why = errno_text();
    ::close(listen_fd_);
    ::unlink(socket_path_.c_str());
    throw std::runtime_error("cannot listen on " + socket_path_ + ": " + why);
  }

  epoll_fd_ = ::epoll_create1(EPOLL_CLOEXEC);
  event_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGHUP);  // reload (the caller blocked it in every thread)
  signal_fd_ = ::signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
  if (epoll_fd_ < 0 || event_fd_ < 0 || signal_fd_ < 0) {
    throw std::runtime_error("cannot create the event loop: " + errno_text());
  }
  auto add = [&](int fd, std::uint64_t tag) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = tag;
    ::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev);
  };
  add(listen_fd_, kListenTag);
  add(event_fd_, kEventTag);
  add(signal_fd_, kSignalTag);

  started_ = last_sample_ = std::chrono::steady_clock::now();
  loader_ = std::make_unique<JobLoader>([this] { notify(); });
}

ControlServer::~ControlServer() {
  loader_.reset();  // waits for loads in progress (they wake the loop through event_fd_)
  for (auto& [fd, s] : sessions_) {
    if (s.job != nullptr) delivery_.retire(s.job->detach(s.rank, s.reader), s.peer);
    ::close(fd);
  }
  sessions_.clear();
  for (int fd : {listen_fd_, epoll_fd_, event_fd_, signal_fd_, spare_fd_}) {
    if (fd >= 0) ::close(fd);
  }
  ::unlink(socket_path_.c_str());
}

void ControlServer::notify() {
  const std::uint64_t one = 1;
  [[maybe_unused]] ssize_t n = ::write(event_fd_, &one, sizeof one);
}

void ControlServer::run(const LoopHooks& hooks) {
  // The process's supervisor (systemd's watchdog) is fed from this loop through `each_turn`,
  // so a wedged control thread gets the daemon restarted.
  const int turn_ms = static_cast<int>(std::clamp<long long>(hooks.turn.count(), 10, 1000));
  while (run_once(turn_ms)) {
    if (hooks.each_turn) hooks.each_turn();
  }
  if (hooks.at_stop) hooks.at_stop();
}

bool ControlServer::run_once(int timeout_ms) {
  epoll_event events[64];
  {
    const int n = ::epoll_wait(epoll_fd_, events, 64, timeout_ms);
    if (n < 0 && errno != EINTR) throw std::runtime_error("epoll_wait: " + errno_text());
    bool stop = false;
    for (int i = 0; i < n; ++i) {
      const std::uint64_t tag = events[i].data.u64;
      if (tag == kListenTag) {
        accept_clients();
      } else if (tag == kEventTag) {
        std::uint64_t v;
        while (::read(event_fd_, &v, sizeof v) > 0) {
        }
      } else if (tag == kSignalTag) {
        signalfd_siginfo si{};
        while (::read(signal_fd_, &si, sizeof si) == static_cast<ssize_t>(sizeof si)) {
          if (si.ssi_signo == SIGHUP) {
            request_reload("SIGHUP", nullptr);
          } else {
            spdlog::info("received {}, shutting down", strsignal(static_cast<int>(si.ssi_signo)));
            stop = true;
          }
        }
      } else {
        auto it = sessions_.find(static_cast<int>(tag));
        if (it == sessions_.end()) continue;
        if ((events[i].events & EPOLLOUT) && !flush(it->second)) doomed_.push_back(it->first);
        if (events[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR)) on_readable(it->second);
      }
    }
    for (int fd : doomed_) evict(fd, nullptr);
    doomed_.clear();
    apply_loaded();
    deliver_ready();
    for (int fd : doomed_) evict(fd, nullptr);
    doomed_.clear();
    sample_rates();
    delivery_.reap();
    close_silent_connections();
    evict_stuck_consumers();
    settle_draining();
    for (int fd : doomed_) evict(fd, nullptr);  // silent, idle, stuck or drained: logged when found
    doomed_.clear();
    return !stop;
  }
}

void ControlServer::accept_clients() {
  for (;;) {
    const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if ((errno == EMFILE || errno == ENFILE) && spare_fd_ >= 0) {
        ::close(spare_fd_);
        const int victim = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (victim >= 0) {
          refuse(victim, "stokerd is out of file descriptors (" + std::to_string(sessions_.size()) +
                             " connections open); raise LimitNOFILE or lower server.max_connections");
        }
        spare_fd_ = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
        if (victim >= 0) continue;
      }
      return;  // EAGAIN: no more pending (or nothing can be done now; retried next event)
    }
    // Who may connect: stokerd's user, root, members of server.group (control/peer_access.hpp).
    if (const PeerVerdict v = gate_.admit(fd); !v.allowed) {
      refuse(fd, v.why, proto::ErrorCode::kAccessDenied);
      continue;
    }
    if (sessions_.size() >= limits_.max_connections) {
      refuse(fd, "stokerd has reached server.max_connections (" + std::to_string(limits_.max_connections) +
                     " connections); close idle clients or raise the limit");
      continue;
    }
    ucred cred{};
    socklen_t len = sizeof cred;
    ::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len);
    Session s;
    s.fd = fd;
    s.pid = static_cast<std::uint32_t>(cred.pid);
    s.peer_pid = cred.pid;
    s.peer_uid = cred.uid;
    s.peer_gid = cred.gid;
    s.token = next_token_++;
    s.connected_at = s.last_message = std::chrono::steady_clock::now();
    sessions_[fd] = s;
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLRDHUP;
    ev.data.u64 = static_cast<std::uint64_t>(fd);
    ::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev);
  }
}

void ControlServer::on_readable(Session& s) {
  alignas(8) static std::uint8_t buf[proto::kMaxMessageBytes];
  for (;;) {
    const ssize_t n = ::recv(s.fd, buf, sizeof buf, MSG_DONTWAIT | MSG_TRUNC);
    if (n < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return;
      doomed_.push_back(s.fd);
      return;
    }
    if (n == 0) {  // peer closed (or died): liveness is the socket
      doomed_.push_back(s.fd);
      return;
    }
    if (static_cast<std::size_t>(n) > sizeof buf || !handle_message(s, buf, static_cast<std::size_t>(n))) {
      doomed_.push_back(s.fd);
      return;
    }
    s.spoke = true;
    s.last_message = std::chrono::steady_clock::now();
  }
}

void ControlServer::evict_stuck_consumers() {
  // Alive but stuck (it stopped releasing): only its own ring starves, and with the job's
  // lease_timeout_s it is told why and disconnected so its slots come back.
  for (auto& [fd, s] : sessions_) {
    if (s.job == nullptr || s.job->config().lease_timeout_s <= 0) continue;
    const double held = s.job->oldest_lease_s(s.rank, s.reader);
    if (held <= s.job->config().lease_timeout_s) continue;
    const std::string why = "held a batch for " + std::to_string(static_cast<int>(held)) +
                            " s, longer than the job's lease_timeout_s (" +
                            std::to_string(s.job->config().lease_timeout_s) + " s)";
    spdlog::warn("job {} rank {}{}: consumer pid {} {}; disconnecting it", s.job->name(), s.rank, reader_suffix(s.job, s.reader), s.pid, why);
    send_error(s, proto::ErrorCode::kLeaseTimeout, "stokerd: this consumer " + why);
    doomed_.push_back(fd);
  }
}

void ControlServer::refuse(int fd, const std::string& why, proto::ErrorCode code) {
  // Rate-limited by nature: one line per refused connection would flood the log under a storm.
  static auto last_log = std::chrono::steady_clock::time_point{};
  const auto now = std::chrono::steady_clock::now();
  if (now - last_log > std::chrono::seconds(10)) {
    spdlog::warn("refusing a connection: {}", why);
    last_log = now;
  }
  auto e = proto::make_message<proto::ErrorMsg>(proto::MsgType::kError);
  e.code = static_cast<std::int32_t>(code);
  proto::copy_cstr(e.message, why.c_str());
  [[maybe_unused]] const ssize_t n = ::send(fd, &e, sizeof e, MSG_DONTWAIT | MSG_NOSIGNAL);
  // Unread messages at close would reset the connection and the peer would lose the error.
  alignas(8) static std::uint8_t sink[proto::kMaxMessageBytes];
  while (::recv(fd, sink, sizeof sink, MSG_DONTWAIT) > 0) {
  }
  ::close(fd);
}

void ControlServer::close_silent_connections() {
  // A connection that never says anything would hold a descriptor forever: close it.
  const auto now = std::chrono::steady_clock::now();
  // One that spoke but is attached to no job (status, top) is closed once idle for
  // idle_timeout_s: a few hundred idle `status` callers must not hold descriptors forever.
  // One waiting for a command's reply (a job definition scanning its dataset, a reload) is
  // not idle: the daemon owes it an answer, however long the load takes.
  for (const auto& [fd, s] : sessions_) {
    if (!s.spoke && std::chrono::duration<double>(now - s.connected_at).count() > limits_.handshake_timeout_s) {
      spdlog::warn("closing a connection from pid {} that sent nothing for {} s", s.pid, limits_.handshake_timeout_s);
      doomed_.push_back(fd);
    } else if (s.spoke && s.job == nullptr && s.outbox.empty() && !s.command_pending &&
               std::chrono::duration<double>(now - s.last_message).count() > limits_.idle_timeout_s) {
      spdlog::debug("closing an idle connection from pid {} (no job, {} s without a message)", s.pid,
                    limits_.idle_timeout_s);
      doomed_.push_back(fd);
    }
  }
}

bool ControlServer::handle_message(Session& s, const std::uint8_t* data, std::size_t n) {
  if (n < sizeof(proto::MessageHeader)) {
    send_error(s, proto::ErrorCode::kBadMessage, "message shorter than its header");
    return false;
  }
  proto::MessageHeader h;
  std::memcpy(&h, data, sizeof h);
  if (h.magic != proto::kControlMagic) {
    send_error(s, proto::ErrorCode::kBadMessage, "bad magic: not a stoker client");
    return false;
  }
  if (h.proto_major != proto::kProtoMajor) {
    send_error(s, proto::ErrorCode::kVersionMismatch,
               "client speaks stoker protocol " + std::to_string(h.proto_major) + "." +
                   std::to_string(h.proto_minor) + ", stokerd speaks " +
                   std::to_string(proto::kProtoMajor) + "." + std::to_string(proto::kProtoMinor));
    return false;
  }
  const auto type = static_cast<proto::MsgType>(h.type);
  auto expect = [&](std::size_t size) {
    if (h.size == size && n == size) return true;
    // Name the size received; the header's claim too when it differs (a lying header).
    send_error(s, proto::ErrorCode::kBadMessage,
               "message of type " + std::to_string(h.type) + " has size " + std::to_string(n) +
                   (h.size != n ? " (its header claims " + std::to_string(h.size) + ")" : std::string()) +
                   ", expected " + std::to_string(size));
    return false;
  };
  switch (type) {
    case proto::MsgType::kHello: {
      if (!expect(sizeof(proto::HelloMsg))) return false;
      if (s.job != nullptr) {
        send_error(s, proto::ErrorCode::kBadMessage, "second hello on one connection");
        return false;
      }
      proto::HelloMsg m;
      std::memcpy(&m, data, sizeof m);
      return handle_hello(s, m);
    }
    case proto::MsgType::kAcquire:
      if (!expect(sizeof(proto::AcquireMsg))) return false;
      if (s.job == nullptr) {
        send_error(s, proto::ErrorCode::kBadMessage, "acquire before hello");
        return false;
      }
      s.acquire_pending = true;
      return true;
    case proto::MsgType::kRelease: {
      // 32 bytes with the trainer's wait (2.3), or the 24 of a 2.0..2.2 client (no wait).
      const bool v21 = n == proto::kReleaseV21Bytes && h.size == n;
      if (!v21 && !expect(sizeof(proto::ReleaseMsg))) return false;
      proto::ReleaseMsg m{};
      std::memcpy(&m, data, n);
      if (s.job == nullptr || !s.job->release(s.rank, s.reader, m.slot, m.generation)) {
        send_error(s, proto::ErrorCode::kBadRelease,
                   "release of slot " + std::to_string(m.slot) + " generation " +
                       std::to_string(m.generation) + " that this client does not hold");
        spdlog::warn("evicting client pid {}: bad release (slot {}, generation {})", s.pid, m.slot,
                     m.generation);
        return false;
      }
      note_release_wait(s, v21 ? std::nullopt : std::optional<std::uint64_t>(m.wait_ns));
      return true;
    }
    case proto::MsgType::kUnmapped:
    {
      if (!expect(sizeof(proto::UnmappedMsg))) return false;
      proto::UnmappedMsg m;
      std::memcpy(&m, data, sizeof m);
      // On the consumer's own connection, or from the same process once its batches outlived
      // that connection; a ring of another process is never touched.
      if (s.device && s.device->alloc_id() == m.alloc_id) {
        s.device->unmapped.store(true);
        return true;
      }
      if (!s.device && delivery_.mark_unmapped(m.alloc_id, s.peer_pid)) return true;
      if (!s.device && m.daemon_generation != daemon_generation_) return true;  // a predecessor's ring
      send_error(s, proto::ErrorCode::kBadMessage,
                 "unmapped device ring " + std::to_string(m.alloc_id) + " that this process does not hold");
      return false;
    }
    case proto::MsgType::kCommand:
      if (h.size != n) {
        send_error(s, proto::ErrorCode::kBadMessage,
                   "command message has size " + std::to_string(n) + " but its header claims " + std::to_string(h.size));
        return false;
      }
      return handle_command(s, data, n);
    case proto::MsgType::kStatusQuery: {
      if (!expect(sizeof(proto::StatusQueryMsg))) return false;
      return send_status(s);
    }
    default:
      send_error(s, proto::ErrorCode::kBadMessage, "unknown message type " + std::to_string(h.type));
      return false;
  }
}

bool ControlServer::handle_hello(Session& s, const proto::HelloMsg& hello) {
  proto::HelloMsg m = hello;
  const std::string job_name(m.job, proto::bounded_strlen(m.job));
  Job* job = jobs_.serving(job_name);
  std::string names;
  for (Job* j : jobs_.serving_jobs()) names += (names.empty() ? "" : ", ") + j->name();
  if (job == nullptr) {
    for (Job* j : jobs_.jobs()) {
      if (j->name() != job_name) continue;
      send_error(s, proto::ErrorCode::kJobDrained,
                 "job '" + job_name + "' is draining (" + jobs_.entry(j)->drain_reason + "); jobs: " + names);
      return false;
    }
    send_error(s, proto::ErrorCode::kUnknownJob,
               "no job '" + job_name + "' in this stokerd; jobs: " + names);
    return false;
  }
  if (const std::string why = client_job_refusal(s, job); !why.empty()) {
    send_error(s, proto::ErrorCode::kUnknownJob, why);
    return false;
  }
  std::string split;  // how a process index became (rank, reader), for messages
  if ((m.flags & proto::kHelloSplitRank) != 0 && job->readers() > 1) {
    split = " (process " + std::to_string(m.rank) + " with readers: " + std::to_string(job->readers()) + ")";
    m.reader = m.rank % job->readers();
    m.rank /= job->readers();
  }
  if (!job->serves(m.rank)) {
    const std::uint32_t first = job->first_rank(), last = first + job->consumers() - 1;
    send_error(s, proto::ErrorCode::kBadRank,
               "rank " + std::to_string(m.rank) + split + " is outside job '" + job_name + "' (this stokerd serves ranks " +
                   std::to_string(first) + ".." + std::to_string(last) + " of a world of " +
                   std::to_string(job->world_size()) +
                   (job->world_size() == job->consumers() ? "; consumers: " + std::to_string(job->consumers()) : "") +
                   ")");
    return false;
  }
  if (auto f = job->failure()) {
    send_error(s, proto::ErrorCode::kJobFailed, "job '" + job_name + "' stopped: " + *f);
    return false;
  }
  std::shared_ptr<DeviceRing> device;
  if ((m.flags & proto::kHelloWantDevice) != 0) {
    std::string why;
    device = delivery_.open_ring(job->device_request(), m.device_uuid, m.device_backend, why);
    if (!device) {
      send_error(s, proto::ErrorCode::kNoDevice, why);
      return false;
    }
  }
  // A ring this consumer never saw may be freed at once if the attach fails.
  auto drop_unsent = [&] {
    if (device) device->unmapped.store(true);
    delivery_.retire(std::move(device), nullptr);
  };
  if (m.reader >= job->readers()) {
    drop_unsent();
    send_error(s, proto::ErrorCode::kBadRank,
               "reader " + std::to_string(m.reader) + " is outside job '" + job_name + "' (readers: " +
                   std::to_string(job->readers()) + ", so 0.." + std::to_string(job->readers() - 1) + ")");
    return false;
  }
  std::string why;
  AttachResult attached = job->attach(m.rank, m.reader, m.start_epoch, m.start_batch, device, why);
  if (attached == AttachResult::kBusy) {
    // A trainer that reconnects right after closing may get here before its old connection's
    // hang-up was processed: if the holder of the rank is gone, finish it off and retry.
    // Draining its queued messages (releases, then the hang-up) settles it either way.
    for (auto& [fd, other] : sessions_) {
      if (&other == &s || other.job != job || other.rank != m.rank || other.reader != m.reader) continue;
      const int other_fd = fd;
      on_readable(other);
      if (std::find(doomed_.begin(), doomed_.end(), other_fd) != doomed_.end()) {
        // Evicted now, so its number may be reused by the next accept: forget it here.
        std::erase(doomed_, other_fd);
        evict(other_fd, "hung up");
        attached = job->attach(m.rank, m.reader, m.start_epoch, m.start_batch, device, why);
      }
      break;
    }
  }
  if (attached == AttachResult::kOutOfStep) {
    drop_unsent();
    send_error(s, proto::ErrorCode::kOutOfStep, why);
    return false;
  }
  if (attached == AttachResult::kBusy) {
    drop_unsent();
    send_error(s, proto::ErrorCode::kRankBusy,
               "rank " + std::to_string(m.rank) + (job->readers() > 1 ? " reader " + std::to_string(m.reader) : "") +
                   " of job '" + job_name + "' already has a consumer connected");
    return false;
  }
  s.job = job;
  s.rank = m.rank;
  s.reader = m.reader;
  s.pid = m.pid != 0 ? m.pid : s.pid;

  if (job->restore_layout()) {
    spdlog::warn("job {}: its segment's header had been overwritten by another process; restored", job_name);
  }
  auto w = proto::make_message<proto::WelcomeMsg>(proto::MsgType::kWelcome);
  proto::copy_cstr(w.segment_name, job->segment().name().c_str());
  w.segment_size = job->segment().size();
  w.daemon_generation = daemon_generation_;
  w.ring_index = m.rank - job->first_rank();
  w.slot_count = job->config().prefetch;
  w.batches_per_epoch = job->batches_per_epoch(m.rank);
  w.samples_per_rank = job->samples_per_rank(m.rank);
  w.readers = job->readers();
  w.reader = m.reader;
  w.rank = m.rank;
  spdlog::info("consumer pid {} attached to job {} rank {}{} at epoch {} batch {}{}", s.pid, job_name,
               m.rank, reader_suffix(s.job, s.reader), m.start_epoch, m.start_batch, device ? " (device batches)" : "");
  // The segment travels with the Welcome, as a descriptor (SCM_RIGHTS): it has no name.
  if (!send_with_fd(s, &w, sizeof w, job->segment().fd())) return false;
  if (device) {
    s.device = device;
    s.peer = std::make_shared<PeerProcess>(s.peer_pid);
    const auto msg = device->message();
    return send_all(s, msg.data(), msg.size());
  }
  return true;
}

void ControlServer::deliver_ready() {
  for (auto& [fd, s] : sessions_) {
    if (s.job == nullptr || !s.acquire_pending) continue;
    if (auto f = s.job->failure()) {
      send_error(s, proto::ErrorCode::kJobFailed, "job '" + s.job->name() + "' stopped: " + *f);
      doomed_.push_back(fd);
      continue;
    }
    if (auto msg = s.job->take_ready(s.rank, s.reader)) {
      s.acquire_pending = false;
      if (!send_all(s, &*msg, sizeof *msg)) doomed_.push_back(fd);
    } else if (s.job->drained_for(s.rank, s.reader)) {
      const JobTable::Entry* e = jobs_.entry(s.job);
      send_error(s, proto::ErrorCode::kJobDrained,
                 "job '" + s.job->name() + "' was drained (" + (e ? e->drain_reason : std::string("drained")) +
                     "): every batch already planned was delivered, no more will come");
      doomed_.push_back(fd);
    }
  }
}

void ControlServer::send_error(Session& s, proto::ErrorCode code, const std::string& text) {
  auto m = proto::make_message<proto::ErrorMsg>(proto::MsgType::kError);
  m.code = static_cast<std::int32_t>(code);
  proto::copy_cstr(m.message, text.c_str());
  if (code == proto::ErrorCode::kJobDrained) {
    spdlog::info("client pid {}: {}", s.pid, text);
  } else if (code != proto::ErrorCode::kJobFailed) {
    spdlog::warn("client pid {}: {}", s.pid, text);
  }
  send_all(s, &m, sizeof m);
}

bool ControlServer::send_all(Session& s, const void* data, std::size_t n) {
  // Behind queued messages: keep the order.
  if (!s.outbox.empty()) {
    const auto* p = static_cast<const std::uint8_t*>(data);
    s.outbox.emplace_back(p, p + n);
    s.outbox_bytes += n;
    return flush(s);
  }
  // SEQPACKET sends are atomic; a full socket buffer means the client stopped reading,
  // which a well-behaved client never does (one reply per request).
  const ssize_t w = ::send(s.fd, data, n, MSG_NOSIGNAL | MSG_DONTWAIT);
  return w == static_cast<ssize_t>(n);
}

bool ControlServer::send_with_fd(Session& s, const void* data, std::size_t n, int fd) {
  iovec iov{const_cast<void*>(data), n};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  cmsghdr* c = CMSG_FIRSTHDR(&msg);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int));
  std::memcpy(CMSG_DATA(c), &fd, sizeof fd);
  const ssize_t w = ::sendmsg(s.fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
  return w == static_cast<ssize_t>(n);
}

bool ControlServer::send_status(Session& s) { return send_json(s, status_json(), proto::MsgType::kStatusReply); }

bool ControlServer::send_json(Session& s, const std::string& json, proto::MsgType type) {
  // The JSON in as many messages as it takes, each flagged kStatusMoreFollows but the last;
  // a reader concatenates them (stoker_daemon_status). Queued whole, then flushed.
  constexpr std::size_t kChunk = proto::kMaxMessageBytes - sizeof(proto::MessageHeader);
  std::size_t at = 0;
  do {
    const std::size_t len = std::min(kChunk, json.size() - at);
    std::vector<std::uint8_t> msg(sizeof(proto::MessageHeader) + len);
    auto hdr = proto::make_message<proto::StatusQueryMsg>(type).header;
    hdr.size = static_cast<std::uint32_t>(msg.size());
    hdr.reserved = at + len < json.size() ? proto::kStatusMoreFollows : 0;
    std::memcpy(msg.data(), &hdr, sizeof hdr);
    std::memcpy(msg.data() + sizeof hdr, json.data() + at, len);
    s.outbox_bytes += msg.size();
    s.outbox.push_back(std::move(msg));
    at += len;
  } while (at < json.size());
  return flush(s);
}

bool ControlServer::flush(Session& s) {
  // A client that asks and never reads would make the daemon hold its replies forever.
  constexpr std::size_t kMaxBacklog = std::size_t{64} << 20;
  if (s.outbox_bytes > kMaxBacklog) return false;
  const bool watching = !s.outbox.empty();
  while (!s.outbox.empty()) {
    const auto& m = s.outbox.front();
    const ssize_t w = ::send(s.fd, m.data(), m.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    if (w != static_cast<ssize_t>(m.size())) return false;
    s.outbox_bytes -= m.size();
    s.outbox.pop_front();
  }
  epoll_event ev{};
  ev.events = EPOLLIN | EPOLLRDHUP | (s.outbox.empty() ? 0u : static_cast<std::uint32_t>(EPOLLOUT));
  ev.data.u64 = static_cast<std::uint64_t>(s.fd);
  if (watching || !s.outbox.empty()) ::epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, s.fd, &ev);
  return true;
}

void ControlServer::evict(int fd, const char* why) {
  auto it = sessions_.find(fd);
  if (it == sessions_.end()) return;
  Session& s = it->second;
  if (s.job != nullptr) {
    spdlog::info("consumer pid {} of job {} rank {}{} disconnected{}{}", s.pid, s.job->name(), s.rank,
                 reader_suffix(s.job, s.reader), why ? ": " : "", why ? why : "");
    delivery_.retire(s.job->detach(s.rank, s.reader), s.peer);
  }
  ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, fd, nullptr);
  ::close(fd);
  sessions_.erase(it);
}

}  // namespace stoker::control
