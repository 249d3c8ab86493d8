// The control protocol as one session sees it: every message is validated (magic, version,
// size) before it is read, Hello attaches the client to a (rank, reader) of a job and is
// answered with the Welcome and the job's segment, acquire/release/unmapped act on what
// this client holds only. Commands and status queries go to SessionHandlers.
#include <algorithm>
#include <cstring>

#include "log/log.hpp"
#include "control/client_job_access.hpp"
#include "control/sessions.hpp"
#include "delivery/device_delivery.hpp"
#include "job/job.hpp"
#include "jobs/job_table.hpp"

namespace stoker::control {

using delivery::DeviceRing;
using delivery::PeerProcess;
using job::AttachResult;
using job::Job;

bool Sessions::handle_message(Session& s, const std::uint8_t* data, std::size_t n) {
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
      if (s.window > 0) {
        send_error(s, proto::ErrorCode::kBadMessage, "acquire on a connection in announce mode (Hello asked for announcements)");
        return false;
      }
      s.acquire_pending = true;
      return true;
    case proto::MsgType::kCredit: {
      if (!expect(sizeof(proto::CreditMsg))) return false;
      if (s.job == nullptr || s.window == 0) {
        send_error(s, proto::ErrorCode::kBadMessage, "credit on a connection not in announce mode");
        return false;
      }
      proto::CreditMsg m;
      std::memcpy(&m, data, sizeof m);
      s.taken = std::max(s.taken, std::min(m.taken, s.announced));  // never past what was sent
      s.job->touch_leases(s.rank, s.reader);  // progress: the lease timeout counts from here
      return true;
    }
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
        stoker::log::warn("evicting client pid {}: bad release (slot {}, generation {})", s.pid, m.slot, m.generation);
        return false;
      }
      // Announce mode: this batch's announcement (and every one before it) was taken.
      // Progress restarts the lease clock of what it still holds (lease_timeout_s measures a
      // consumer that stopped, not how far ahead its batches were announced).
      if (s.window > 0 && m.slot < s.slot_seq.size()) {
        s.taken = std::max(s.taken, s.slot_seq[m.slot] + 1);
        s.job->touch_leases(s.rank, s.reader);
      }
      handlers_.released(s, v21 ? std::nullopt : std::optional<std::uint64_t>(m.wait_ns));
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
      return handlers_.command(s, data, n);
    case proto::MsgType::kStatusQuery: {
      if (!expect(sizeof(proto::StatusQueryMsg))) return false;
      return handlers_.status(s);
    }
    default:
      send_error(s, proto::ErrorCode::kBadMessage, "unknown message type " + std::to_string(h.type));
      return false;
  }
}

bool Sessions::handle_hello(Session& s, const proto::HelloMsg& hello) {
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
  if (const base::Status access = client_job_access(jobs_, s.peer_uid, job); !access) {
    send_error(s, proto::ErrorCode::kUnknownJob, access.message());
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
    auto opened = delivery_.open_ring(job->device_request(), m.device_uuid, m.device_backend);
    if (!opened) {
      send_error(s, proto::ErrorCode::kNoDevice, opened.status().message());
      return false;
    }
    device = std::move(opened).value();
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
  // A 2.3 client's reserved bytes are zero and its flags lack the bit: ordinary positions.
  const std::optional<std::uint64_t> start_position =
      (m.flags & proto::kHelloStartPosition) != 0 ? std::optional<std::uint64_t>(m.start_position) : std::nullopt;
  base::Result<AttachResult> attached = job->attach(m.rank, m.reader, m.start_epoch, m.start_batch, start_position, device);
  if (attached && *attached == AttachResult::kBusy) {
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
        attached = job->attach(m.rank, m.reader, m.start_epoch, m.start_batch, start_position, device);
      }
      break;
    }
  }
  if (!attached) {  // out of step with its rank's other readers: the message names both positions
    drop_unsent();
    send_error(s, proto::ErrorCode::kOutOfStep, attached.status().message());
    return false;
  }
  if (*attached == AttachResult::kBusy) {
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
  if ((m.flags & proto::kHelloAnnounce) != 0) {
    // At most the ring's slots: more could never be ready at once. A 2.4 client sends 0 here
    // and lacks the flag; a flag with window 0 is read as 1.
    s.window = std::clamp<std::uint32_t>(m.window, 1, job->config().prefetch);
    s.slot_seq.assign(job->config().prefetch, 0);
  }

  if (job->restore_layout()) {
    stoker::log::warn("job {}: its segment's header had been overwritten by another process; restored", job_name);
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
  stoker::log::info("consumer pid {} attached to job {} rank {}{} at epoch {} batch {}{}{}", s.pid, job_name, m.rank,
                    reader_suffix(s.job, s.reader), m.start_epoch, m.start_batch,
                    start_position ? " of the rest after global position " + std::to_string(*start_position) : "",
                    device ? " (device batches)" : "");
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

}  // namespace stoker::control
