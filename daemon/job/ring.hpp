// One consumer rank's ring of slots: the whole slot state machine in one class that knows no
// Job (planning, readers, attach, take, release, lease reclaim, replanning, detach, drain).
// What it needs from its job comes through RingHooks, and the segment's headers through
// RingMemory, so tests drive it without a segment file, a socket or a process
// (tests/unit/ring_test.cpp).
//
// Slot states (mirrored into the slot's proto::SlotHeader::state for the consumers):
//   FREE -> FILLING   planned: the next batch_size ids of the epoch's stream (plan_free_slots)
//   FILLING -> READY  every position is done; bad samples settled, the batch mixed (finish)
//   READY <-> LEASED  LEASED while any reader holds it (take / release; detach reclaims)
//   READY/LEASED -> FREE  once every expected reader is past it (consumed), or on a replan
//   FILLING (stale) -> FREE  no longer wanted (replan, job stopped): when its workers finish
// Planning happens only into FREE slots, so a slow or absent reader stops planning
// (backpressure) and nothing it holds is ever overwritten.
//
// Fan-out: every rank has `readers` readers (1 unless the job fans out). They take the same
// batches, in order, from the same slots. A slot goes back to FREE only when every expected
// reader is past it, so a reader that falls behind holds its group back by at most the ring's
// slots and never loses a batch; a reader that dies is dropped and the others keep flowing.
//
// Threads and lock order: the control thread calls attach/detach/take/release/status; worker
// threads call begin_sample/sample_done. All state is guarded by the ring's own mutex, so
// consumers of one job never wait on each other. Lock order: a ring's mutex, then the work
// queue's (the caller pushes the WorkItems a call returns after the ring's mutex is released),
// then whatever a hook takes (the job's stats mutex, read-ahead's, a device ring's). No ring
// mutex is ever taken while another ring's is held.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "delivery/device_ring.hpp"
#include "sched/work_queue.hpp"
#include "base/mutex.hpp"
#include "base/status.hpp"
#include "stoker/proto/control.hpp"
#include "stoker/proto/layout.hpp"

