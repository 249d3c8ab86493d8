// One consumer connection: the control socket plus a read-only mapping of the job's segment.
// Shared (std::shared_ptr) by the client handle and every outstanding batch, so a batch stays
// readable after the client is closed, and the mapping goes away with the last of them.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>

#include "device_mapping.hpp"
#include "base/mutex.hpp"
#include "stoker/proto/control.hpp"
#include "stoker/proto/layout.hpp"
#include "stoker/stoker.h"

namespace stoker::client {

// A failure with its C status; converted to stoker_status + thread-local text at the C API.
struct Failure {
  stoker_status status;
  std::string message;
};

struct BatchView {
  std::uint32_t slot, generation, count, flags;
  std::uint64_t epoch, index;
  const std::uint8_t* images;
  const void* labels;  // info().label_dtype: int64 class indices [count] or soft rows [count][label_width]
  const std::int64_t* ids;
  bool on_device;  // the daemon copied it to this consumer's device ring
};

class Connection {
 public:
  // Throws Failure.
  Connection(const std::string& socket_path, const std::string& job, std::uint32_t rank,
             std::uint32_t reader, std::uint64_t start_epoch, std::uint64_t start_batch,
             int device_ordinal = -1, bool map_writable = false, bool split_rank = false,
             std::uint64_t start_position = 0);
  ~Connection();

  // Throws Failure (STOKER_ERR_TIMEOUT leaves the request outstanding for the next call).
  BatchView next(int timeout_ms);
  // The next batch only if it was announced and is already here: taken from the buffer, or
  // when that is empty from what the socket holds (one recvmmsg that never waits). Sends
  // nothing, never waits, never throws. False when none is (nothing received, the Acquire
  // path, a closed connection, an error behind the received batches): next() tells those
  // apart. Same caller as next().
  bool try_next(BatchView* out);
  // Never throws; a closed connection makes it a no-op (the daemon reclaimed the slot).
  // `device_stream`: the stream the batch was acquired on, when it was (its release fence is
  // recorded there first).
  void release(std::uint32_t slot, std::uint32_t generation, const device::StreamId* device_stream = nullptr);
  // Closes the socket. Device mode: with no batch outstanding the device handles are closed
  // and stokerd is told so first; otherwise that happens when the last batch is gone.
  void close();
  const stoker_job_info& info() const { return info_; }
  // Registers the mapped segment with device `ordinal` (read-only page-locking); throws Failure.
  void pin_memory(int ordinal);
  // Device mode only (nullptr otherwise, and after close() with no batch outstanding).
  DeviceMapping* device() const {
    base::MutexLock lock(send_mu_);
    return device_.get();
  }

 private:
  std::string socket_path_;
  // Serializes sends and close against each other; next()'s receive runs unlocked on the
  // descriptor it read under the lock.
  mutable base::Mutex send_mu_;
  int fd_ STOKER_GUARDED_BY(send_mu_) = -1;
  bool acquire_outstanding_ = false; // only the next() caller touches it
  // Announce mode (protocol 2.5; only the next() caller touches these): batches the daemon
  // sent unasked, in order; an error or hang-up that came after them (thrown once they are
  // taken); announcements taken so far, and the count last sent in a Credit.
  bool announce_ = false;
  std::deque<proto::BatchMsg> announced_;
  std::optional<Failure> deferred_;
  std::uint64_t taken_ = 0, credited_ = 0;
  proto::BatchMsg parse_batch(const std::uint8_t* buf, std::size_t n) const;  // throws Failure
  void accept_announcement(const std::uint8_t* buf, std::size_t n);
  void receive_announcements(int fd);  // never waits
  // A taken announcement or Batch reply as the caller's view; counts it as outstanding.
  BatchView hand_out(const proto::BatchMsg& m, bool on_device_ring);
  // Takes the first announcement (announced_ is not empty): next()'s and try_next's hand-out.
  BatchView take_announced(bool on_device_ring);
  void send_credit(int fd);
  // Trainer wait (protocol 2.3): time spent inside next() until a batch came, summed over
  // calls that timed out before it; handed to the batch's slot, sent with its Release.
  std::uint64_t wait_pending_ns_ = 0;                         // only the next() caller
  std::unique_ptr<std::atomic<std::uint64_t>[]> slot_wait_ns_;  // per slot of this ring
  std::uint16_t daemon_minor_ = 0;  // Welcome's proto_minor: Release carries wait_ns from 2.3
  // This connection's mapping of the job's segment (a sealed memfd received with the Welcome).
  class Mapping {
   public:
    Mapping() = default;
    ~Mapping() { reset(nullptr, 0); }
    Mapping(const Mapping&) = delete;
    Mapping& operator=(const Mapping&) = delete;
    void reset(void* addr, std::size_t len);
    void* get_address() const { return addr_; }
    std::size_t get_size() const { return len_; }

   private:
    void* addr_ = nullptr;
    std::size_t len_ = 0;
  };
  Mapping region_;
  // This ring's geometry, copied and checked at attach; never re-read from shared memory.
  const std::uint8_t* first_slot_ = nullptr;
  std::uint64_t slot_stride_ = 0, payload_offset_ = 0, labels_offset_ = 0, ids_offset_ = 0;
  stoker_job_info info_{};
  // Set by the constructor (before the connection is shared).
  std::shared_ptr<DeviceMapping> device_ STOKER_GUARDED_BY(send_mu_);
  std::atomic<int> outstanding_{0};        // batches handed out and not released
  std::shared_ptr<device::Backend> pinned_with_;  // set while region_ is registered
  int pinned_ordinal_ = -1;
};

// Connects a SOCK_SEQPACKET socket; throws Failure with a hint when no daemon listens.
int connect_control_socket(const std::string& socket_path);

// Sends one message; when the daemon hung up, throws the error it left queued (a refusal at
// accept, an eviction) if there is one, else "lost the connection".
void send_message(int fd, const void* msg, std::size_t n, const std::string& socket_path);
// Receives one message with a timeout (<0: forever); throws Failure on EOF/timeout/error.
// `fd_out`: receives a descriptor sent with the message (-1 if none); others are closed.
std::size_t recv_message(int fd, void* buf, std::size_t cap, int timeout_ms,
                         const std::string& socket_path, int* fd_out = nullptr);
// Throws Failure for an ErrorMsg, mapping daemon error codes to stoker_status.
[[noreturn]] void throw_daemon_error(const void* msg, std::size_t n);

}  // namespace stoker::client
