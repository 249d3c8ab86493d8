#include "control/metrics_http.hpp"

#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <list>
#include <stdexcept>
#include <string_view>

#include <boost/asio/buffer.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/address.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>

#include "log/log.hpp"
#include "control/metrics_http_request.hpp"

namespace stoker::control {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;
using boost::system::error_code;

static_assert(MetricsHttpServer::kMaxRequestBytes == kMetricsMaxRequestBytes);

// The server's thread: the io_context and everything only that thread touches once it runs.
// Invariants: `conns` holds every open connection and at most kMaxClients of them; the
// acceptor is waited on only while one more could be taken (there is room, or a connection
// that may be closed for it) and no EMFILE back-off runs, so a full house is never spun on.
class MetricsHttpServer::Loop {
 public:
  explicit Loop(MetricsHttpServer& owner) : owner(owner) {}

  void arm_accept();
  void accept_ready();
  void close_all();
  // The connection to close when all are taken and another arrives: the oldest still sending
  // its head, else the oldest lingering one; null when every one is writing a response.
  std::shared_ptr<Connection> eviction_candidate() const;
  bool room() const { return conns.size() < kMaxClients || eviction_candidate() != nullptr; }

  MetricsHttpServer& owner;
  asio::io_context io{1};  // first: destroyed last, after the sockets and timers below
  tcp::acceptor acceptor{io};
  tcp protocol = tcp::v4();  // the acceptor's (and so every accepted socket's)
  asio::steady_timer accept_pause{io};
  Clock::time_point accept_paused_until{};
  bool waiting = false;  // an async_wait on the acceptor (or the back-off timer) is pending
  bool stopping = false;
  std::list<std::shared_ptr<Connection>> conns;
};

// One connection. States in order: reading the request head, writing the response, lingering
// (response handed to the kernel and SHUT_WR sent; the peer's input is discarded until it
// closes). `deadline` is that of the current state; its timer closes the connection.
class MetricsHttpServer::Connection : public std::enable_shared_from_this<Connection> {
 public:
  enum class State { kHead, kResponding, kLingering, kClosed };

  Connection(Loop& loop, tcp::socket socket)
      : loop_(loop), socket_(std::move(socket)), timer_(loop.io), accepted_(Clock::now()) {}

  void start() {
    set_deadline(accepted_ + std::chrono::milliseconds(kHeadTimeoutMs));
    read_head();  // a scraper's request is usually queued already
  }
  // Closes now. A lingering connection first reads what is already queued (unless the peer
  // misbehaved): a close with unread input resets the connection and loses the response's
  // tail still in flight.
  void close(bool drain = true);

  State state() const { return state_; }
  Clock::time_point accepted() const { return accepted_; }

 private:
  void set_deadline(Clock::time_point at);
  void read_head();
  void respond(const MetricsAnswer& answer);
  void linger();
  void keep_discarding();
  // Reads and throws away what is queued, at most `budget` bytes (a peer that never stops
  // sending cannot hold the thread). False at the peer's EOF or an error.
  bool discard_queued(std::size_t budget = 256 * 1024);

