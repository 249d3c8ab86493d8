#include "connection.hpp"
#include "segment_check.hpp"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <grp.h>
#include <cstring>
#include <poll.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <fcntl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>



namespace stoker::client {
namespace {

// A daemon that accepted the connection answers Hello at once; this only bounds a hung one.
constexpr int kHandshakeTimeoutMs = 30000;

std::string version_text(std::uint16_t major, std::uint16_t minor) {
  return std::to_string(major) + "." + std::to_string(minor);
}

// Permission denied on the socket or its folder: say whose it is and how to get in.
std::string access_denied_text(const std::string& socket_path) {
  std::string text = "permission denied on stokerd's socket " + socket_path;
  struct stat st {};
  if (::stat(socket_path.c_str(), &st) == 0) {
    char buf[4096];
    group gr{};
    group* g = nullptr;
    ::getgrgid_r(st.st_gid, &gr, buf, sizeof buf, &g);  // reentrant: trainers connect from many threads
    const std::string gname = g != nullptr ? g->gr_name : std::to_string(st.st_gid);
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
    text += " (mode " + std::string(mode) + ", uid " + std::to_string(st.st_uid) + ", group " + gname + ")";
    text += (st.st_mode & 0060) == 0060
                ? ": members of group '" + gname + "' may connect; ask to be added, then start a new login session"
                : ": only its owner may connect; the daemon's config can let a group in (server.group)";
  } else {
    text += ": its folder is closed to this user; the daemon's config can let a group in (server.group)";
  }
  return text;
}

}  // namespace

void send_message(int fd, const void* msg, std::size_t n, const std::string& socket_path) {
  const ssize_t w = ::send(fd, msg, n, MSG_NOSIGNAL);
  if (w != static_cast<ssize_t>(n)) {
    const int e = errno;
    // The daemon may have said why before it hung up (an eviction, a lease timeout): that
    // message is still queued here and says more than "broken pipe".
    alignas(8) std::uint8_t buf[sizeof(proto::ErrorMsg)];
    const ssize_t r = ::recv(fd, buf, sizeof buf, MSG_DONTWAIT);
    if (r >= static_cast<ssize_t>(sizeof(proto::MessageHeader))) {
      proto::MessageHeader h;
      std::memcpy(&h, buf, sizeof h);
      if (h.magic == proto::kControlMagic && static_cast<proto::MsgType>(h.type) == proto::MsgType::kError) {
        throw_daemon_error(buf, static_cast<std::size_t>(r));
      }
    }
    throw Failure{STOKER_ERR_DISCONNECTED, "lost the connection to stokerd at " + socket_path + ": " + std::strerror(e)};
  }
}

int connect_control_socket(const std::string& socket_path) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (socket_path.empty() || socket_path.size() >= sizeof(addr.sun_path)) {
    throw Failure{STOKER_ERR_INVALID_ARGUMENT, "bad socket path '" + socket_path + "'"};
  }
  std::memcpy(addr.sun_path, socket_path.c_str(), socket_path.size() + 1);
  const int fd = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  if (fd < 0) throw Failure{STOKER_ERR_INTERNAL, std::string("socket(): ") + std::strerror(errno)};
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    const int e = errno;
    ::close(fd);
    if (e == EACCES) throw Failure{STOKER_ERR_REFUSED, access_denied_text(socket_path)};
    throw Failure{STOKER_ERR_NO_DAEMON,
                  "no stokerd at " + socket_path + " (" + std::strerror(e) +
                      "): start it with `stokerd --config <file>` or point STOKER_SOCKET at "
                      "its socket"};
  }
  return fd;
}

