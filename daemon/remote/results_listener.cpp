#include "remote/results_listener.hpp"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <stdexcept>

#include "log/log.hpp"
#include "remote/protocol.hpp"
#include "remote/worker_stream.hpp"

namespace stoker::remote {

ResultsListener::ResultsListener(const std::string& host, std::uint16_t port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* res = nullptr;
  const char* node = host.empty() ? nullptr : host.c_str();
  const std::string service = std::to_string(port);
  if (const int e = ::getaddrinfo(node, service.c_str(), &hints, &res); e != 0 || res == nullptr) {
    throw std::runtime_error("results listener: cannot resolve '" + host + "': " + gai_strerror(e));
  }
  std::string why;
  for (addrinfo* p = res; p != nullptr && fd_ < 0; p = p->ai_next) {
    const int fd = ::socket(p->ai_family, p->ai_socktype | SOCK_CLOEXEC, p->ai_protocol);
    if (fd < 0) {
      why = std::strerror(errno);
      continue;
    }
    const int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);  // a restarted worker's --results-port
    if (::bind(fd, p->ai_addr, p->ai_addrlen) != 0 || ::listen(fd, 64) != 0) {
      why = std::strerror(errno);
      ::close(fd);
      continue;
    }
    fd_ = fd;
  }
  ::freeaddrinfo(res);
  if (fd_ < 0)
    throw std::runtime_error("results listener: cannot listen on '" + host + "' port " + service + ": " + why);
  sockaddr_storage at{};
  socklen_t len = sizeof at;
  ::getsockname(fd_, reinterpret_cast<sockaddr*>(&at), &len);
  port_ = at.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&at)->sin6_port)
                                   : ntohs(reinterpret_cast<sockaddr_in*>(&at)->sin_port);
  // Non-blocking: the polling thread takes every connection waiting, then polls again.
  ::fcntl(fd_, F_SETFL, ::fcntl(fd_, F_GETFL) | O_NONBLOCK);
  wake_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (wake_ < 0) {
    const std::string e = std::strerror(errno);
    ::close(fd_);
    throw std::runtime_error("results listener: eventfd: " + e);
  }
  thread_ = std::thread([this] { accept_loop(); });
}

ResultsListener::~ResultsListener() { stop(); }

void ResultsListener::stop() {
  if (stopping_.exchange(true)) return;
  const std::uint64_t one = 1;
  if (::write(wake_, &one, sizeof one) < 0) {
    // An eventfd's counter cannot overflow from one write: nothing to do.
  }
  if (thread_.joinable()) thread_.join();
  ::close(fd_);
  ::close(wake_);
}

void ResultsListener::offer(const std::string& nonce, std::weak_ptr<WorkerStream> stream) {
  base::MutexLock lock(mu_);
  offered_.emplace_back(nonce, std::move(stream));
}

void ResultsListener::withdraw(const std::string& nonce) {
  base::MutexLock lock(mu_);
  for (auto it = offered_.begin(); it != offered_.end(); ++it) {
    if (it->first == nonce) {
      offered_.erase(it);
      return;
    }
  }
}

namespace {

// A connection still in its handshake (ResultsListener::accept_loop).
struct Greeting {
  int fd;
  std::chrono::steady_clock::time_point until;
  std::size_t got = 0;
  char hello[sizeof kResultsMagic + kNonceBytes];
};

enum class Heard { kWaiting, kWhole, kBad };

// Reads what the peer has sent of its greeting, without waiting. kBad: closed, failed, or not
// a node's magic (so not worth waiting for).
Heard hear(Greeting& g) {
  const ssize_t r = ::recv(g.fd, g.hello + g.got, sizeof g.hello - g.got, MSG_DONTWAIT);
  if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return Heard::kWaiting;
  if (r <= 0) return Heard::kBad;
  g.got += static_cast<std::size_t>(r);
  if (std::memcmp(g.hello, kResultsMagic, std::min(g.got, sizeof kResultsMagic)) != 0) return Heard::kBad;
  return g.got == sizeof g.hello ? Heard::kWhole : Heard::kWaiting;
}

}  // namespace