namespace stoker::job {

// The scheduler's types, by the names the job code has always used.
using sched::JobShare;
using sched::WorkItem;
using sched::WorkQueue;

struct ReaderStatus {
  std::uint32_t reader;
  bool attached;
  std::uint64_t next_epoch, next_batch;  // next batch this reader will be given
  std::uint32_t leased;
  double oldest_lease_s = 0;  // age of the batch it has held longest (0: none held)
  std::uint64_t behind = 0;   // batches behind the rank's most advanced reader
  std::string device_uuid;    // device readers: the GPU their batches go to
};

struct RingStatus {
  std::uint32_t rank;
  bool attached;                         // any reader
  std::uint32_t free, filling, ready, leased;
  std::uint64_t next_epoch, next_batch;  // the slowest expected reader's next batch
  std::uint64_t published, released;
  std::string device_uuid;  // reader 0's GPU, when it takes device batches
  double oldest_lease_s = 0;  // age of the batch held longest (0: none held)
  std::vector<ReaderStatus> readers;
};

enum class AttachResult { kAttached, kBusy };  // out of step: attach returns an error Status

// A place in a rank's stream of batches, ordered epoch first.
struct BatchPos {
  std::uint64_t epoch = 0;
  std::uint64_t batch = 0;
  auto operator<=>(const BatchPos&) const = default;
};

// Elastic resume: epoch `epoch` starts after the whole world (of any size) consumed the first
// `consumed` positions of its global order; the ring serves its rank's share of the rest
// (sampler::rank_samples_from), numbered from batch 0. Later epochs are the ordinary split.
// Never holds consumed == 0 (that is the ordinary epoch: std::nullopt).
struct EpochStart {
  std::uint64_t epoch = 0;
  std::uint64_t consumed = 0;
  bool operator==(const EpochStart&) const = default;
};

// A batch whose samples are all done, as its ring holds it, for the job's finishing steps
// (finish.hpp, mixing). `sample_ids` and `ok` hold `count` entries, one per position.
struct SlotBatch {
  std::uint32_t slot = 0;
  std::uint64_t epoch = 0, batch_index = 0;
  std::uint32_t count = 0;
  std::uint32_t* sample_ids = nullptr;
  std::int8_t* ok = nullptr;  // 1 good, 0 bad
};

// What a ring needs from its job. Called with the ring's mutex held unless said otherwise;
// a hook never calls back into the ring.
class RingHooks {
 public:
  virtual ~RingHooks() = default;
  // The rank's sample ids of `epoch` in order (its share of the epoch's permutation), or with
  // `consumed` > 0 its share of what is left after the whole world took that many positions.
  virtual std::vector<std::uint32_t> epoch_ids(std::uint64_t epoch, std::uint64_t consumed) = 0;
  // The job stopped (on_error: fail, a failed epoch): nothing more is planned, and batches
  // still filling are dropped when their workers finish.
  virtual bool stopped() const = 0;
  // Position `position` of slot `slot` (generation `generation`) was planned with sample `id`:
  // append its work item to `out` (pushed once the ring's mutex is released).
  virtual void planned(std::uint32_t slot, std::uint32_t position, std::uint32_t generation, std::uint32_t id,
                       std::vector<WorkItem>& out) = 0;
  // Fills or compacts the places of bad samples (on_error); returns the count to publish.
  virtual std::uint32_t settle(const SlotBatch& batch) = 0;
  // A mixing job mixes a settled batch: mix() runs WITHOUT the ring's mutex (the slot is
  // FILLING with nothing pending, so no worker or planner touches its bytes meanwhile).
  virtual bool mixes() const = 0;
  virtual void mix(const SlotBatch& batch) = 0;
  // Queue a copy of slot `slot` (`count` samples) to `to`; false when it was not copied.
  virtual bool copy_to_device(std::uint32_t slot, std::uint32_t count, std::uint64_t epoch,
                              std::uint64_t batch_index, delivery::DeviceRing& to) = 0;
  // A batch was published (READY), or a stopped job dropped one: wake the control thread.
  virtual void published() = 0;
  virtual void notify() = 0;
  // Every sample of a whole epoch failed (`done` of them; the first few "path: reason").
  virtual void epoch_failed(std::uint64_t epoch, std::size_t done, const std::vector<std::string>& first) = 0;
  // Every sample this ring planned of `epoch` is done (once per epoch stream that was not
  // abandoned); for the job's per-epoch summaries.
  virtual void epoch_done(std::uint64_t /*epoch*/) {}
};

// The segment's headers of one ring: its ring header and each slot's header (the daemon's
// side of the shared layout; statistics and slot states are written there).
struct RingMemory {
  proto::RingHeader* header = nullptr;
  std::vector<proto::SlotHeader*> slots;
};

struct RingConfig {
  std::string job_name;        // for log lines and errors
  std::uint32_t index = 0;     // the ring's index in its job (WorkItem::ring)
  std::uint32_t rank = 0;      // the global rank it serves (log lines, status)
  std::uint32_t slots = 0;     // prefetch
  std::uint32_t readers = 1;
  std::uint32_t batch_size = 1;
  bool drop_last = false;
};

class Ring {
 public:
  Ring(RingConfig cfg, RingMemory memory, RingHooks& hooks);
  Ring(const Ring&) = delete;
  Ring& operator=(const Ring&) = delete;

  const RingConfig& config() const { return cfg_; }

  // Plans every slot from epoch 0, batch 0 (prefetch before anyone connects).
  void start(std::vector<WorkItem>& out) STOKER_EXCLUDES(mu_);