std::size_t recv_message(int fd, void* buf, std::size_t cap, int timeout_ms,
                         const std::string& socket_path, int* fd_out) {
  if (fd_out != nullptr) *fd_out = -1;
  pollfd p{fd, POLLIN, 0};
  for (;;) {
    const int r = ::poll(&p, 1, timeout_ms);
    if (r < 0 && errno == EINTR) continue;
    if (r == 0) throw Failure{STOKER_ERR_TIMEOUT, "no batch from stokerd within " +
                                                      std::to_string(timeout_ms) + " ms"};
    break;
  }
  // recvmsg: a Welcome carries the job's segment as a descriptor. One that was not asked
  // for is closed at once (a descriptor in this process is a resource the daemon chose).
  iovec iov{buf, cap};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * 4)];
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  ssize_t n = ::recvmsg(fd, &msg, MSG_TRUNC | MSG_CMSG_CLOEXEC);
  if (n < 0 && errno == ECONNRESET) {
    // A daemon that refuses a connection says why, then closes it; if our Hello was still
    // unread in its queue, the kernel reports the reset before the message queued ahead of
    // it (a datagram-style socket returns the pending error first). The reason is still there.
    msg.msg_controllen = sizeof control;
    const ssize_t again = ::recvmsg(fd, &msg, MSG_TRUNC | MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
    if (again > 0) {
      n = again;
    } else {
      errno = ECONNRESET;
    }
  }
  if (n > 0) {
    for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
      if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
      const std::size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      for (std::size_t i = 0; i < count; ++i) {
        int received = -1;
        std::memcpy(&received, CMSG_DATA(c) + i * sizeof(int), sizeof received);
        if (fd_out != nullptr && *fd_out < 0) {
          *fd_out = received;
        } else {
          ::close(received);
        }
      }
    }
  }
  if (n == 0 || (n < 0 && (errno == ECONNRESET || errno == EPIPE))) {
    throw Failure{STOKER_ERR_DISCONNECTED,
                  "stokerd at " + socket_path +
                      " closed the connection (the daemon stopped, restarted or evicted this "
                      "client)"};
  }
  if (n < 0) throw Failure{STOKER_ERR_DISCONNECTED, std::string("recv: ") + std::strerror(errno)};
  if (static_cast<std::size_t>(n) > cap || static_cast<std::size_t>(n) < sizeof(proto::MessageHeader)) {
    throw Failure{STOKER_ERR_PROTOCOL, "stokerd sent a message of unexpected size " + std::to_string(n)};
  }
  return static_cast<std::size_t>(n);
}

void throw_daemon_error(const void* data, std::size_t n) {
  proto::ErrorMsg m;
  std::memset(&m, 0, sizeof m);
  std::memcpy(&m, data, std::min(n, sizeof m));
  m.message[sizeof m.message - 1] = '\0';
  stoker_status st = STOKER_ERR_PROTOCOL;
  switch (static_cast<proto::ErrorCode>(m.code)) {
    case proto::ErrorCode::kVersionMismatch: st = STOKER_ERR_VERSION; break;
    case proto::ErrorCode::kUnknownJob:
    case proto::ErrorCode::kBadRank:
    case proto::ErrorCode::kRankBusy:
    case proto::ErrorCode::kOutOfStep:
    case proto::ErrorCode::kNoDevice:
    case proto::ErrorCode::kTooManyConnections:
    case proto::ErrorCode::kAccessDenied: st = STOKER_ERR_REFUSED; break;
    case proto::ErrorCode::kJobFailed: st = STOKER_ERR_JOB_FAILED; break;
    case proto::ErrorCode::kLeaseTimeout:
    // Drained (a reload changed or removed the job, stokerctl drain): dropped, like a daemon
    // restart, so a loader that reconnects finds a restarted job under the same name.
    case proto::ErrorCode::kJobDrained: st = STOKER_ERR_DISCONNECTED; break;
    default: break;
  }
  throw Failure{st, std::string("stokerd: ") + m.message};
}