void ResultsListener::accept_loop() {
  // Every connection still in its handshake, polled together: none waits for another's greeting.
  std::vector<Greeting> pending;
  std::vector<pollfd> polled;
  auto finish = [&](const Greeting& g, Heard heard) {
    if (heard == Heard::kWhole) {
      greeted(g.fd, g.hello);  // checks the magic again, in full
    } else {
      ::close(g.fd);
    }
  };
  // Out of descriptors (or memory) while accepting: a fault of the machine, reported at most
  // every 10 s with how often it happened since.
  std::uint64_t short_of_fds = 0;
  auto last_report = std::chrono::steady_clock::time_point{};
  auto report = [&](int e, bool gave_way) {
    ++short_of_fds;
    const auto now = std::chrono::steady_clock::now();
    if (now - last_report < std::chrono::seconds(10)) return;
    stoker::log::warn("results listener: accepting a connection failed ({}; {} time(s) in the last 10 s); {}",
                      std::strerror(e), short_of_fds,
                      gave_way ? "the connection waiting longest for its greeting was closed to make room"
                               : "trying again every 50 ms");
    last_report = now;
    short_of_fds = 0;
  };
  while (!stopping_.load()) {
    const auto now = std::chrono::steady_clock::now();
    // Past its time: closed unbound (a silent peer, or one too slow to say who it is).
    std::erase_if(pending, [&](const Greeting& g) {
      if (g.until > now) return false;
      ::close(g.fd);
      return true;
    });
    polled.assign({{fd_, POLLIN, 0}, {wake_, POLLIN, 0}});
    auto wait = std::chrono::milliseconds(-1);
    for (const Greeting& g : pending) {
      polled.push_back({g.fd, POLLIN, 0});
      const auto left = std::chrono::ceil<std::chrono::milliseconds>(g.until - now);
      if (wait.count() < 0 || left < wait) wait = left;
    }
    if (::poll(polled.data(), polled.size(), static_cast<int>(wait.count())) < 0 && errno != EINTR) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));  // out of memory: try again shortly
      continue;
    }
    if (stopping_.load()) break;
    // Greetings first (the new connections below shift nothing already polled).
    for (std::size_t i = 0; i < pending.size();) {
      if ((polled[i + 2].revents & (POLLIN | POLLHUP | POLLERR)) == 0) {
        ++i;
        continue;
      }
      const Heard heard = hear(pending[i]);
      if (heard == Heard::kWaiting) {
        ++i;
        continue;
      }
      const Greeting whole = pending[i];
      pending.erase(pending.begin() + static_cast<std::ptrdiff_t>(i));
      polled.erase(polled.begin() + static_cast<std::ptrdiff_t>(i) + 2);
      finish(whole, heard);
    }
    if ((polled[0].revents & POLLIN) != 0) {
      for (;;) {
        const int fd = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (fd < 0) {
          const int e = errno;
          if (e != EMFILE && e != ENFILE && e != ENOBUFS && e != ENOMEM) break;  // EAGAIN: none left to take
          if (!pending.empty()) {
            // Out of descriptors with peers still silent: the oldest gives way, as in a flood
            // past kMaxGreeting, so silent peers cannot keep a node out by holding them all.
            ::close(pending.front().fd);
            pending.erase(pending.begin());
            report(e, true);
            continue;
          }
          report(e, false);
          std::this_thread::sleep_for(std::chrono::milliseconds(50));
          break;
        }
        // Heard at once: a node sends its greeting as it connects, so it is bound here, before
        // any silent peer's turn; only a peer that has not spoken yet waits in `pending`.
        Greeting g{fd, std::chrono::steady_clock::now() + kBindTimeout, 0, {}};
        if (const Heard heard = hear(g); heard != Heard::kWaiting) {
          finish(g, heard);
          continue;
        }
        if (pending.size() >= kMaxGreeting) {  // a flood: the oldest silent peer gives way
          ::close(pending.front().fd);
          pending.erase(pending.begin());
        }
        pending.push_back(g);
      }
    }
  }
  for (const Greeting& g : pending) ::close(g.fd);  // stopped: closed unbound
}

void ResultsListener::greeted(int fd, const char* hello) {
  if (std::memcmp(hello, kResultsMagic, sizeof kResultsMagic) != 0) {
    ::close(fd);  // not a node's results connection
    return;
  }
  const std::string_view nonce(hello + sizeof kResultsMagic, kNonceBytes);
  std::shared_ptr<WorkerStream> stream;
  {
    base::MutexLock lock(mu_);
    // Every offer is compared in full (constant time per offer): a wrong guess learns nothing
    // of how close it came. A nonce binds once: it is withdrawn as it is used.
    auto found = offered_.end();
    for (auto it = offered_.begin(); it != offered_.end(); ++it) {
      if (token_equal(nonce, it->first) && found == offered_.end()) found = it;
    }
    if (found != offered_.end()) {
      stream = found->second.lock();
      offered_.erase(found);
    }
  }
  // Bound: blocking again, writes block as long as the node reads.
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  if (!stream || !stream->bind_results(fd)) ::close(fd);  // bind_results owns fd when it says yes
}

}  // namespace stoker::remote
