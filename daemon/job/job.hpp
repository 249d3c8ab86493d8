// One job of the config at run time: its dataset, its segment, and one ring per consumer rank.
//
// Job is a facade: each rank's slot state machine is a Ring (ring.hpp, which knows no Job and
// reaches the job through RingHooks: Job::RingLink); the job adds the segment, the worker
// task (read, decode, cache, quarantine), bad-sample settling, mixing and read-ahead.
//
// Threads: the control thread calls attach/detach/take_ready/release; worker threads call
// run(). Each ring's state is guarded by its own mutex (lock order: ring mutex, then the work
// queue's, then stats_mu_), so consumers of one job never wait on each other.
//
// Batch planning (per ring): a batch takes the next `batch_size` sample ids of its epoch's
// stream (the rank's share of the epoch permutation). Planning happens only into FREE slots,
// so a slow or absent consumer stops planning (backpressure) and nothing it holds is ever
// overwritten.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "config/config.hpp"
#include "delivery/device_delivery.hpp"
#include "delivery/device_ring.hpp"
#include "image/sample_processor.hpp"
#include "job/format_counts.hpp"
#include "job/quarantine.hpp"
#include "job/ring.hpp"
#include "source/read_ahead.hpp"
#include "job/sample_cache.hpp"
#include "job/segment.hpp"
#include "sched/task.hpp"
#include "sched/worker_pool.hpp"
#include "sampler/mixture.hpp"
#include "source/dataset.hpp"
#include "source/sample_reader.hpp"
#include "store/decoded_store.hpp"
#include "stoker/proto/control.hpp"
#include "stoker/proto/layout.hpp"

namespace stoker::job {

// The decoded store as one job sees it: its own hits and misses, the shared store's figures.
struct JobStoreStats {
  std::uint64_t hits = 0;    // samples whose reduced pixels came from the store
  std::uint64_t misses = 0;  // samples decoded (not stored, changed on disk, broken, or no room)
  store::StoreStats store;
  std::string file;
  // `stokerctl prepare`: samples looked at (already stored or decoded now) of `total`.
  bool preparing = false;
  std::uint64_t prepare_done = 0, prepare_stored = 0, prepare_failed = 0, total = 0;
};

struct JobStats {
  std::uint64_t samples_ok = 0;
  std::uint64_t decode_warnings = 0;
  std::uint64_t errors[6] = {};  // by image::SampleErrorKind
  std::uint64_t substituted = 0;
  std::uint64_t batches_published = 0;
  std::uint64_t quarantined = 0;
  std::uint64_t transient_read_errors = 0;  // machine faults, retried (never quarantined)
  std::uint64_t missing = 0;                // unreadable now, skipped this epoch (ENOENT, EACCES)
  std::uint64_t bytes_read = 0;             // sample bytes read from storage (cache hits excluded)
};

// One source of a mixture job, for status and /metrics.
struct MixtureSourceStatus {
  std::string name;
  double weight = 0;
  std::uint64_t samples = 0;          // the source's size
  std::uint64_t per_epoch = 0;        // positions of each job epoch it takes (its quota)
  std::uint64_t samples_served = 0;   // samples of it decoded into batches (quarantined ones not)
  std::uint64_t quarantined = 0;      // of its samples, known bad
  std::uint64_t source_epoch = 0;     // its own epoch counter where the slowest rank now plans
};

class Job final : public sched::Task {
 public:
  // Builds the segment (throws std::runtime_error on failure; nothing is left behind).
  Job(std::size_t index, const config::JobConfig& cfg, source::Dataset dataset,
      const std::string& segment_name, unsigned shm_mode, std::uint64_t daemon_generation,
      WorkQueue& queue, std::function<void()> notify_ready);
  ~Job();
  Job(const Job&) = delete;
  Job& operator=(const Job&) = delete;