Connection::Connection(const std::string& socket_path, const std::string& job, std::uint32_t rank,
                       std::uint32_t reader, std::uint64_t start_epoch, std::uint64_t start_batch,
                       int device_ordinal, bool map_writable, bool split_rank, std::uint64_t start_position)
    : socket_path_(socket_path) {
  if (job.empty() || job.size() >= 64) {
    throw Failure{STOKER_ERR_INVALID_ARGUMENT, "job name must be 1..63 characters"};
  }
  // The device is resolved before connecting: a process that cannot use one is told so
  // without bothering the daemon.
  std::shared_ptr<device::Backend> backend;
  device::Uuid uuid{};
  if (device_ordinal >= 0) {
    backend = importer_backend();
    const device::DeviceList list = backend->devices();
    const auto& devs = list.devices;
    const std::string& why = list.skipped;
    if (device_ordinal >= static_cast<int>(devs.size())) {
      throw Failure{STOKER_ERR_INVALID_ARGUMENT,
                    "device cuda:" + std::to_string(device_ordinal) + " does not exist: this process sees " +
                        std::to_string(devs.size()) + " device(s) (" +
                        device::to_string(backend->kind()) + (why.empty() ? "" : ": " + why) + ")"};
    }
    uuid = devs[device_ordinal].uuid;
    if (base::Status open = backend->open_device(device_ordinal); !open) {
      throw Failure{STOKER_ERR_REFUSED,
                    "cannot use device cuda:" + std::to_string(device_ordinal) + ": " + open.message()};
    }
  }
  fd_ = connect_control_socket(socket_path_);
  try {
    auto hello = proto::make_message<proto::HelloMsg>(proto::MsgType::kHello);
    proto::copy_cstr(hello.job, job.c_str());
    hello.rank = rank;
    hello.reader = reader;
    hello.flags = (backend ? proto::kHelloWantDevice : 0) | (split_rank ? proto::kHelloSplitRank : 0);
    if (backend) {
      std::memcpy(hello.device_uuid, uuid.data(), 16);
      hello.device_backend = static_cast<std::uint32_t>(backend->kind());
    }
    hello.start_epoch = start_epoch;
    hello.start_batch = start_batch;
    if (start_position > 0) {
      hello.flags |= proto::kHelloStartPosition;
      hello.start_position = start_position;
    }
    hello.pid = static_cast<std::uint32_t>(::getpid());
    // 2.5: ask for announcements (a 2.4 daemon ignores the flag; its Welcome says so). The
    // window is the whole ring (the daemon clamps it to `prefetch`): every batch the ring has
    // ready is this consumer's to take anyway. STOKER_ACQUIRE=1 keeps the 2.0 round trip.
    const char* acquire_env = std::getenv("STOKER_ACQUIRE");
    const bool want_announce = acquire_env == nullptr || std::string(acquire_env) != "1";
    if (want_announce) {
      hello.flags |= proto::kHelloAnnounce;
      hello.window = 0xffffffffu;
    }
    send_message(fd_, &hello, sizeof hello, socket_path_);

    alignas(8) std::uint8_t buf[1024];
    int segment_fd = -1;
    const std::size_t n = recv_message(fd_, buf, sizeof buf, kHandshakeTimeoutMs, socket_path_, &segment_fd);
    struct FdCloser {
      int& fd;
      ~FdCloser() {
        if (fd >= 0) ::close(fd);
      }
    } close_segment_fd{segment_fd};
    proto::MessageHeader h;
    std::memcpy(&h, buf, sizeof h);
    if (h.magic != proto::kControlMagic) throw Failure{STOKER_ERR_PROTOCOL, "not a stokerd socket"};
    if (static_cast<proto::MsgType>(h.type) == proto::MsgType::kError) throw_daemon_error(buf, n);
    if (h.proto_major != proto::kProtoMajor) {
      throw Failure{STOKER_ERR_VERSION, "stokerd speaks protocol " +
                                            version_text(h.proto_major, h.proto_minor) +
                                            ", this libstoker speaks " +
                                            version_text(proto::kProtoMajor, proto::kProtoMinor)};
    }
    if (static_cast<proto::MsgType>(h.type) != proto::MsgType::kWelcome || n != sizeof(proto::WelcomeMsg)) {
      throw Failure{STOKER_ERR_PROTOCOL, "unexpected reply to hello"};
    }
    if (start_position > 0 && h.proto_minor < proto::kStartPositionMinor) {
      // An older daemon ignores the position and would serve the ordinary split: refuse.
      throw Failure{STOKER_ERR_VERSION, "start position " + std::to_string(start_position) +
                                            " (elastic resume) needs stokerd protocol " +
                                            version_text(proto::kProtoMajor, proto::kStartPositionMinor) +
                                            " or later; this stokerd speaks " +
                                            version_text(h.proto_major, h.proto_minor)};
    }
    proto::WelcomeMsg w;
    std::memcpy(&w, buf, sizeof w);
    w.segment_name[sizeof w.segment_name - 1] = '\0';

    // The segment is a sealed memfd (its size can never change, so no access within it can
    // fault): checked with fstat before mapping.
    if (segment_fd < 0) throw Failure{STOKER_ERR_PROTOCOL, "stokerd sent no shared memory with its welcome"};
    struct stat st {};
    if (::fstat(segment_fd, &st) != 0 || static_cast<std::uint64_t>(st.st_size) < w.segment_size ||
        w.segment_size < sizeof(proto::SegmentHeader)) {
      throw Failure{STOKER_ERR_PROTOCOL, "shared memory segment is smaller than announced"};
    }
    const int seals = ::fcntl(segment_fd, F_GET_SEALS);
    if (seals < 0 || (seals & F_SEAL_SHRINK) == 0) {
      throw Failure{STOKER_ERR_PROTOCOL, "stokerd's shared memory is not sealed against shrinking"};
    }
    // Fan-out: the readers of a rank share each batch's bytes, so none may write them.
    if (w.readers > 1) map_writable = false;
    void* base = ::mmap(nullptr, w.segment_size, PROT_READ | (map_writable ? PROT_WRITE : 0), MAP_SHARED,
                        segment_fd, 0);
    if (base == MAP_FAILED) {
      throw Failure{STOKER_ERR_INTERNAL, std::string("cannot map shared memory '") + w.segment_name +
                                             "': " + std::strerror(errno)};
    }
    region_.reset(base, w.segment_size);
    // The geometry is copied out of shared memory once, checked against the handshake, the
    // layout rules (proto::plan_segment) and the mapping's real size, and every address is
    // computed from this private copy from now on: nothing another process scribbles into
    // the header later can make this process read outside its mapping.
    proto::SegmentHeader hdr;
    std::memcpy(&hdr, region_.get_address(), sizeof hdr);
    base::Result<SegmentLayout> checked = check_segment(hdr, w, region_.get_size());
    if (!checked) {
      throw Failure{layout_is_readable(hdr) ? STOKER_ERR_PROTOCOL : STOKER_ERR_VERSION, checked.status().message()};
    }
    const SegmentLayout& layout = *checked;
    proto::RingHeader ring;
    std::memcpy(&ring, static_cast<const std::uint8_t*>(region_.get_address()) + layout.ring_entry_offset, sizeof ring);
    if (base::Status r = check_ring_entry(ring, layout, w); !r) throw Failure{STOKER_ERR_PROTOCOL, r.message()};
    const proto::BatchGeometry& g = layout.geometry;
    const proto::SegmentPlan& plan = layout.plan;
    const bool soft = layout.soft_labels;
    const std::uint64_t label_bytes = layout.label_bytes;
    const std::uint64_t first = layout.first_slot_offset;
    first_slot_ = static_cast<const std::uint8_t*>(region_.get_address()) + first;
    slot_stride_ = plan.slot_stride;
    payload_offset_ = plan.payload_offset;
    labels_offset_ = plan.labels_offset;
    ids_offset_ = plan.ids_offset;
    info_.batch_size = g.batch_size;
    info_.channels = g.channels;
    info_.height = g.height;
    info_.width = g.width;
    info_.dtype = static_cast<stoker_dtype>(g.dtype);
    info_.layout = static_cast<stoker_layout>(g.layout);
    info_.image_bytes = g.image_bytes;
    info_.samples_per_epoch = hdr.samples_per_epoch;
    info_.samples_per_rank = w.samples_per_rank;
    info_.batches_per_epoch = w.batches_per_epoch;
    info_.num_classes = hdr.num_classes;
    info_.label_dtype = soft ? static_cast<stoker_dtype>(hdr.label_dtype) : STOKER_INT64;
    info_.label_width = soft ? hdr.label_width : 1;
    info_.slot_count = w.slot_count;
    daemon_minor_ = h.proto_minor;
    announce_ = want_announce && h.proto_minor >= proto::kAnnounceMinor;
    slot_wait_ns_ = std::make_unique<std::atomic<std::uint64_t>[]>(w.slot_count);
    info_.readers = std::max<std::uint32_t>(w.readers, 1);  // 0 from a 2.0 daemon
    info_.reader = w.reader;
    // A 2.0 daemon leaves it zero: it served the rank that was asked for (no split there).
    info_.rank = w.readers != 0 ? w.rank : rank;
    info_.writable = map_writable ? 1 : 0;
    info_.daemon_generation = w.daemon_generation;
    info_.device_ordinal = -1;
    if (backend) {
      std::vector<std::uint8_t> dbuf(proto::kMaxMessageBytes);
      const std::size_t dn = recv_message(fd_, dbuf.data(), dbuf.size(), kHandshakeTimeoutMs, socket_path_);
      std::memcpy(&h, dbuf.data(), sizeof h);
      if (static_cast<proto::MsgType>(h.type) == proto::MsgType::kError) throw_daemon_error(dbuf.data(), dn);
      if (static_cast<proto::MsgType>(h.type) != proto::MsgType::kDeviceRing) {
        throw Failure{STOKER_ERR_PROTOCOL, "stokerd did not describe the device ring it granted"};
      }
      device_ = std::make_shared<DeviceMapping>(backend, device_ordinal, dbuf.data(), dn, w.slot_count,
                                                g.batch_size, label_bytes);
      info_.device_ordinal = device_ordinal;
      info_.device_dtype = static_cast<stoker_dtype>(device_->dtype());
      info_.device_backend = static_cast<std::uint32_t>(backend->kind());
      info_.device_normalized = device_->normalized() ? 1 : 0;
      info_.device_image_bytes = device_->image_bytes();
    }
  } catch (...) {
    ::close(fd_);
    fd_ = -1;
    throw;
  }
}

