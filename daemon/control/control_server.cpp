// ControlServer: the loop and accept (control_server.hpp). Each turn handles the epoll events,
// then the housekeeping in a fixed order: evict what the events doomed, apply finished loads,
// deliver ready batches, sample the telemetry, reap device rings, evict silent, stuck and
// overdue clients, remove drained jobs.
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

#include "log/log.hpp"
#include "delivery/device_delivery.hpp"
#include "job/job.hpp"
#include "jobs/job_table.hpp"

namespace stoker::control {

namespace {

constexpr std::uint64_t kListenTag = ~0ull;
constexpr std::uint64_t kEventTag = ~0ull - 1;
constexpr std::uint64_t kSignalTag = ~0ull - 2;

std::string errno_text() { return std::strerror(errno); }

}  // namespace

ControlServer::ControlServer(std::string socket_path, jobs::JobTable& jobs,
                             std::uint64_t daemon_generation, unsigned workers,
                             delivery::DeviceDelivery& delivery, const Limits& limits, JobSources sources)
    : socket_path_(std::move(socket_path)),
      jobs_(jobs),
      delivery_(delivery),
      limits_(limits),
      sources_(std::move(sources)),
      epoll_fd_(::epoll_create1(EPOLL_CLOEXEC)),
      sessions_(epoll_fd_, jobs, delivery, daemon_generation, limits_),
      telemetry_(jobs, sessions_),
      commands_(jobs, sessions_, sources_, [this] { notify(); }),
      status_({socket_path_, daemon_generation, workers}, jobs, sessions_, telemetry_, commands_.reloads(), delivery,
              sources_) {
  sessions_.set_handlers({
      [this](Session& s, const std::uint8_t* data, std::size_t n) { return commands_.handle(s, data, n); },
      [this](Session& s) { return sessions_.send_json(s, status_.json(s.peer_uid), proto::MsgType::kStatusReply); },
      [this](const Session& s, std::optional<std::uint64_t> wait_ns) { telemetry_.note_release_wait(s, wait_ns); },
  });
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
}

ControlServer::~ControlServer() {
  commands_.stop_loads();  // waits for loads in progress (they wake the loop through event_fd_)
  sessions_.close_all();
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
            commands_.request_reload_by_signal();
          } else {
            stoker::log::info("received {}, shutting down", strsignal(static_cast<int>(si.ssi_signo)));
            stop = true;
          }
        }
      } else {
        sessions_.on_event(static_cast<int>(tag), events[i].events);
      }
    }
    sessions_.evict_doomed();
    commands_.apply_loaded();
    sessions_.deliver_ready();
    sessions_.evict_doomed();
    telemetry_.sample();  // rates, then the metrics document, textfile, throughput log
    delivery_.reap();
    sessions_.close_silent_connections();
    sessions_.evict_stuck_consumers();
    for (job::Job* j : jobs_.serving_jobs()) j->retry_planning();  // after running out of memory
    commands_.settle_draining();
    sessions_.evict_doomed();  // silent, idle, stuck or drained: logged when found
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
    const PeerVerdict v = gate_.admit(fd);  // the peer's credentials, read once, here
    if (!v.allowed) {
      refuse(fd, v.why, proto::ErrorCode::kAccessDenied);
      continue;
    }
    if (sessions_.size() >= limits_.max_connections) {
      refuse(fd, "stokerd has reached server.max_connections (" + std::to_string(limits_.max_connections) +
                     " connections); close idle clients or raise the limit");
      continue;
    }
    sessions_.add(fd, v.peer);
  }
}

void ControlServer::refuse(int fd, const std::string& why, proto::ErrorCode code) {
  // Rate-limited by nature: one line per refused connection would flood the log under a storm.
  static auto last_log = std::chrono::steady_clock::time_point{};
  const auto now = std::chrono::steady_clock::now();
  if (now - last_log > std::chrono::seconds(10)) {
    stoker::log::warn("refusing a connection: {}", why);
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

}  // namespace stoker::control