  std::size_t index() const override { return index_; }
  const std::string& name() const { return cfg_.name; }
  const config::JobConfig& config() const { return cfg_; }
  const image::PipelineSpec& pipeline() const override { return cfg_.pipeline; }
  const source::Dataset& dataset() const { return dataset_; }
  std::uint32_t consumers() const { return cfg_.consumers; }
  // Global ranks: this daemon serves first_rank()..first_rank()+consumers()-1 of world_size().
  std::uint32_t first_rank() const { return cfg_.first_rank; }
  std::uint32_t world_size() const { return cfg_.world_size; }
  // Rewrites the segment's header and ring table if another process overwrote them; true
  // when it had to (called before each attach).
  bool restore_layout();
  // Seconds the longest-held batch of global `rank`'s `reader` has been leased (0: none).
  double oldest_lease_s(std::uint32_t rank, std::uint32_t reader);
  void touch_leases(std::uint32_t rank, std::uint32_t reader);  // Ring::touch_leases
  void retry_planning();  // Ring::retry_planning for each ring (the control loop, each turn)
  std::uint32_t readers() const { return cfg_.readers; }
  bool serves(std::uint32_t rank) const { return rank >= cfg_.first_rank && rank - cfg_.first_rank < cfg_.consumers; }
  // What global `rank` gets per epoch (ranks differ only with pad_shards: false, by one sample).
  std::uint64_t batches_per_epoch(std::uint32_t rank) const;
  std::uint64_t samples_per_rank(std::uint32_t rank) const;
  // Positions of the global order per epoch: the dataset's size, or a mixture's epoch_size.
  std::uint64_t samples_per_epoch() const;
  // A mixture's sources (empty for one source).
  std::vector<MixtureSourceStatus> mixture_status() const;
  const ShmSegment& segment() const { return segment_->shm(); }
  // Labels as the segment carries them (proto::SegmentHeader::label_dtype/label_width):
  // 0 and 1 for int64 class indices; a float dtype and num_classes for a mixing job's soft rows.
  std::uint32_t label_dtype() const { return label_dtype_; }
  std::uint32_t label_width() const { return label_width_; }
  std::uint64_t label_bytes() const { return proto::label_row_bytes(label_dtype_, label_width_); }

  // What device delivery needs to open a device ring for one of this job's consumers.
  delivery::DeviceRingRequest device_request() const;

  // Plans every slot of every ring from epoch 0, batch 0 (prefetch before anyone connects).
  void start();

  // --- control thread (reader groups: job_readers.cpp) ---
  // Reader `reader` (< readers()) of global `rank` connected and wants (epoch, batch) next.
  // The first reader of an idle rank sets the position: ready batches that do not fit are
  // dropped and the ring is re-planned from there. A later reader must ask for a batch its
  // rank still holds or plans next (an error naming both positions otherwise); kBusy: that
  // reader is already connected. `device`: the reader takes its batches on the GPU through this ring
  // (batches prefetched before it attached are copied when they are taken).
  // `consumed` (elastic resume): epoch `epoch` starts after the whole world consumed that many
  // positions of its global order, and `batch` counts batches of this rank's share of the rest.
  // The first consumer of an idle job sets it; every later one (any rank) must pass the same
  // position, or is refused with an error naming both (checkpoints of different steps).
  base::Result<AttachResult> attach(std::uint32_t rank, std::uint32_t reader, std::uint64_t epoch,
                                    std::uint64_t batch, std::optional<std::uint64_t> consumed,
                                    std::shared_ptr<delivery::DeviceRing> device);
  // The reader is gone: its leases are reclaimed; batches its rank's other readers still need
  // are kept. Returns its device ring (no slot refers to it any more), for DeviceDelivery.
  std::shared_ptr<delivery::DeviceRing> detach(std::uint32_t rank, std::uint32_t reader,
                                               const std::vector<std::uint32_t>& untaken = {});
  // The reader's next batch in order, if ready: it becomes LEASED (by this reader too).
  std::optional<proto::BatchMsg> take_ready(std::uint32_t rank, std::uint32_t reader);
  // Validates untrusted (slot, generation) from the reader; false means a bad release.
  bool release(std::uint32_t rank, std::uint32_t reader, std::uint32_t slot, std::uint32_t generation);
  // Set when on_error: fail met a bad sample: "path: reason".
  std::optional<std::string> failure() const;

  // --- removal (job_table.hpp: reload, `stokerctl drain`, client-defined jobs) ---
  // From now on no batch is planned; batches already planned still fill and are handed out.
  void drain();
  bool draining() const { return draining_.load(); }
  // Draining, and nothing more will come for this reader: no batch at or past its position is
  // filling or ready for it.
  bool drained_for(std::uint32_t rank, std::uint32_t reader);
  // Waits for every device copy still reading the segment (before the job is destroyed).
  void settle_device_copies();