void Connection::Mapping::reset(void* addr, std::size_t len) {
  if (addr_ != nullptr) ::munmap(addr_, len_);
  addr_ = addr;
  len_ = len;
}

namespace {
void send_unmapped(int fd, std::uint64_t alloc_id, std::uint64_t generation) {
  auto u = proto::make_message<proto::UnmappedMsg>(proto::MsgType::kUnmapped);
  u.alloc_id = alloc_id;
  u.daemon_generation = generation;
  [[maybe_unused]] ssize_t w = ::send(fd, &u, sizeof u, MSG_NOSIGNAL);
}
}  // namespace

void Connection::pin_memory(int ordinal) {
  base::MutexLock lock(send_mu_);
  if (pinned_with_) return;
  auto backend = importer_backend();
  if (base::Status open = backend->open_device(ordinal); !open) {
    throw Failure{STOKER_ERR_INTERNAL,
                  "cannot pin the batch ring for device " + std::to_string(ordinal) + ": " + open.message()};
  }
  if (base::Status reg = backend->register_host(ordinal, region_.get_address(), region_.get_size(), true); !reg) {
    throw Failure{STOKER_ERR_INTERNAL,
                  "cannot pin the batch ring for device " + std::to_string(ordinal) + ": " + reg.message()};
  }
  pinned_with_ = std::move(backend);
  pinned_ordinal_ = ordinal;
}

