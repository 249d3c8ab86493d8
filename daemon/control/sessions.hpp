// The control socket's clients (iceoryx keeps RouDi's loop and its ProcessManager apart; this
// is the second): one Session per connection, from accept to eviction. Sessions owns them all
// and everything said to one client: the handshake (Hello, Welcome, the job's segment as a
// descriptor, a device ring), acquire and release, delivery of ready batches, queued sends,
// and the eviction of a client that misbehaves, stops releasing or goes silent.
//
// A client is either a consumer (Hello accepted: it owns one (rank, reader) of one job) or a
// status/command reader. Anything malformed from a client evicts that client only.
//
// Threads: the control thread only (ControlServer's loop), so nothing here takes a lock.
// Invariant: a Session's fd is in `sessions_` exactly while it is registered with the epoll
// set; a doomed fd stays in both until evict_doomed() (so its events of this turn are safe).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <sys/types.h>
#include <string>
#include <vector>

#include "control/forward.hpp"
#include "control/peer_access.hpp"
#include "control/settings.hpp"
#include "stoker/proto/control.hpp"

namespace stoker::control {

// " reader K" in log lines of fan-out jobs (nothing for a job with one reader per rank).
std::string reader_suffix(const job::Job* job, std::uint32_t reader);

struct Session {
  int fd = -1;
  job::Job* job = nullptr;  // set once Hello is accepted
  std::uint32_t rank = 0;
  std::uint32_t reader = 0;  // of the rank's `readers` (fan-out)
  bool acquire_pending = false;     // Acquire mode (2.0..2.4 clients): one batch asked for
  // Announce mode (2.5, kHelloAnnounce): batches are sent unasked while announced - taken <
  // window. `taken` only grows: by a Release (the batch's announcement, and every earlier one,
  // was taken) or a Credit (clamped to `announced`). slot_seq[s]: the announcement number of
  // slot s's latest announcement to this session.
  std::uint32_t window = 0;
  std::uint64_t announced = 0, taken = 0;
  std::vector<std::uint64_t> slot_seq;
  // Acquire mode: the batch whose reply could not be sent (the client hung up or stopped
  // reading). take_ready() leased it and moved the reader past it; the reader never saw it,
  // so it goes back as untaken when the session ends.
  std::optional<std::uint32_t> unsent_slot;
  std::uint32_t pid = 0;
  bool spoke = false;                // sent at least one valid message
  std::int32_t peer_pid = 0;         // SO_PEERCRED: trusted, unlike Hello's pid
  std::uint32_t peer_uid = ~0u;      // SO_PEERCRED
  std::uint32_t peer_gid = ~0u;      // SO_PEERCRED
  std::vector<gid_t> peer_groups;    // SO_PEERGROUPS, at accept (never read from /proc later)
  std::uint64_t token = 0;           // unique per connection (fds are reused)
  bool command_pending = false;      // a command's reply is owed once loaded (define_job, reload)
  std::shared_ptr<delivery::DeviceRing> device;  // device consumers: the ring they map
  std::shared_ptr<delivery::PeerProcess> peer;   // device consumers: liveness of their process
  std::chrono::steady_clock::time_point connected_at;
  std::chrono::steady_clock::time_point last_message;  // for the idle timeout
  // Messages that did not fit the socket buffer yet (a status reply for thousands of
  // consumers is many messages); sent in order as the socket drains (EPOLLOUT).
  std::deque<std::vector<std::uint8_t>> outbox;
  std::size_t outbox_bytes = 0;
  // A send to it failed (it hung up, or stopped reading): whatever it sent before that - its
  // last releases and credits - is read before it is evicted.
  bool send_failed = false;
};

// What a client's messages ask of the rest of the control socket: commands and the status
// document (commands.hpp, status_report.hpp) and the trainer wait a release reports
// (telemetry.hpp). Set once before the loop runs.
struct SessionHandlers {
  // A Command message (header included, its size already checked); false: evict the client.
  std::function<bool(Session&, const std::uint8_t*, std::size_t)> command;
  // A StatusQuery; false: evict the client.
  std::function<bool(Session&)> status;
  // After a valid release: the wait it reported (none from a 2.0..2.2 client).
  std::function<void(const Session&, std::optional<std::uint64_t>)> released;
};

class Sessions {
 public:
  // `epoll_fd`: the loop's epoll set, which every session's fd joins (not owned).
  Sessions(int epoll_fd, jobs::JobTable& jobs, delivery::DeviceDelivery& delivery, std::uint64_t daemon_generation,
           const Limits& limits);
  ~Sessions();  // close_all()
  Sessions(const Sessions&) = delete;
  Sessions& operator=(const Sessions&) = delete;

  void set_handlers(SessionHandlers handlers);  // every one set

  // --- the table ---
  // An accepted, admitted connection: reads its peer's credentials and watches it.
  // An admitted connection, with the credentials the gate read at accept (peer_access.hpp).
  void add(int fd, const PeerCredentials& peer);
  std::size_t size() const { return sessions_.size(); }
  // The connection `fd` if it is still the one that got `token` (fds are reused), else null.
  Session* find(int fd, std::uint64_t token);
  // Whether any consumer is attached to `job`, and how many.
  bool serves(const job::Job* job) const;
  std::size_t consumers_of(const job::Job* job) const;
  // Closed at the next evict_doomed() (after the current batch of events).
  void doom(int fd) { doomed_.push_back(fd); }
  void evict_doomed();
  // Detaches every consumer and closes every connection (shutdown).
  void close_all();

  // --- events from the loop ---
  void on_event(int fd, std::uint32_t epoll_events);

  // --- housekeeping, once a turn ---
  // Consumers waiting for a batch get it (or are told their job failed or drained).
  void deliver_ready();
  // Connections that never spoke (handshake_timeout_s), and idle ones attached to no job.
  void close_silent_connections();
  // Consumers holding a batch longer than their job's lease_timeout_s.
  void evict_stuck_consumers();
  // Consumers of a job draining for longer than `drain_timeout_s` are told and evicted.
  void evict_overdue_drains(double drain_timeout_s);

  // --- sending (session_send.cpp) ---
  void send_error(Session& s, proto::ErrorCode code, const std::string& text);
  bool send_all(Session& s, const void* data, std::size_t n);
  // `json` in as many messages of `type` as it takes (kStatusMoreFollows on all but the last).
  bool send_json(Session& s, const std::string& json, proto::MsgType type);

 private:
  // Reads and handles its messages until none is queued (or max_messages were read).
  void on_readable(Session& s, std::size_t max_messages = SIZE_MAX);
  // The protocol (session_messages.cpp): false: evict.
  bool handle_message(Session& s, const std::uint8_t* data, std::size_t n);
  bool handle_hello(Session& s, const proto::HelloMsg& m);
  // Sends queued messages while the socket takes them; false when the peer is gone or its
  // backlog exceeds the bound. Watches EPOLLOUT exactly while the outbox is not empty.
  bool flush(Session& s);
  // One message with a descriptor attached (the Welcome and its job's segment).
  bool send_with_fd(Session& s, const void* data, std::size_t n, int fd);
  void evict(int fd, const char* why);

  const int epoll_fd_;
  jobs::JobTable& jobs_;
  delivery::DeviceDelivery& delivery_;
  const std::uint64_t daemon_generation_;
  const Limits& limits_;  // ControlServer's, which outlives this
  SessionHandlers handlers_;
  std::map<int, Session> sessions_;
  std::vector<int> doomed_;  // fds to close after the current event batch
  std::uint64_t next_token_ = 1;
};

}  // namespace stoker::control