  JobStats stats() const;
  // The finished-sample cache's figures (`cache: {bytes}`), when the job has one.
  std::optional<SampleCacheStats> cache_stats() const {
    return cache_ ? std::optional<SampleCacheStats>(cache_->stats()) : std::nullopt;
  }
  // `stokerctl prepare`: fills the decoded store with every sample not stored yet, on
  // `threads` threads of its own (a no-op while a fill runs). false without a store.
  bool start_prepare(unsigned threads);
  // The decoded store's figures (`decoded_store: {...}`), when the job has one.
  std::optional<JobStoreStats> store_stats() const;
  // Why `decoded_store:` is off for this job (its store could not be opened); "" otherwise.
  const std::string& store_off_reason() const { return store_off_reason_; }
  std::vector<RingStatus> ring_status() const;
  // Seconds worker threads spent waiting for sample bytes (reads, read-ahead, retries).
  double read_wait_s() const { return static_cast<double>(read_wait_ns_.load()) * 1e-9; }
  // Samples by image format, by content (format_counts.hpp).
  const FormatCounts& formats() const { return formats_; }
  // Why the job is waiting instead of making batches: the object store its samples come from
  // is unreachable (every read of it failing transiently), e.g. "waiting 12 s for the object
  // store: <URL>: HTTP 503"; "" while it is not.
  std::string paused_reason() const;
  // Read-ahead's figures (source/read_ahead.hpp), when the job has it on.
  std::optional<source::ReadAheadStats> read_ahead_stats() const {
    return read_ahead_ ? std::optional<source::ReadAheadStats>(read_ahead_->stats()) : std::nullopt;
  }
  // Stops workers waiting out an unreachable object store (they give their sample up for the
  // epoch): the daemon is stopping and must not hang on a store that never returns.
  void stop_waiting();

  // --- worker threads ---
  void run(const WorkItem& item, image::SampleProcessor& processor,
           std::vector<std::uint8_t>& file_buffer) override;

  // --- remote workers (remote/dispatcher.hpp; job_remote.cpp), any thread ---
  // A sample a remote worker makes: where its bytes lie and its random stream. Its pixels are
  // a pure function of (pipeline, pixel_seed, epoch, draw, bytes), whichever machine runs it.
  struct RemoteSample {
    std::string path;  // the file to read: the sample, or the tar shard holding it
    std::uint64_t offset = 0, size = 0;
    bool member = false;  // a tar member: `size` bytes at `offset` of `path`
    std::uint64_t epoch = 0;
    std::uint32_t draw = 0;  // the id its augmentation is drawn with
    std::uint32_t id = 0;    // the sample
  };
  // run()'s start for an item a remote worker will make. nullopt when no worker is needed
  // (quarantined, in the cache, or the job stopped): the item is then finished here, as run()
  // would. Otherwise the caller must end the item exactly once: finish_remote(), or hand it
  // back to the queue (WorkQueue::push_front) for a local or another remote worker.
  std::optional<RemoteSample> begin_remote(const WorkItem& item);
  // Where the item's finished pixels go (pipeline().sample_bytes() of them).
  std::uint8_t* sample_out(const WorkItem& item);
  // Writes a whole sample's pixels (sample_bytes()) into sample_out(item), through the
  // segment's descriptor where the kernel takes it (ShmSegment::write says why), else by copy.
  void put_sample(const WorkItem& item, const std::uint8_t* pixels);
  // The worker's answer for `item` (its pixels already in sample_out(item) when ok): settled
  // as run() settles a sample it made (a bad one quarantined here, counted once, by the
  // job's on_error). Not for a read failure of the worker: that item is re-issued.
  void finish_remote(const WorkItem& item, const RemoteSample& sample, const image::SampleResult& result);
  // The sample made here, as a local worker would make it (read by the job's source, the same
  // seed, epoch and draw), into `out`, without settling anything: to check a worker's answer
  // (remote.verify, a "bad file" verdict; issue #34). kIo when its bytes cannot be read now
  // (nothing is counted, retried or quarantined: the caller decides).
  image::SampleResult make_remote_here(const RemoteSample& sample, image::SampleProcessor& processor,
                                       std::vector<std::uint8_t>& bytes, std::uint8_t* out);

 private:
  class RingLink;  // RingHooks of one ring (job.cpp)