  // Reader `reader` connected and wants (epoch, batch) next. The first reader of an idle ring
  // sets the position: ready batches that do not fit are dropped and the ring is re-planned
  // from there. A later reader must ask for a batch the ring still holds or plans next (an
  // error Status naming both positions otherwise); kBusy: that reader is already connected.
  // `device`: the reader takes its batches on the GPU through this ring.
  base::Result<AttachResult> attach(std::uint32_t reader, BatchPos want, std::shared_ptr<delivery::DeviceRing> device,
                                    std::vector<WorkItem>& out) STOKER_EXCLUDES(mu_) {
    return attach(reader, want, std::nullopt, std::move(device), out);
  }
  // The same, where `start` (elastic resume) says that want.epoch begins after the whole world
  // consumed start->consumed positions. The first reader of an idle ring sets it (a ring whose
  // planned batches were cut another way is re-planned); a later reader must agree.
  base::Result<AttachResult> attach(std::uint32_t reader, BatchPos want, std::optional<EpochStart> start,
                                    std::shared_ptr<delivery::DeviceRing> device, std::vector<WorkItem>& out)
      STOKER_EXCLUDES(mu_);
  // Any reader connected (the job checks that its ranks start from one global position).
  bool any_reader_attached() const STOKER_EXCLUDES(mu_);
  // The reader is gone: its leases are reclaimed; batches the other readers still need are
  // kept. Returns its device ring once no slot's copy reads for it any more.
  // `untaken`: slots announced to the reader (protocol 2.5) that it is not known to have taken,
  // or taken for it but never sent (its connection failed under the send): they are not counted as consumed, and the
  // reader's position goes back to the first of them, so a reconnect gets them again instead of a re-plan (or an
  // out-of-step refusal).
  std::shared_ptr<delivery::DeviceRing> detach(std::uint32_t reader, std::vector<WorkItem>& out,
                                               const std::vector<std::uint32_t>& untaken = {})
      STOKER_EXCLUDES(mu_);
  // After planning ran out of memory (std::bad_alloc making the next epoch's order): plans
  // again; nothing otherwise. Called each turn of the control loop (Job::retry_planning).
  void retry_planning(std::vector<WorkItem>& out) STOKER_EXCLUDES(mu_);
  // The reader's next batch in order, if ready: it becomes LEASED (by this reader too).
  std::optional<proto::BatchMsg> take(std::uint32_t reader) STOKER_EXCLUDES(mu_);
  // Validates untrusted (slot, generation) from the reader; false means a bad release.
  bool release(std::uint32_t reader, std::uint32_t slot, std::uint32_t generation, std::vector<WorkItem>& out)
      STOKER_EXCLUDES(mu_);

  // From now on nothing is planned; batches already planned still fill and are handed out.
  // Once this returns, no planner of this ring runs again.
  void drain() STOKER_EXCLUDES(mu_);
  // Nothing more will come for this reader: no batch at or past its position is filling or
  // ready for it (meaningful once drain() was called).
  bool drained_for(std::uint32_t reader) const STOKER_EXCLUDES(mu_);

  // --- worker threads ---
  struct Sample {
    std::uint32_t id;
    std::uint64_t epoch;
  };
  // The sample a work item stands for. Invariant (checked): its slot is FILLING at the item's
  // generation, since a FILLING slot is never planned again before all its items are done.
  Sample begin_sample(const WorkItem& item) const STOKER_EXCLUDES(mu_);
  // The item's sample is done (`failure`: "path: reason" when it is bad). The last one of a
  // batch finishes it: dropped when unwanted, else settled, mixed and published.
  void sample_done(const WorkItem& item, bool ok, const std::string* failure, std::vector<WorkItem>& out)
      STOKER_EXCLUDES(mu_);

  // Seconds this reader's longest-held batch has been leased (0: none).
  double oldest_lease_s(std::uint32_t reader) const STOKER_EXCLUDES(mu_);
  // The reader made progress (protocol 2.5: a release or credit from a consumer in announce
  // mode): every batch it holds is aged from now. Its batches were announced ahead, so their
  // lease age says how far ahead, not how long it has been stuck.
  void touch_leases(std::uint32_t reader) STOKER_EXCLUDES(mu_);
  // `per_epoch`: the rank's batches per epoch (for `behind`).
  RingStatus status(std::uint64_t per_epoch) const STOKER_EXCLUDES(mu_);
  // Waits for every device copy still reading the ring's host bytes.
  void settle_device_copies() STOKER_EXCLUDES(mu_);

 private:
  // One process reading the ring's batches.
  struct Reader {
    bool attached = false;
    // An expected reader holds every batch from `next` on until it has taken and released it.
    // Attached readers are expected; so is every reader of a group that is (re)starting
    // (none attached yet), so the first to connect cannot run ahead of the others. A reader
    // that disconnects while others read is dropped: not expected until it attaches again.
    bool expected = true;
    BatchPos next;                                  // the next batch it takes
    std::shared_ptr<delivery::DeviceRing> device;  // its device ring, when it takes device batches
  };

  // The ring's samples of one epoch and how far planning has taken them.
  struct EpochStream {
    std::uint64_t epoch = 0;
    std::vector<std::uint32_t> ids;
    std::size_t cursor = 0;          // next unclaimed position in ids
    std::uint64_t next_batch = 0;    // index the next planned batch gets
    bool last_planned = false;       // a batch flagged kBatchLastInEpoch exists
    // Outcome of the samples planned from this stream, to end the job when a whole epoch
    // fails; only for streams that start at the epoch's beginning.
    bool whole_epoch = true;
    std::size_t planned = 0, done = 0, good = 0;
    std::vector<std::string> first_failures;  // "path: reason", at most 3
    bool done_reported = false;               // RingHooks::epoch_done was called