Connection::~Connection() {
  // Unregistered before the mapping goes (region_ is unmapped after this body).
  if (pinned_with_) pinned_with_->unregister_host(pinned_ordinal_, region_.get_address());
  close();
  // The last batch of a closed connection is gone: close the device handles now and tell
  // stokerd on a fresh connection, so it can free the ring before this process exits.
  if (device_) {
    const std::uint64_t id = device_->alloc_id();
    device_.reset();
    try {
      const int fd = connect_control_socket(socket_path_);
      send_unmapped(fd, id, info_.daemon_generation);
      ::close(fd);
    } catch (...) {
      // No daemon (stopped or restarted): it freed the ring when it exited.
    }
  }
}

void Connection::close() {
  base::MutexLock lock(send_mu_);
  if (fd_ >= 0) {
    if (device_ && outstanding_.load() == 0) {
      const std::uint64_t id = device_->alloc_id();
      device_.reset();
      send_unmapped(fd_, id, info_.daemon_generation);
    }
    ::close(fd_);
    fd_ = -1;
  }
}

BatchView Connection::next(int timeout_ms) {
  // The trainer's wait: from this call until the batch is here, whatever way the call ends
  // (a timed-out call's time is added to the next batch's wait).
  const auto called = std::chrono::steady_clock::now();
  struct WaitClock {
    std::uint64_t& pending;
    std::chrono::steady_clock::time_point since;
    ~WaitClock() {
      pending += static_cast<std::uint64_t>(
          std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - since).count());
    }
  };
  int fd;
  bool on_device_ring;
  {
    base::MutexLock lock(send_mu_);
    fd = fd_;
    on_device_ring = device_ != nullptr;
    if (fd < 0) throw Failure{STOKER_ERR_DISCONNECTED, "client is closed"};
  }
  if (announce_) {
    // Announce mode: a batch already here is taken without a system call; else whatever the
    // socket holds is read in one go, and only then does the call wait.
    if (announced_.empty() && !deferred_) receive_announcements(fd);
    if (announced_.empty() && !deferred_) {
      if (taken_ != credited_) send_credit(fd);  // batches held, not released: reopen the window
      alignas(8) std::uint8_t buf[1024];
      std::size_t n = 0;
      {
        WaitClock clock{wait_pending_ns_, called};
        n = recv_message(fd, buf, sizeof buf, timeout_ms, socket_path_);
      }
      accept_announcement(buf, n);
      receive_announcements(fd);
    }
    if (announced_.empty()) throw *deferred_;
    return take_announced(on_device_ring);
  } else {
    {
      base::MutexLock lock(send_mu_);
      if (!acquire_outstanding_) {
        auto a = proto::make_message<proto::AcquireMsg>(proto::MsgType::kAcquire);
        send_message(fd, &a, sizeof a, socket_path_);
        acquire_outstanding_ = true;
      }
    }
    alignas(8) std::uint8_t buf[1024];
    std::size_t n = 0;
    {
      WaitClock clock{wait_pending_ns_, called};
      n = recv_message(fd, buf, sizeof buf, timeout_ms, socket_path_);
    }
    acquire_outstanding_ = false;
    return hand_out(parse_batch(buf, n), on_device_ring);
  }
}