  // The ring's samples of `epoch`: the share of global rank first_rank + ring.
  std::vector<std::uint32_t> epoch_ids(std::uint32_t ring, std::uint64_t epoch, std::uint64_t consumed) const;
  // The ring of a global rank the caller checked with serves().
  Ring& ring_of(std::uint32_t rank) { return *rings_.at(rank - cfg_.first_rank); }
  void record_error(std::uint64_t id, const image::SampleResult& r);
  // The end of every item: the sample's label and id written when `made` and ok, a bad one
  // recorded (`made`: this run decoded it), read-ahead told, the ring told (which may finish
  // the batch) and the items it plans queued.
  void settle_sample(const WorkItem& item, std::uint32_t id, const image::SampleResult& result, bool made);
  // The sample through the decoded store (job_store.cpp): its reduced pixels from the store,
  // or read, reduced, stored, then processed; `result` as read_sample/process set it.
  void run_stored(const WorkItem& item, std::uint32_t id, std::uint64_t epoch, image::SampleProcessor& processor,
                  std::vector<std::uint8_t>& file_buffer, std::uint8_t* out, image::SampleResult& result);
  void open_store();
  // Fills or compacts the places of bad samples (on_error); returns the count to publish.
  std::uint32_t settle_bad_samples(std::uint32_t ring, const SlotBatch& batch);
  // MixUp/CutMix of a batch whose samples are all done (job/batch_mix.hpp), called by the
  // ring without its lock (RingHooks::mix).
  void mix_batch(std::uint32_t ring, const SlotBatch& batch);
  bool copy_to_device(std::uint32_t ring, std::uint32_t s, std::uint32_t count, std::uint64_t epoch,
                      std::uint64_t batch_index, delivery::DeviceRing& to);
  // A whole epoch of a rank failed (every sample bad, missing or unreadable): ends the job,
  // better a clear error than empty batches forever.
  void epoch_failed(std::uint32_t ring, std::uint64_t epoch, std::size_t done, const std::vector<std::string>& first);
  // Reads sample `id` into `buffer`, retrying transient failures with bounded backoff (the
  // batch waits). false with `result` set when the file is missing or the machine did not
  // recover within the retry budget: skipped this epoch, never quarantined (job_read.cpp).
  // `item`'s bytes come from read-ahead when it fetched them.
  // A missing file (ENOENT, EACCES: a client-defined job's file its user may not read) is
  // named once per job run; each epoch then counts them in one line (epoch_done).
  bool read_sample(const WorkItem& item, std::uint32_t id, std::uint64_t epoch, std::vector<std::uint8_t>& buffer,
                   image::SampleResult& result);
  // Every ring finished `epoch`: one line with the count of files missing in it, if any.
  void epoch_done(std::uint64_t epoch);
  // Read-ahead (job_read.cpp): built in the constructor from the `read_ahead` key; an item
  // planned is announced (ring mutex held), one not read is dropped.
  void start_reading();
  void want_read(const WorkItem& item, std::uint32_t id);
  void drop_read(const WorkItem& item);
  std::uint64_t read_key(const WorkItem& item) const;

  // Class index per position: in the segment (int64 labels), or the job's own array when the
  // segment carries soft labels (a mixing job), which Segment::label_region then holds.
  std::int64_t* labels(std::uint32_t ring, std::uint32_t slot);