    std::size_t remaining() const { return ids.size() - cursor; }
  };

  struct Slot {
    proto::SlotState state = proto::SlotState::kFree;
    std::uint32_t generation = 0;
    bool stale = false;              // FILLING but no longer wanted: freed when workers finish
    std::uint64_t epoch = 0;
    std::uint64_t batch_index = 0;
    std::uint32_t count = 0;
    std::uint32_t flags = 0;
    std::uint32_t pending = 0;       // positions still being processed
    std::shared_ptr<EpochStream> stream;
    std::vector<std::uint32_t> ids;  // sample id per position
    std::vector<std::int8_t> ok;     // per position: 1 good, 0 bad, -1 pending
    // The device rings whose copies of this slot may still be reading its host bytes; cleared
    // (after waiting) before the slot is planned again.
    std::vector<std::shared_ptr<delivery::DeviceRing>> copied_to;
    // Readers holding it (bit k: reader k). Invariant: state is LEASED iff leased_by != 0,
    // once READY; it goes FREE only when every expected reader is past it (consumed).
    std::uint64_t leased_by = 0;
    std::vector<std::chrono::steady_clock::time_point> leased_at;  // per reader (stuck readers)

    BatchPos pos() const { return {epoch, batch_index}; }
    bool live() const {
      return (state == proto::SlotState::kFilling && !stale) || state == proto::SlotState::kReady ||
             state == proto::SlotState::kLeased;
    }
  };

  std::shared_ptr<EpochStream> make_stream(std::uint64_t epoch) STOKER_REQUIRES(mu_);
  bool any_attached() const STOKER_REQUIRES(mu_);
  void set_slot_state(std::uint32_t s, proto::SlotState st) STOKER_REQUIRES(mu_);
  void plan_free_slots(std::vector<WorkItem>& out) STOKER_REQUIRES(mu_);
  // Every expected reader has taken and released the slot (or will never take it).
  bool consumed(const Slot& slot) const STOKER_REQUIRES(mu_);
  // READY/LEASED slots no reader needs any more become FREE and are planned again.
  void free_consumed(std::vector<WorkItem>& out) STOKER_REQUIRES(mu_);
  // Drops every planned batch and plans from `from` on (a group starting elsewhere).
  void replan(BatchPos from, std::vector<WorkItem>& out) STOKER_REQUIRES(mu_);
  // Finishing a batch in steps, so that a mixing job mixes between them without the mutex:
  // drops a batch nobody wants any more (true: dropped, slot FREE), settles bad samples,
  // publishes (READY) and frees it at once when nobody will take it.
  bool drop_unwanted(std::uint32_t s, std::vector<WorkItem>& out) STOKER_REQUIRES(mu_);
  void settle(std::uint32_t s) STOKER_REQUIRES(mu_);
  SlotBatch batch_of(std::uint32_t s) STOKER_REQUIRES(mu_);
  void publish(std::uint32_t s) STOKER_REQUIRES(mu_);
  void check_epoch_failed(const EpochStream& st) STOKER_REQUIRES(mu_);
  void check_epoch_done(EpochStream& st) STOKER_REQUIRES(mu_);
  // Device delivery: queue slot s's copy to `to`; settle its copies before its host bytes
  // change; a detaching reader's copies (returns its device ring).
  bool copy_to_device(std::uint32_t s, const std::shared_ptr<delivery::DeviceRing>& to) STOKER_REQUIRES(mu_);
  void settle_device_copy(std::uint32_t s) STOKER_REQUIRES(mu_);
  std::shared_ptr<delivery::DeviceRing> drop_device(Reader& reader) STOKER_REQUIRES(mu_);

  const RingConfig cfg_;
  const RingMemory memory_;
  RingHooks& hooks_;

  mutable base::Mutex mu_;
  std::vector<Slot> slots_ STOKER_GUARDED_BY(mu_);
  std::shared_ptr<EpochStream> planning_ STOKER_GUARDED_BY(mu_);
  // The epoch that starts at a global position (elastic resume), set by the group's first
  // reader; every stream of that epoch is cut from there.
  std::optional<EpochStart> start_ STOKER_GUARDED_BY(mu_);
  std::vector<Reader> readers_ STOKER_GUARDED_BY(mu_);
  bool draining_ STOKER_GUARDED_BY(mu_) = false;
  bool plan_failed_ STOKER_GUARDED_BY(mu_) = false;  // the next epoch's order could not be allocated
};

}  // namespace stoker::job