bool Connection::try_next(BatchView* out) {
  int fd;
  bool on_device_ring;
  {
    base::MutexLock lock(send_mu_);
    fd = fd_;
    if (fd < 0) return false;  // next() says it is closed
    on_device_ring = device_ != nullptr;
  }
  if (!announce_) return false;
  if (announced_.empty() && !deferred_) receive_announcements(fd);  // never waits
  if (announced_.empty()) return false;
  *out = take_announced(on_device_ring);
  return true;
}

BatchView Connection::take_announced(bool on_device_ring) {
  const proto::BatchMsg m = announced_.front();  // the caller checked: not empty
  announced_.pop_front();
  ++taken_;
  return hand_out(m, on_device_ring);
}

BatchView Connection::hand_out(const proto::BatchMsg& m, bool on_device_ring) {
  // Addresses from the private geometry only (checked at attach; m.slot checked in parse_batch).
  const std::uint8_t* slot = first_slot_ + slot_stride_ * m.slot;
  const std::uint8_t* payload = slot + payload_offset_;
  BatchView v{};
  v.slot = m.slot;
  v.generation = m.generation;
  v.count = m.count;
  v.flags = m.flags;
  v.epoch = m.epoch;
  v.index = m.batch_index;
  v.images = payload;
  v.labels = payload + labels_offset_;
  v.ids = reinterpret_cast<const std::int64_t*>(payload + ids_offset_);
  v.on_device = on_device_ring && (m.flags & proto::kBatchOnDevice) != 0;
  slot_wait_ns_[m.slot].store(wait_pending_ns_, std::memory_order_relaxed);
  wait_pending_ns_ = 0;
  outstanding_++;
  return v;
}

proto::BatchMsg Connection::parse_batch(const std::uint8_t* buf, std::size_t n) const {
  proto::MessageHeader h;
  std::memcpy(&h, buf, sizeof h);
  if (static_cast<proto::MsgType>(h.type) == proto::MsgType::kError) throw_daemon_error(buf, n);
  if (h.magic != proto::kControlMagic || static_cast<proto::MsgType>(h.type) != proto::MsgType::kBatch ||
      n != sizeof(proto::BatchMsg)) {
    throw Failure{STOKER_ERR_PROTOCOL, "unexpected message type " + std::to_string(h.type)};
  }
  proto::BatchMsg m;
  std::memcpy(&m, buf, sizeof m);
  if (m.slot >= info_.slot_count || m.count > info_.batch_size) {
    throw Failure{STOKER_ERR_PROTOCOL, "stokerd announced an invalid slot"};
  }
  return m;
}