  const std::size_t index_;
  const config::JobConfig cfg_;
  const source::Dataset dataset_;
  // A mixture's sources as the sampler sees them (offsets, sizes, weights, epoch_size); unset
  // for one source, whose order is epoch_permutation.
  const std::optional<sampler::Mixture> mixture_;
  // shuffle: {window_shards: N}: the first sample id of each shard (a tar source's ids run
  // contiguously per shard), what window_permutation cuts into windows; empty otherwise.
  const std::vector<std::uint32_t> shard_starts_;
  // A mixture: samples served and quarantined per source (by DatasetPart index).
  std::unique_ptr<std::atomic<std::uint64_t>[]> source_served_, source_quarantined_;
  const std::uint32_t label_dtype_;  // see label_dtype(); before plan_, which sizes labels by it
  const std::uint32_t label_width_;
  const proto::SegmentPlan plan_;
  std::unique_ptr<Segment> segment_;
  std::unique_ptr<Quarantine> quarantine_;
  std::unique_ptr<SampleCache> cache_;  // null without `cache:`
  std::shared_ptr<store::DecodedStore> store_;  // null without `decoded_store:`; shared with other jobs
  std::string store_off_reason_;                // set once, in the constructor
  std::atomic<std::uint64_t> store_hits_{0}, store_misses_{0};
  // By sample id: files listed at start or found bad while running; later epochs skip them.
  std::unique_ptr<std::atomic<std::uint8_t>[]> quarantined_;
  std::atomic<std::size_t> quarantined_count_{0};
  FormatCounts formats_{dataset_.samples.size()};
  WorkQueue& queue_;
  std::function<void()> notify_ready_;
  // Mixing jobs: class index per position of each ring's slots (label_region then holds the
  // soft rows made from them when the batch is finished); empty otherwise. Written by the
  // slot's workers, read by the finishing steps: the slot's own FILLING protocol orders them.
  std::vector<std::vector<std::vector<std::int64_t>>> class_labels_;
  std::vector<std::unique_ptr<RingLink>> links_;  // before rings_, which refer to them
  std::vector<std::unique_ptr<Ring>> rings_;

  mutable base::Mutex stats_mu_;  // after a ring's mutex in the lock order, never before
  JobStats stats_ STOKER_GUARDED_BY(stats_mu_);
  std::optional<std::string> failure_ STOKER_GUARDED_BY(stats_mu_);
  // Missing files (job_read.cpp): by sample id, whether one was named in the log already;
  // by epoch, how many reads found a file missing and how many rings finished that epoch.
  std::unique_ptr<std::atomic<std::uint8_t>[]> missing_named_;
  struct MissingInEpoch {
    std::uint64_t files = 0;
    std::size_t rings_done = 0;
  };
  std::map<std::uint64_t, MissingInEpoch> missing_by_epoch_ STOKER_GUARDED_BY(stats_mu_);
  std::atomic<bool> failed_{false};
  std::atomic<bool> draining_{false};  // set once by drain(), before each Ring::drain()
  // Control thread only: the resume points the job's current consumers passed (an elastic
  // global position, or a per-rank batch > 0), one entry per distinct point; cleared when the
  // job has no consumer. Plain starts of an epoch (batch 0) are not recorded: a Loader
  // connects at (0, 0) when it is built, before its checkpoint is loaded.
  struct ResumePoint {
    std::uint64_t epoch = 0, consumed = 0, batch = 0;  // consumed > 0: elastic (batch of the rest)
    bool operator==(const ResumePoint&) const = default;
  };
  std::vector<ResumePoint> starts_;
  std::atomic<std::uint32_t> transient_burst_{0};  // workers inside a transient-error burst
  std::atomic<bool> stop_waiting_{false};
  // A worker starts (+1), goes on (0) or stops (-1) waiting out the object store; `reason`: its
  // read's last failure. Logs when the first starts and the last stops.
  void note_store_wait(int change, const std::string& reason);
  // Workers now waiting out an unreachable object store, since when, and the last failure
  // (paused_reason()). Guarded by stats_mu_.
  std::uint32_t store_waiters_ STOKER_GUARDED_BY(stats_mu_) = 0;
  std::chrono::steady_clock::time_point store_wait_since_ STOKER_GUARDED_BY(stats_mu_);
  std::string store_wait_reason_ STOKER_GUARDED_BY(stats_mu_);
  std::unique_ptr<source::SampleReader> reader_;   // before read_ahead_, whose threads use it
  std::unique_ptr<source::ReadAhead> read_ahead_;          // null with read-ahead off
  std::atomic<std::uint64_t> read_wait_ns_{0};
  std::atomic<std::uint64_t> bytes_read_{0};       // JobStats::bytes_read (no lock per read)
  // `stokerctl prepare` (job_store.cpp): threads filling the decoded store, each taking the next
  // sample id; joined by ~Job before any member they use goes.
  std::vector<std::thread> prepare_threads_;
  std::atomic<bool> prepare_stop_{false}, preparing_{false};
  std::atomic<std::uint64_t> prepare_next_{0}, prepare_done_{0}, prepare_stored_{0}, prepare_failed_{0};
  std::atomic<std::uint32_t> prepare_running_{0};
  void prepare_loop();
};

}  // namespace stoker::job
