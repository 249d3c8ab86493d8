// The worker task's decoded-store path (store/decoded_store.hpp): a sample's reduced image
// from the store when an intact entry of the same file version is there, else read, reduced,
// stored and processed. Both give the same pixels: process_reduced runs on the same reduced
// image either way (image/sample_processor.hpp).
#include <algorithm>
#include <exception>
#include <sys/stat.h>

#include "log/log.hpp"
#include "image/decoder_versions.hpp"
#include "job/job.hpp"
#include "store/checksum.hpp"

namespace stoker::job {

namespace {

// The version of the file a sample's bytes come from: its size and modification time (a tar
// member: its own size and its shard's modification time). false when it cannot be looked at
// now (the store is then left out for this sample; reading reports what is wrong).
bool file_version(const source::Dataset& d, std::uint32_t id, std::uint64_t& size, std::int64_t& mtime_ns) {
  const source::Sample& s = d.samples[id];
  const std::string file =
      s.shard != source::Sample::kWholeFile ? d.shards[s.shard] : d.path(id);
  struct stat st{};
  if (::stat(file.c_str(), &st) != 0) return false;
  size = s.shard != source::Sample::kWholeFile ? s.size : static_cast<std::uint64_t>(st.st_size);
  mtime_ns = static_cast<std::int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
  return true;
}

}  // namespace

void Job::open_store() {
  // The store file's identity: everything that decides an entry's pixels or whether a sample
  // is admitted at all, besides max_side (in the file name) and the sample itself (its path,
  // size and mtime are in each entry): the source's root and shards, the decode limits (a job
  // with a lower max_pixels must not be served what another job's looser limits stored;
  // issue #34, B3) and the decoder libraries' versions.
  const image::PipelineSpec& p = cfg_.pipeline;
  std::string identity = dataset_.root;
  for (const std::string& shard : dataset_.shards) identity += "\n" + shard;
  identity += "\ndecode: max_pixels " + std::to_string(p.max_pixels) + ", max_memory " +
              std::to_string(p.max_memory_bytes) + ", strict " + (p.strict ? "yes" : "no");
  identity += "\n" + image::decoder_versions();
  const std::uint64_t source_id = store::checksum64(identity.data(), identity.size());
  // A store that cannot be opened (its folder or file not stokerd's own, no space, ...) turns
  // the store off for this job, with the reason in its status; the job serves, decoding every
  // sample (issue #34, B4).
  try {
    store_ = store::DecodedStore::open(cfg_.store_path, source_id, cfg_.store_max_side, cfg_.store_bytes);
  } catch (const std::exception& e) {
    store_.reset();
    store_off_reason_ = e.what();
    stoker::log::warn("job {}: decoded_store off for this job: {}", cfg_.name, store_off_reason_);
  }
}

void Job::run_stored(const WorkItem& item, std::uint32_t id, std::uint64_t epoch, image::SampleProcessor& processor,
                     std::vector<std::uint8_t>& file_buffer, std::uint8_t* out, image::SampleResult& result) {
  // One entry buffer per worker thread (the store's get() copies an entry into it).
  thread_local std::vector<std::uint8_t> entry;
  const std::string path = dataset_.path(id);
  store::EntryKey key{path, 0, 0};
  const bool versioned = file_version(dataset_, id, key.size, key.mtime_ns);
  if (versioned) {
    store::StoredImage stored;
    if (store_->get(key, entry, stored) == store::DecodedStore::Lookup::kHit) {
      store_hits_++;
      const image::ReducedView view{stored.pixels, stored.width, stored.height, stored.orientation};
      result = processor.process_reduced(view, cfg_.pixel_seed(), epoch, id, out);
      return;
    }
  }
  store_misses_++;
  if (!read_sample(item, id, epoch, file_buffer, result)) return;
  image::ReducedView view;
  result = processor.reduce(file_buffer, view);
  if (formats_.record(id, result.format)) {
    stoker::log::info("job {}: formats by content: {}", cfg_.name, formats_.summary());
  }
  if (!result.ok()) return;
  if (versioned) store_->put(key, store::StoredImage{view.width, view.height, view.orientation, view.pixels});
  const image::SampleResult done = processor.process_reduced(view, cfg_.pixel_seed(), epoch, id, out);
  result.error = done.error;
  result.reason = done.reason;
}

bool Job::start_prepare(unsigned threads) {
  if (!store_) return false;
  if (preparing_.exchange(true)) return true;  // one fill at a time
  // Threads of an earlier fill have ended (preparing_ was false): join them first.
  for (std::thread& t : prepare_threads_) t.join();
  prepare_threads_.clear();
  prepare_next_ = 0;
  prepare_done_ = 0;
  prepare_stored_ = 0;
  prepare_failed_ = 0;
  threads = std::clamp(threads, 1u, 64u);
  prepare_running_ = threads;
  stoker::log::info("job {}: prepare: filling decoded store {} ({} samples, {} thread(s))", cfg_.name,
                    store_->file().string(), dataset_.samples.size(), threads);
  for (unsigned i = 0; i < threads; ++i) prepare_threads_.emplace_back([this] { prepare_loop(); });
  return true;
}

// One prepare thread: each sample not stored yet (for its file's current version) is read,
// reduced and stored, as a worker's miss would; a stored one is skipped, so an interrupted
// fill resumes where it was.
void Job::prepare_loop() {
  image::SampleProcessor processor(cfg_.pipeline);
  std::vector<std::uint8_t> bytes;
  const std::uint64_t n = dataset_.samples.size();
  for (std::uint64_t id = prepare_next_++; id < n && !prepare_stop_.load() && !failed_.load(); id = prepare_next_++) {
    const auto i = static_cast<std::uint32_t>(id);
    const std::string path = dataset_.path(i);
    store::EntryKey key{path, 0, 0};
    if (quarantined_[i].load() != 0 || !file_version(dataset_, i, key.size, key.mtime_ns)) {
      prepare_failed_++;
    } else if (!store_->contains(key)) {
      image::ReducedView view;
      if (reader_->read(i, bytes).ok() && processor.reduce(bytes, view).ok()) {
        store_->put(key, store::StoredImage{view.width, view.height, view.orientation, view.pixels});
        if (store_->contains(key)) {
          prepare_stored_++;
        } else {
          prepare_failed_++;  // no room: counted as not stored, never as stored before
        }
      } else {
        prepare_failed_++;  // the worker that meets it in an epoch reports and quarantines it
      }
    }
    prepare_done_++;
  }
  if (prepare_running_.fetch_sub(1) == 1) {
    const std::uint64_t done = prepare_done_.load(), stored = prepare_stored_.load(), failed = prepare_failed_.load();
    stoker::log::info(
        "job {}: prepare: done, {} stored now, {} already stored, {} not stored (unreadable, undecodable or "
        "no room)",
        cfg_.name, stored, done - std::min(done, stored + failed), failed);
    preparing_.store(false);
  }
}

std::optional<JobStoreStats> Job::store_stats() const {
  if (!store_) return std::nullopt;
  JobStoreStats s;
  s.hits = store_hits_.load();
  s.misses = store_misses_.load();
  s.store = store_->stats();
  s.file = store_->file().string();
  s.preparing = preparing_.load();
  s.prepare_done = prepare_done_.load();
  s.prepare_stored = prepare_stored_.load();
  s.prepare_failed = prepare_failed_.load();
  s.total = dataset_.samples.size();
  return s;
}

}  // namespace stoker::job