void Connection::accept_announcement(const std::uint8_t* buf, std::size_t n) {
  // Batches sent before an error (a drain, a failed job) are still the trainer's: the error
  // is kept and thrown once they are taken.
  try {
    announced_.push_back(parse_batch(buf, n));
  } catch (const Failure& f) {
    deferred_ = f;
  }
}

void Connection::receive_announcements(int fd) {
  // One recvmmsg for everything queued (the daemon sends at most the window ahead). No
  // control buffer: a descriptor sent now is dropped by the kernel, never installed here.
  constexpr unsigned kBurst = 16;
  alignas(8) std::uint8_t bufs[kBurst][sizeof(proto::ErrorMsg) + 64];
  iovec iov[kBurst];
  mmsghdr msgs[kBurst];
  while (!deferred_) {
    std::memset(msgs, 0, sizeof msgs);
    for (unsigned i = 0; i < kBurst; ++i) {
      iov[i] = {bufs[i], sizeof bufs[i]};
      msgs[i].msg_hdr.msg_iov = &iov[i];
      msgs[i].msg_hdr.msg_iovlen = 1;
    }
    const int got = ::recvmmsg(fd, msgs, kBurst, MSG_DONTWAIT, nullptr);
    if (got < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return;
      deferred_ = Failure{STOKER_ERR_DISCONNECTED, std::string("recv: ") + std::strerror(errno)};
      return;
    }
    for (int i = 0; i < got && !deferred_; ++i) {
      const std::size_t n = msgs[i].msg_len;
      if (n == 0) {
        deferred_ = Failure{STOKER_ERR_DISCONNECTED, "stokerd at " + socket_path_ +
                                                         " closed the connection (the daemon stopped, restarted or "
                                                         "evicted this client)"};
      } else if (n < sizeof(proto::MessageHeader) || (msgs[i].msg_hdr.msg_flags & MSG_TRUNC) != 0) {
        deferred_ = Failure{STOKER_ERR_PROTOCOL, "stokerd sent a message of unexpected size " + std::to_string(n)};
      } else {
        accept_announcement(bufs[i], n);
      }
    }
    if (static_cast<unsigned>(got) < kBurst) return;
  }
}

void Connection::send_credit(int fd) {
  auto c = proto::make_message<proto::CreditMsg>(proto::MsgType::kCredit);
  c.taken = taken_;
  base::MutexLock lock(send_mu_);
  if (fd_ != fd) throw Failure{STOKER_ERR_DISCONNECTED, "client is closed"};
  send_message(fd, &c, sizeof c, socket_path_);
  credited_ = taken_;
}

void Connection::release(std::uint32_t slot, std::uint32_t generation,
                         const device::StreamId* device_stream) {
  base::MutexLock lock(send_mu_);
  outstanding_--;
  if (device_stream != nullptr && device_) {
    // The fence goes on the GPU before the daemon hears of the release.
    if (!device_->release(slot, *device_stream).ok()) {
      // Without the fence the daemon could overwrite what a kernel still reads: keep the
      // slot (the daemon reclaims it when this connection ends).
      return;
    }
  }
  if (fd_ < 0) return;
  auto r = proto::make_message<proto::ReleaseMsg>(proto::MsgType::kRelease);
  r.slot = slot;
  r.generation = generation;
  r.wait_ns = slot < info_.slot_count ? slot_wait_ns_[slot].load(std::memory_order_relaxed) : 0;
  // A daemon older than 2.3 takes only the 24-byte Release (and would evict a longer one).
  const std::size_t size = daemon_minor_ >= proto::kReleaseWaitMinor ? sizeof r : proto::kReleaseV21Bytes;
  r.header.size = static_cast<std::uint32_t>(size);
  [[maybe_unused]] ssize_t w = ::send(fd_, &r, size, MSG_NOSIGNAL);
}

}  // namespace stoker::client