  Loop& loop_;
  tcp::socket socket_;
  asio::steady_timer timer_;
  const Clock::time_point accepted_;
  State state_ = State::kHead;
  MetricsRequestReader reader_;
  std::shared_ptr<const std::string> document_;  // the one answered with, kept until written
  MetricsReply reply_;
  std::array<char, 4096> scratch_;
};

namespace {

bool would_block(const error_code& ec) {
  return ec == asio::error::would_block || ec == asio::error::try_again || ec == asio::error::interrupted;
}

}  // namespace

void MetricsHttpServer::Connection::set_deadline(Clock::time_point at) {
  timer_.expires_at(at);  // cancels the previous wait (its handler sees operation_aborted)
  timer_.async_wait([self = shared_from_this()](const error_code& ec) {
    // A wait that had already fired when the deadline moved still completes without an error:
    // only a deadline that has really passed closes the connection.
    if (!ec && self->timer_.expiry() <= asio::steady_timer::clock_type::now()) self->close(/*drain=*/true);
  });
}

void MetricsHttpServer::Connection::read_head() {
  for (;;) {
    error_code ec;
    const std::size_t n = socket_.read_some(asio::buffer(scratch_.data(), 1024), ec);  // non-blocking socket
    if (would_block(ec)) {
      socket_.async_wait(tcp::socket::wait_read, [self = shared_from_this()](const error_code& wec) {
        if (self->state_ != State::kHead) return;
        if (wec) return self->close(false);
        self->read_head();
      });
      return;
    }
    if (ec) return close(false);  // gone before asking (EOF included)
    if (auto answer = reader_.feed(std::string_view(scratch_.data(), n))) return respond(*answer);
  }
}

void MetricsHttpServer::Connection::respond(const MetricsAnswer& answer) {
  document_ = loop_.owner.current();
  reply_ = metrics_reply(answer, *document_);
  loop_.owner.requests_++;
  state_ = State::kResponding;
  set_deadline(accepted_ + std::chrono::milliseconds(kDeadlineMs));
  const std::array<asio::const_buffer, 2> bytes{asio::buffer(reply_.head),
                                                asio::buffer(reply_.body.data(), reply_.body.size())};
  asio::async_write(socket_, bytes, [self = shared_from_this()](const error_code& ec, std::size_t) {
    if (self->state_ != State::kResponding) return;
    if (ec) return self->close(false);
    self->linger();
  });
}

// The whole response is with the kernel: half-close, then discard input until the peer closes.
void MetricsHttpServer::Connection::linger() {
  error_code ignored;
  socket_.shutdown(tcp::socket::shutdown_send, ignored);
  document_.reset();
  reply_ = MetricsReply{};
  state_ = State::kLingering;
  set_deadline(Clock::now() + std::chrono::milliseconds(kLingerMs));
  loop_.arm_accept();  // this connection may now be closed to make room
  keep_discarding();
}

// Discards what the peer sends until it closes (or the linger deadline closes it).
void MetricsHttpServer::Connection::keep_discarding() {
  if (!discard_queued()) return close(false);
  socket_.async_wait(tcp::socket::wait_read, [self = shared_from_this()](const error_code& ec) {
    if (self->state_ != State::kLingering) return;
    if (ec) return self->close(false);
    self->keep_discarding();
  });
}

bool MetricsHttpServer::Connection::discard_queued(std::size_t budget) {
  while (budget > 0) {
    error_code ec;
    const std::size_t n = socket_.read_some(asio::buffer(scratch_), ec);
    if (would_block(ec)) return true;
    if (ec) return false;
    budget -= std::min(budget, n);
  }
  return true;
}

void MetricsHttpServer::Connection::close(bool drain) {
  if (state_ == State::kClosed) return;
  if (drain && state_ == State::kLingering) discard_queued();
  state_ = State::kClosed;
  error_code ignored;
  socket_.close(ignored);
  timer_.cancel();
  loop_.conns.remove(shared_from_this());
  loop_.arm_accept();
}

std::shared_ptr<MetricsHttpServer::Connection> MetricsHttpServer::Loop::eviction_candidate() const {
  for (const auto want : {Connection::State::kHead, Connection::State::kLingering}) {
    std::shared_ptr<Connection> best;
    for (const auto& c : conns) {
      if (c->state() == want && (best == nullptr || c->accepted() < best->accepted())) best = c;
    }
    if (best != nullptr) return best;
  }
  return nullptr;
}

void MetricsHttpServer::Loop::arm_accept() {
  if (waiting || stopping || !room()) return;
  waiting = true;
  if (Clock::now() < accept_paused_until) {
    accept_pause.expires_at(accept_paused_until);
    accept_pause.async_wait([this](const error_code& ec) {
      waiting = false;
      if (!ec) arm_accept();
    });
    return;
  }
  acceptor.async_wait(tcp::acceptor::wait_read, [this](const error_code& ec) {
    waiting = false;
    if (ec == asio::error::operation_aborted || stopping) return;
    if (ec) {
      stoker::log::error("metrics endpoint: waiting for connections: {}; it stops serving", ec.message());
      return;
    }
    accept_ready();
    arm_accept();
  });
}

// Empties the backlog (bounded per turn), making room by eviction when all are taken.
void MetricsHttpServer::Loop::accept_ready() {
  for (std::size_t taken = 0; taken < 4 * kMaxClients; ++taken) {
    if (conns.size() >= kMaxClients) {
      const auto victim = eviction_candidate();
      if (victim == nullptr) break;
      victim->close();
    }
    // accept4 rather than acceptor.accept(): the socket must be close-on-exec from the start.
    const int fd = ::accept4(acceptor.native_handle(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) {
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
        accept_paused_until = Clock::now() + std::chrono::milliseconds(100);
      }
      break;
    }
    error_code ec;
    tcp::socket socket(io);
    socket.assign(protocol, fd, ec);
    if (ec) {
      ::close(fd);
      break;
    }
    socket.non_blocking(true, ec);
    auto c = std::make_shared<Connection>(*this, std::move(socket));
    conns.push_back(c);
    c->start();
  }
}

void MetricsHttpServer::Loop::close_all() {
  stopping = true;
  error_code ignored;
  acceptor.close(ignored);
  accept_pause.cancel();
  while (!conns.empty()) conns.front()->close(false);
}

MetricsHttpServer::MetricsHttpServer(const std::string& host, std::uint16_t port)
    : document_(std::make_shared<const std::string>()), loop_(std::make_unique<Loop>(*this)) {
  error_code ec;
  const asio::ip::address ip = asio::ip::make_address(host, ec);
  if (ec) throw std::runtime_error("server.metrics: '" + host + "' is not a numeric address");
  const auto shown = [&](std::uint16_t p) { return (ip.is_v6() ? "[" + host + "]" : host) + ":" + std::to_string(p); };
  const tcp::endpoint wanted(ip, port);
  // Opened here (not by acceptor.open) so that it is close-on-exec and non-blocking from the start.
  const int fd = ::socket(ip.is_v6() ? AF_INET6 : AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) throw std::runtime_error("server.metrics: socket(): " + std::string(std::strerror(errno)));
  tcp::acceptor& acceptor = loop_->acceptor;
  loop_->protocol = wanted.protocol();
  acceptor.assign(wanted.protocol(), fd, ec);
  if (ec) {
    ::close(fd);
    throw std::runtime_error("server.metrics: socket(): " + ec.message());
  }
  acceptor.set_option(tcp::acceptor::reuse_address(true), ec);
  acceptor.bind(wanted, ec);
  if (!ec) acceptor.listen(64, ec);
  if (ec) throw std::runtime_error("server.metrics: cannot listen on " + shown(port) + ": " + ec.message());
  address_ = shown(acceptor.local_endpoint(ec).port());
  acceptor.non_blocking(true, ec);
  loop_->arm_accept();
  thread_ = std::thread([this] {
    try {
      loop_->io.run();
    } catch (const std::exception& e) {
      stoker::log::error("metrics endpoint: {}; it stops serving", e.what());
    }
  });
}

MetricsHttpServer::~MetricsHttpServer() {
  asio::post(loop_->io, [this] {
    loop_->close_all();
    loop_->io.stop();
  });
  thread_.join();
  // Handlers still queued (aborted waits) hold the last references to closed connections;
  // destroying the loop destroys them with its io_context.
  loop_.reset();
}

void MetricsHttpServer::publish(std::string text) {
  auto doc = std::make_shared<const std::string>(std::move(text));
  base::MutexLock lock(mu_);
  document_ = std::move(doc);
}

std::shared_ptr<const std::string> MetricsHttpServer::current() const {
  base::MutexLock lock(mu_);
  return document_;
}

}  // namespace stoker::control
